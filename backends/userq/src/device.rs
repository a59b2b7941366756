//! An amdgpu render node opened for user queues: GEM buffers, CPU mappings of them, and GPU
//! virtual addresses zinc chooses inside the range DEV_INFO reports (amdgpu leaves VA
//! placement to user space).

use crate::probe::info;
use std::{
    path::Path,
    sync::{Arc, Mutex},
};
use zinc_amd_sys::{
    drm::{self, *},
    ioctl::as_bytes_mut,
    os::Fd,
    Os,
};

/// A driver error with the step that failed.
pub type DriverResult<T> = Result<T, String>;

/// An open render node.
pub struct UserqDevice {
    os: Arc<dyn Os>,
    fd: Fd,
    /// The render node's path, for messages.
    pub path: String,
    va: Mutex<VaRange>,
}

/// A bump allocator over the GPU virtual range. Addresses are not reused: zinc's queues and
/// their buffers live for the process, so a free list would buy nothing yet.
struct VaRange {
    next: u64,
    end: u64,
    align: u64,
}

/// A GEM buffer with its optional CPU mapping and GPU address.
#[derive(Debug, Clone, Copy)]
pub struct Bo {
    /// GEM handle.
    pub handle: u32,
    /// Bytes (page-rounded).
    pub size: u64,
    /// GPU virtual address, 0 when not mapped for the GPU.
    pub va: u64,
    /// CPU address, 0 when not mapped for the CPU.
    pub cpu: usize,
}

/// Where a buffer should be visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// CPU and GPU (rings, pointers, fences).
    Shared,
    /// GPU only (the EOP buffer).
    GpuOnly,
    /// CPU only (the doorbell page: the GPU is told about it by handle, not address).
    CpuOnly,
}

impl UserqDevice {
    /// Opens `path` and reads the GPU virtual address range from DEV_INFO.
    pub fn open(os: Arc<dyn Os>, path: &str) -> DriverResult<UserqDevice> {
        let fd = os.open_rw(Path::new(path)).map_err(|e| format!("opening {path}: {e}"))?;
        let mut dev = vec![0u8; DEV_INFO_QUERY_SIZE];
        if let Err(e) = info(&*os, fd, AMDGPU_INFO_DEV_INFO, 0, &mut dev) {
            os.close(fd);
            return Err(format!("{path}: DEV_INFO: {e}"));
        }
        let start = drm::read_u64(&dev, DEV_INFO_VA_OFFSET_OFFSET);
        let end = drm::read_u64(&dev, DEV_INFO_VA_MAX_OFFSET);
        let align = (zinc_amd_sys::ioctl::read_u32(&dev, DEV_INFO_VA_ALIGNMENT_OFFSET) as u64).max(4096);
        if end <= start || !align.is_power_of_two() {
            os.close(fd);
            return Err(format!("{path}: DEV_INFO reports no usable GPU address range ({start:#x}..{end:#x})"));
        }
        let next = start.div_ceil(align) * align;
        Ok(UserqDevice { os, fd, path: path.to_string(), va: Mutex::new(VaRange { next, end, align }) })
    }

    /// The OS this device talks through.
    pub fn os(&self) -> &Arc<dyn Os> {
        &self.os
    }

    /// Issues a DRM ioctl on the render node.
    pub fn ioctl<T: Copy>(&self, request: u64, arg: &mut T, step: &str) -> DriverResult<()> {
        self.os.ioctl(self.fd, request, as_bytes_mut(arg)).map_err(|e| format!("{step}: {e}"))
    }

    fn take_va(&self, size: u64) -> DriverResult<u64> {
        let mut r = self.va.lock().unwrap_or_else(|e| e.into_inner());
        let va = r.next;
        let next = va.checked_add(size.div_ceil(r.align) * r.align).filter(|&n| n <= r.end);
        r.next = next.ok_or_else(|| format!("GPU address range exhausted allocating {size} bytes"))?;
        Ok(va)
    }

    /// Creates a GEM buffer in `domain` and maps it as `access` asks.
    pub fn alloc(&self, size: u64, domain: u64, access: Access) -> DriverResult<Bo> {
        let size = size.div_ceil(4096) * 4096;
        let mut create = DrmAmdgpuGemCreate { bo_size: size, alignment: 4096, domains: domain, domain_flags: 0 };
        self.ioctl(DRM_IOCTL_AMDGPU_GEM_CREATE, &mut create, "GEM_CREATE")?;
        // The answer overlays the request (a union): the handle is the first u32.
        let mut bo = Bo { handle: create.bo_size as u32, size, va: 0, cpu: 0 };
        let mapped = (|| -> DriverResult<()> {
            if access != Access::GpuOnly {
                let mut m = DrmAmdgpuGemMmap { handle_or_offset: bo.handle as u64 };
                self.ioctl(DRM_IOCTL_AMDGPU_GEM_MMAP, &mut m, "GEM_MMAP")?;
                let prot = libc::PROT_READ | libc::PROT_WRITE;
                bo.cpu = self
                    .os
                    .mmap(0, size as usize, prot, libc::MAP_SHARED, Some(self.fd), m.handle_or_offset)
                    .map_err(|e| format!("mapping GEM buffer {} for the CPU: {e}", bo.handle))?;
            }
            if access != Access::CpuOnly {
                let va = self.take_va(size)?;
                let mut v = DrmAmdgpuGemVa {
                    handle: bo.handle,
                    operation: AMDGPU_VA_OP_MAP,
                    flags: vm_page::READABLE | vm_page::WRITEABLE | vm_page::EXECUTABLE,
                    va_address: va,
                    map_size: size,
                    ..Default::default()
                };
                self.ioctl(DRM_IOCTL_AMDGPU_GEM_VA, &mut v, "GEM_VA map")?;
                bo.va = va;
            }
            Ok(())
        })();
        match mapped {
            Ok(()) => Ok(bo),
            Err(e) => {
                self.free(bo);
                Err(e)
            }
        }
    }

    /// Unmaps and closes a buffer (GPU mapping, CPU mapping, handle).
    pub fn free(&self, bo: Bo) {
        if bo.va != 0 {
            let mut v = DrmAmdgpuGemVa {
                handle: bo.handle,
                operation: AMDGPU_VA_OP_UNMAP,
                va_address: bo.va,
                map_size: bo.size,
                ..Default::default()
            };
            let _ = self.ioctl(DRM_IOCTL_AMDGPU_GEM_VA, &mut v, "GEM_VA unmap");
        }
        if bo.cpu != 0 {
            let _ = self.os.munmap(bo.cpu, bo.size as usize);
        }
        let mut c = DrmGemClose { handle: bo.handle, pad: 0 };
        let _ = self.ioctl(DRM_IOCTL_GEM_CLOSE, &mut c, "GEM_CLOSE");
    }
}

impl Drop for UserqDevice {
    fn drop(&mut self) {
        self.os.close(self.fd);
    }
}
