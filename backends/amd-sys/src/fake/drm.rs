//! The fake node's amdgpu render node: INFO answers from the node file, GEM buffers backed by
//! host memory, GEM_VA mappings (GPU addresses differ from host addresses here, as on real
//! hardware), and compute user queues run by [`UserQueueProcessor`].

use super::{errno, FakeNode};
use crate::{
    drm::{self, *},
    ioctl::as_bytes_mut,
    os::{raw_mmap, raw_munmap},
    userq_emulator::{UserQueueProcessor, UserQueueSpec, VaMapping, VaSpace},
};
use std::{
    collections::HashMap,
    io,
    sync::{Arc, Mutex},
};

/// Start of the GPU virtual address range the fake reports (`virtual_address_offset`).
pub const FAKE_VA_START: u64 = 0x20_0000;
/// End of that range (`virtual_address_max`).
pub const FAKE_VA_MAX: u64 = 1 << 47;
/// Largest GEM buffer the fake creates.
const FAKE_MAX_BO: u64 = 1 << 30;
/// Tag of the fake mmap offsets GEM_MMAP hands out (KFD allocations use `handle << 32`).
const GEM_MMAP_TAG: u64 = 1 << 62;

struct GemBo {
    host: usize,
    size: u64,
    domain: u64,
}

struct LiveQueue {
    processor: UserQueueProcessor,
    /// GEM handles the queue uses; they may not be closed while it lives.
    handles: Vec<u32>,
}

/// Render-node state: buffers, mappings, queues.
#[derive(Default)]
pub(super) struct DrmState {
    next_handle: u32,
    bos: HashMap<u32, GemBo>,
    va: Arc<Mutex<VaSpace>>,
    queues: HashMap<u32, LiveQueue>,
    next_queue: u32,
}

fn read<T: Copy + Default>(arg: &[u8]) -> T {
    let mut v = T::default();
    as_bytes_mut(&mut v).copy_from_slice(arg);
    v
}

impl FakeNode {
    pub(super) fn drm_ioctl(&self, request: u64, arg: &mut [u8]) -> io::Result<()> {
        if request == DRM_IOCTL_AMDGPU_INFO {
            return self.amdgpu_info(arg);
        }
        let mut st = self.drm.lock().unwrap_or_else(|e| e.into_inner());
        match request {
            DRM_IOCTL_AMDGPU_GEM_CREATE => {
                let c: DrmAmdgpuGemCreate = read(arg);
                let known = [domain::GTT, domain::VRAM, domain::DOORBELL].contains(&c.domains);
                if c.bo_size == 0 || c.bo_size > FAKE_MAX_BO || !known {
                    return Err(errno(libc::EINVAL));
                }
                let size = c.bo_size.div_ceil(4096) * 4096;
                let host = raw_mmap(0, size as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE, None, 0)?;
                st.next_handle += 1;
                let handle = st.next_handle;
                st.bos.insert(handle, GemBo { host, size, domain: c.domains });
                arg.fill(0);
                arg[0..4].copy_from_slice(&handle.to_le_bytes());
                Ok(())
            }
            DRM_IOCTL_AMDGPU_GEM_MMAP => {
                let handle = read::<DrmAmdgpuGemMmap>(arg).handle_or_offset as u32;
                if !st.bos.contains_key(&handle) {
                    return Err(errno(libc::ENOENT));
                }
                let mut out = DrmAmdgpuGemMmap { handle_or_offset: GEM_MMAP_TAG | (handle as u64) << 12 };
                arg.copy_from_slice(as_bytes_mut(&mut out));
                Ok(())
            }
            DRM_IOCTL_AMDGPU_GEM_VA => {
                let v: DrmAmdgpuGemVa = read(arg);
                let bo = st.bos.get(&v.handle).ok_or_else(|| errno(libc::ENOENT))?;
                let mut space = st.va.lock().unwrap_or_else(|e| e.into_inner());
                match v.operation {
                    AMDGPU_VA_OP_MAP => {
                        let aligned = v.va_address.is_multiple_of(4096)
                            && v.map_size.is_multiple_of(4096)
                            && v.offset_in_bo.is_multiple_of(4096);
                        let in_range = v.va_address >= FAKE_VA_START
                            && v.va_address.checked_add(v.map_size).is_some_and(|e| e <= FAKE_VA_MAX);
                        let in_bo = v.offset_in_bo.checked_add(v.map_size).is_some_and(|e| e <= bo.size);
                        if !aligned || !in_range || !in_bo || v.map_size == 0 || bo.domain == domain::DOORBELL {
                            return Err(errno(libc::EINVAL));
                        }
                        if space.overlaps(v.va_address, v.map_size) {
                            return Err(errno(libc::EINVAL));
                        }
                        let host = bo.host + v.offset_in_bo as usize;
                        space.maps.push(VaMapping { va: v.va_address, size: v.map_size, host, handle: v.handle });
                        Ok(())
                    }
                    AMDGPU_VA_OP_UNMAP => {
                        let before = space.maps.len();
                        space.maps.retain(|m| !(m.va == v.va_address && m.handle == v.handle));
                        if space.maps.len() == before {
                            return Err(errno(libc::ENOENT));
                        }
                        Ok(())
                    }
                    _ => Err(errno(libc::EINVAL)),
                }
            }
            DRM_IOCTL_GEM_CLOSE => {
                let handle = read::<DrmGemClose>(arg).handle;
                if st.queues.values().any(|q| q.handles.contains(&handle)) {
                    // The fake frees memory at close; the kernel would keep a reference.
                    // Either way a driver must free its queues before their buffers.
                    return Err(errno(libc::EBUSY));
                }
                let bo = st.bos.remove(&handle).ok_or_else(|| errno(libc::ENOENT))?;
                st.va.lock().unwrap_or_else(|e| e.into_inner()).maps.retain(|m| m.handle != handle);
                let _ = raw_munmap(bo.host, bo.size as usize);
                Ok(())
            }
            DRM_IOCTL_AMDGPU_USERQ => {
                let mut q: DrmAmdgpuUserq = read(arg);
                match q.op {
                    AMDGPU_USERQ_OP_CREATE => {
                        let id = self.create_user_queue(&mut st, &q)?;
                        // The answer overlays the request (a union): the id goes in the first u32.
                        q.op = id;
                        arg.copy_from_slice(as_bytes_mut(&mut q));
                        Ok(())
                    }
                    AMDGPU_USERQ_OP_FREE => {
                        let live = st.queues.remove(&q.queue_id).ok_or_else(|| errno(libc::EINVAL))?;
                        drop(st);
                        drop(live); // joins the queue's thread
                        Ok(())
                    }
                    _ => Err(errno(libc::EINVAL)),
                }
            }
            _ => Err(errno(libc::ENOTTY)),
        }
    }

    /// Checks a USERQ CREATE the way the kernel does (compute only here): slots, doorbell
    /// BO and index, queue/rptr/wptr/EOP addresses mapped with the sizes claimed, MQD size.
    fn create_user_queue(&self, st: &mut DrmState, q: &DrmAmdgpuUserq) -> io::Result<u32> {
        let d = &self.spec.drm;
        if d.info_errno != 0 {
            return Err(errno(d.info_errno));
        }
        if q.ip_type != AMDGPU_HW_IP_COMPUTE || d.userq_ip_mask & (1 << AMDGPU_HW_IP_COMPUTE) == 0 {
            return Err(errno(libc::EINVAL));
        }
        if st.queues.len() as u32 >= d.userq_compute_slots {
            return Err(errno(libc::ENOSPC));
        }
        if q.mqd_size != std::mem::size_of::<MqdComputeGfx11>() as u64 || q.mqd == 0 {
            return Err(errno(libc::EINVAL));
        }
        // SAFETY: the driver under test passed a pointer to its MQD of `mqd_size` bytes.
        let mqd = unsafe { *(q.mqd as *const MqdComputeGfx11) };
        let doorbell = st.bos.get(&q.doorbell_handle).filter(|b| b.domain == domain::DOORBELL);
        let doorbell = doorbell.ok_or_else(|| errno(libc::EINVAL))?;
        let db_at = q.doorbell_offset as u64 * 8;
        if db_at + 8 > doorbell.size {
            return Err(errno(libc::EINVAL));
        }
        let doorbell_host = doorbell.host + db_at as usize;
        let space = st.va.lock().unwrap_or_else(|e| e.into_inner());
        let ring_ok = q.queue_size >= 256 && q.queue_size.is_power_of_two();
        let mapped = |va: u64, len: u64| space.translate(va, len).ok_or_else(|| errno(libc::EINVAL));
        if !ring_ok || !q.rptr_va.is_multiple_of(8) || !q.wptr_va.is_multiple_of(8) {
            return Err(errno(libc::EINVAL));
        }
        mapped(q.queue_va, q.queue_size)?;
        let rptr = mapped(q.rptr_va, 8)?;
        let wptr = mapped(q.wptr_va, 8)?;
        mapped(mqd.eop_va, 4096)?;
        let handles: Vec<u32> = [q.queue_va, q.rptr_va, q.wptr_va, mqd.eop_va]
            .iter()
            .filter_map(|&va| space.maps.iter().find(|m| va >= m.va && va < m.va + m.size).map(|m| m.handle))
            .chain([q.doorbell_handle])
            .collect();
        drop(space);
        let spec = UserQueueSpec { ring_va: q.queue_va, ring_bytes: q.queue_size, wptr, rptr, doorbell: doorbell_host };
        let processor = UserQueueProcessor::start(spec, st.va.clone(), self.spec.emulator.clone());
        st.next_queue += 1;
        let id = st.next_queue;
        st.queues.insert(id, LiveQueue { processor, handles });
        Ok(id)
    }

    /// The host memory behind a GEM mmap offset, for [`crate::Os::mmap`] on the render node.
    pub(super) fn gem_mmap(&self, offset: u64, len: usize) -> Option<io::Result<usize>> {
        if offset & GEM_MMAP_TAG == 0 {
            return None;
        }
        let st = self.drm.lock().unwrap_or_else(|e| e.into_inner());
        let handle = ((offset & !GEM_MMAP_TAG) >> 12) as u32;
        Some(match st.bos.get(&handle) {
            Some(bo) if len as u64 <= bo.size => Ok(bo.host),
            _ => Err(errno(libc::EINVAL)),
        })
    }

    /// True when `addr` is a GEM buffer's host memory (unmapping it is a no-op: the memory
    /// lives until GEM_CLOSE).
    pub(super) fn is_gem_memory(&self, addr: usize) -> bool {
        self.drm.lock().unwrap_or_else(|e| e.into_inner()).bos.values().any(|b| b.host == addr)
    }

    /// Live user queues, for tests that check teardown.
    pub fn user_queue_count(&self) -> usize {
        self.drm.lock().unwrap_or_else(|e| e.into_inner()).queues.len()
    }

    /// Why user queue `id` stopped, if it faulted (a GPU page fault, a bad packet), for tests
    /// that check the emulated device saw the fault they caused.
    pub fn user_queue_fault(&self, id: u32) -> Option<String> {
        self.drm.lock().unwrap_or_else(|e| e.into_inner()).queues.get(&id).and_then(|q| q.processor.fault())
    }

    /// Live GEM buffers, for tests that check teardown.
    pub fn gem_buffer_count(&self) -> usize {
        self.drm.lock().unwrap_or_else(|e| e.into_inner()).bos.len()
    }

    /// Answers AMDGPU_INFO from the node file.
    fn amdgpu_info(&self, arg: &mut [u8]) -> io::Result<()> {
        if self.spec.drm.info_errno != 0 {
            return Err(errno(self.spec.drm.info_errno));
        }
        let req: DrmAmdgpuInfo = read(arg);
        let mut answer = vec![0u8; req.return_size as usize];
        let mut put = |offset: usize, v: &[u8]| {
            if let Some(b) = answer.get_mut(offset..offset + v.len()) {
                b.copy_from_slice(v);
            }
        };
        match req.query {
            AMDGPU_INFO_DEV_INFO => {
                put(drm::DEV_INFO_USERQ_IP_MASK_OFFSET, &self.spec.drm.userq_ip_mask.to_le_bytes());
                put(drm::DEV_INFO_VA_OFFSET_OFFSET, &FAKE_VA_START.to_le_bytes());
                put(drm::DEV_INFO_VA_MAX_OFFSET, &FAKE_VA_MAX.to_le_bytes());
                put(drm::DEV_INFO_VA_ALIGNMENT_OFFSET, &4096u32.to_le_bytes());
            }
            AMDGPU_INFO_HW_IP_INFO if req.args[0] == AMDGPU_HW_IP_COMPUTE => {
                put(drm::HW_IP_USERQ_NUM_SLOTS_OFFSET, &self.spec.drm.userq_compute_slots.to_le_bytes())
            }
            AMDGPU_INFO_HW_IP_INFO => {}
            AMDGPU_INFO_UQ_FW_AREAS if self.spec.drm.uq_fw_areas => {}
            _ => return Err(errno(libc::EINVAL)),
        }
        if req.return_pointer == 0 {
            return Err(errno(libc::EFAULT));
        }
        // SAFETY: the driver under test passed a live buffer of `return_size` bytes.
        unsafe { std::ptr::copy_nonoverlapping(answer.as_ptr(), req.return_pointer as *mut u8, answer.len()) };
        Ok(())
    }
}
