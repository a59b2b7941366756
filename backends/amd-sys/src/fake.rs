//! A fake AMD node for tests: sysfs topology, device nodes and ioctl answers described by a
//! small TOML file. The real driver code runs against it unchanged through [`Os`].
//!
//! ```toml
//! [kfd]
//! present = true          # /dev/kfd exists
//! accessible = true       # opening it succeeds (false: EACCES)
//! version = [1, 17]
//!
//! [[gpus]]
//! name = "Emulated RDNA3"
//! gpu_id = 4242
//! gfx_target_version = 110000
//! simd_count = 96
//! simd_per_cu = 2
//! drm_render_minor = 128
//! memory_bytes = 17179869184
//!
//! [drm]
//! userq_ip_mask = 2       # bit 1: compute user queues
//! userq_compute_slots = 8
//! uq_fw_areas = true
//! info_errno = 0          # non-zero: every AMDGPU_INFO fails with this errno
//! ```

use crate::{
    emulator::{EventTable, FaultModes, HostKernel, Processor, QueueSpec},
    ioctl::{self, KfdGetVersion},
    os::{raw_mmap, raw_munmap, Fd, Os},
    topology::TOPOLOGY_NODES,
};
use serde::Deserialize;

mod drm;
pub use drm::{FAKE_VA_MAX, FAKE_VA_START};
use std::{
    collections::BTreeMap,
    io,
    path::{Path, PathBuf},
    sync::Mutex,
};
use std::{collections::HashMap, sync::Arc};

/// The KFD part of a fake node.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeKfd {
    /// Whether `/dev/kfd` exists.
    #[serde(default = "yes")]
    pub present: bool,
    /// Whether opening it succeeds.
    #[serde(default = "yes")]
    pub accessible: bool,
    /// Interface version answered by GET_VERSION.
    #[serde(default = "default_version")]
    pub version: [u32; 2],
}

/// One fake GPU.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeGpu {
    /// Marketing name.
    #[serde(default)]
    pub name: String,
    /// KFD gpu id.
    pub gpu_id: u32,
    /// `gfx_target_version`.
    pub gfx_target_version: u32,
    /// SIMDs.
    #[serde(default = "default_simds")]
    pub simd_count: u32,
    /// SIMDs per compute unit.
    #[serde(default = "default_simd_per_cu")]
    pub simd_per_cu: u32,
    /// Render node minor.
    pub drm_render_minor: u32,
    /// Local memory.
    #[serde(default)]
    pub memory_bytes: u64,
}

/// Answers of the amdgpu DRM INFO queries.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeDrm {
    /// `userq_ip_mask` in DEV_INFO.
    #[serde(default)]
    pub userq_ip_mask: u32,
    /// `userq_num_slots` in HW_IP_INFO for compute.
    #[serde(default)]
    pub userq_compute_slots: u32,
    /// Whether UQ_FW_AREAS succeeds.
    #[serde(default)]
    pub uq_fw_areas: bool,
    /// When non-zero, every INFO query fails with this errno.
    #[serde(default)]
    pub info_errno: i32,
}

/// A node description as written in the TOML file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeNodeSpec {
    /// KFD; absent means no `/dev/kfd` and no topology.
    pub kfd: Option<FakeKfd>,
    /// GPUs.
    #[serde(default)]
    pub gpus: Vec<FakeGpu>,
    /// DRM INFO answers.
    #[serde(default)]
    pub drm: FakeDrm,
    /// How the emulated packet processor misbehaves.
    #[serde(default)]
    pub emulator: FaultModes,
}

fn yes() -> bool {
    true
}
fn default_version() -> [u32; 2] {
    [1, 17]
}
fn default_simds() -> u32 {
    96
}
fn default_simd_per_cu() -> u32 {
    2
}

#[derive(Debug, Clone, Copy)]
enum Device {
    Kfd,
    Render,
}

/// Device-side state of the emulated KFD: allocations, queues, events.
#[derive(Default)]
struct KfdState {
    next_handle: u64,
    /// handle → (va, size)
    allocs: HashMap<u64, (u64, u64)>,
    /// doorbell page offset → host page
    doorbell_pages: HashMap<u64, usize>,
    queues: HashMap<u32, Processor>,
    next_queue: u32,
    next_event: u32,
}

/// Size the emulated node reports for queue buffers (topology `properties`).
pub const FAKE_EOP_SIZE: u64 = 4096;
/// Control stack size the emulated node reports.
pub const FAKE_CTL_STACK_SIZE: u64 = 4096;
/// Context-save area the emulated node reports.
pub const FAKE_CWSR_SIZE: u64 = 64 * 1024;
const DOORBELL_BASE: u64 = 0x4000_0000_0000;

/// A fake node implementing [`Os`].
pub struct FakeNode {
    spec: FakeNodeSpec,
    source: String,
    files: BTreeMap<PathBuf, String>,
    open: Mutex<BTreeMap<Fd, Device>>,
    kfd: Mutex<KfdState>,
    events: Arc<EventTable>,
    kernels: Arc<Mutex<HashMap<u64, HostKernel>>>,
    drm: Mutex<drm::DrmState>,
}

impl std::fmt::Debug for FakeNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeNode").field("source", &self.source).finish()
    }
}

fn errno(code: i32) -> io::Error {
    io::Error::from_raw_os_error(code)
}

impl FakeNode {
    /// Loads a node description.
    pub fn from_file(path: &Path) -> io::Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| io::Error::new(e.kind(), format!("emulated node file {}: {e}", path.display())))?;
        Self::from_toml(&text, &path.display().to_string())
    }

    /// Builds a node from TOML text; `source` names it in messages.
    pub fn from_toml(text: &str, source: &str) -> io::Result<Self> {
        let spec: FakeNodeSpec = toml::from_str(text)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("emulated node {source}: {e}")))?;
        let mut files = BTreeMap::new();
        if spec.kfd.is_some() {
            let nodes = Path::new(TOPOLOGY_NODES);
            // Node 0 is the CPU, as on a real machine: gpu_id 0.
            files.insert(nodes.join("0/gpu_id"), "0\n".to_string());
            files.insert(nodes.join("0/properties"), "cpu_cores_count 16\nsimd_count 0\n".into());
            for (i, g) in spec.gpus.iter().enumerate() {
                let dir = nodes.join((i + 1).to_string());
                files.insert(dir.join("gpu_id"), format!("{}\n", g.gpu_id));
                files.insert(dir.join("name"), format!("{}\n", g.name));
                files.insert(
                    dir.join("properties"),
                    format!(
                        "cpu_cores_count 0\nsimd_count {}\nsimd_per_cu {}\ngfx_target_version {}\ndrm_render_minor {}\n\
                         eop_buffer_size {FAKE_EOP_SIZE}\nctl_stack_size {FAKE_CTL_STACK_SIZE}\ncwsr_size {FAKE_CWSR_SIZE}\n",
                        g.simd_count, g.simd_per_cu, g.gfx_target_version, g.drm_render_minor
                    ),
                );
                files.insert(
                    dir.join("mem_banks/0/properties"),
                    format!("heap_type 1\nsize_in_bytes {}\n", g.memory_bytes),
                );
            }
        }
        Ok(Self {
            spec,
            source: source.to_string(),
            files,
            open: Mutex::new(BTreeMap::new()),
            kfd: Mutex::new(KfdState { next_handle: 1, next_queue: 1, next_event: 1, ..Default::default() }),
            events: Arc::new(EventTable::default()),
            kernels: Arc::new(Mutex::new(HashMap::new())),
            drm: Mutex::new(drm::DrmState::default()),
        })
    }

    /// Registers a host function as the kernel at `object` (the address a dispatch packet
    /// names): the emulated device runs it when a dispatch of that object retires.
    pub fn register_kernel(&self, object: u64, f: HostKernel) {
        self.kernels.lock().unwrap_or_else(|e| e.into_inner()).insert(object, f);
    }

    fn kfd_ioctl(&self, request: u64, arg: &mut [u8]) -> io::Result<()> {
        use crate::ioctl::*;
        let mut st = self.kfd.lock().unwrap_or_else(|e| e.into_inner());
        match request {
            KFD_IOC_ACQUIRE_VM | KFD_IOC_RUNTIME_ENABLE => Ok(()),
            KFD_IOC_ALLOC_MEMORY_OF_GPU => {
                let mut a: KfdAllocMemory = read(arg);
                if a.size == 0 || a.va_addr == 0 || !a.va_addr.is_multiple_of(4096) {
                    return Err(errno(libc::EINVAL));
                }
                let h = st.next_handle;
                st.next_handle += 1;
                st.allocs.insert(h, (a.va_addr, a.size));
                a.handle = h;
                a.mmap_offset = h << 32;
                arg.copy_from_slice(as_bytes_mut(&mut a));
                Ok(())
            }
            KFD_IOC_MAP_MEMORY_TO_GPU | KFD_IOC_UNMAP_MEMORY_FROM_GPU => {
                let mut m: KfdMapMemory = read(arg);
                if !st.allocs.contains_key(&m.handle) {
                    return Err(errno(libc::EINVAL));
                }
                m.n_success = m.n_devices;
                arg.copy_from_slice(as_bytes_mut(&mut m));
                Ok(())
            }
            KFD_IOC_FREE_MEMORY_OF_GPU => {
                let f: KfdFreeMemory = read(arg);
                st.allocs.remove(&f.handle).map(|_| ()).ok_or_else(|| errno(libc::EINVAL))
            }
            KFD_IOC_CREATE_QUEUE => self.create_queue(&mut st, arg),
            KFD_IOC_DESTROY_QUEUE => {
                let d: KfdDestroyQueue = read(arg);
                let p = st.queues.remove(&d.queue_id).ok_or_else(|| errno(libc::EINVAL))?;
                drop(st);
                drop(p); // joins the processor thread
                Ok(())
            }
            KFD_IOC_CREATE_EVENT => {
                let mut e: KfdCreateEvent = read(arg);
                let id = st.next_event;
                st.next_event += 1;
                self.events.events.lock().unwrap_or_else(|e| e.into_inner()).insert(id, (false, e.event_type));
                e.event_id = id;
                e.event_slot_index = id;
                arg.copy_from_slice(as_bytes_mut(&mut e));
                Ok(())
            }
            KFD_IOC_DESTROY_EVENT => {
                let e: KfdEventId = read(arg);
                self.events.events.lock().unwrap_or_else(|e| e.into_inner()).remove(&e.event_id);
                Ok(())
            }
            KFD_IOC_SET_EVENT => {
                let e: KfdEventId = read(arg);
                self.events.raise(e.event_id);
                Ok(())
            }
            KFD_IOC_WAIT_EVENTS => {
                drop(st);
                self.wait_events(arg)
            }
            _ => Err(errno(libc::ENOTTY)),
        }
    }

    /// `KFD_IOC_CREATE_QUEUE`: checks the ring and the context-save sizes the driver must
    /// pass, maps a doorbell page and starts the queue's packet processor.
    fn create_queue(&self, st: &mut KfdState, arg: &mut [u8]) -> io::Result<()> {
        use crate::ioctl::*;
        let mut q: KfdCreateQueue = read(arg);
        let ring_ok = q.ring_size.is_power_of_two() && q.ring_size as usize >= crate::aql::PACKET_BYTES;
        if !ring_ok || q.ring_base_address == 0 || q.read_pointer_address == 0 || q.write_pointer_address == 0 {
            return Err(errno(libc::EINVAL));
        }
        if q.eop_buffer_size != FAKE_EOP_SIZE
            || q.ctl_stack_size != FAKE_CTL_STACK_SIZE as u32
            || q.ctx_save_restore_size as u64 != FAKE_CWSR_SIZE
        {
            return Err(errno(libc::EINVAL));
        }
        let id = st.next_queue;
        st.next_queue += 1;
        let base = DOORBELL_BASE + (id as u64) * 0x2000;
        let page = raw_mmap(0, 0x2000, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE, None, 0)?;
        // Nothing rung yet: the doorbell reads as "last packet -1".
        // SAFETY: a fresh page of ours.
        unsafe { *(page as *mut i64) = -1 };
        st.doorbell_pages.insert(base, page);
        let spec = QueueSpec {
            ring: q.ring_base_address as usize,
            ring_bytes: q.ring_size as usize,
            read_ptr: q.read_pointer_address as usize,
            doorbell: page,
        };
        st.queues
            .insert(id, Processor::start(spec, self.kernels.clone(), self.events.clone(), self.spec.emulator.clone()));
        q.queue_id = id;
        q.doorbell_offset = base;
        arg.copy_from_slice(as_bytes_mut(&mut q));
        Ok(())
    }

    /// `KFD_IOC_WAIT_EVENTS`: waits until one (or every) listed event fired or the timeout
    /// passed, resetting the fired ones.
    fn wait_events(&self, arg: &mut [u8]) -> io::Result<()> {
        use crate::ioctl::*;
        let mut w: KfdWaitEvents = read(arg);
        let n = w.num_events as usize;
        // SAFETY: the driver passed an array of `n` event records.
        let list = unsafe { std::slice::from_raw_parts_mut(w.events_ptr as *mut KfdEventData, n) };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(w.timeout as u64);
        let mut table = self.events.events.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let fired: Vec<u32> =
                list.iter().map(|d| d.event_id).filter(|id| table.get(id).is_some_and(|e| e.0)).collect();
            let done = if w.wait_for_all != 0 { fired.len() == n } else { !fired.is_empty() };
            if done {
                for id in fired {
                    if let Some(e) = table.get_mut(&id) {
                        e.0 = false; // auto-reset
                    }
                    if let Some(d) = list.iter_mut().find(|d| d.event_id == id) {
                        d.payload[0] = 1;
                    }
                }
                w.wait_result = 0;
                break;
            }
            let now = std::time::Instant::now();
            if now >= deadline {
                w.wait_result = 1;
                break;
            }
            table = self.events.raised.wait_timeout(table, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
        arg.copy_from_slice(as_bytes_mut(&mut w));
        Ok(())
    }

    /// The description this node was built from.
    pub fn spec(&self) -> &FakeNodeSpec {
        &self.spec
    }

    fn device_at(&self, path: &Path) -> Option<Device> {
        if path == Path::new("/dev/kfd") {
            return self.spec.kfd.as_ref().filter(|k| k.present).map(|_| Device::Kfd);
        }
        let name = path.strip_prefix("/dev/dri").ok()?.to_str()?;
        let minor: u32 = name.strip_prefix("renderD")?.parse().ok()?;
        self.spec.gpus.iter().any(|g| g.drm_render_minor == minor).then_some(Device::Render)
    }
}

impl Os for FakeNode {
    fn read_to_string(&self, path: &Path) -> io::Result<String> {
        self.files.get(path).cloned().ok_or_else(|| errno(libc::ENOENT))
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<PathBuf>> {
        let mut out: Vec<PathBuf> = if path == Path::new("/dev/dri") {
            self.spec.gpus.iter().map(|g| PathBuf::from(format!("/dev/dri/renderD{}", g.drm_render_minor))).collect()
        } else {
            self.files
                .keys()
                .filter_map(|k| {
                    let rest = k.strip_prefix(path).ok()?;
                    let first = rest.components().next()?;
                    Some(path.join(first))
                })
                .collect()
        };
        out.sort();
        out.dedup();
        if out.is_empty() {
            return Err(errno(libc::ENOENT));
        }
        Ok(out)
    }

    fn open_rw(&self, path: &Path) -> io::Result<Fd> {
        let dev = self.device_at(path).ok_or_else(|| errno(libc::ENOENT))?;
        if matches!(dev, Device::Kfd) && !self.spec.kfd.as_ref().is_some_and(|k| k.accessible) {
            return Err(errno(libc::EACCES));
        }
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let fd = 1000 + open.len() as Fd;
        open.insert(fd, dev);
        Ok(fd)
    }

    fn close(&self, fd: Fd) {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).remove(&fd);
    }

    fn ioctl(&self, fd: Fd, request: u64, arg: &mut [u8]) -> io::Result<()> {
        if arg.len() != ioctl::ioc_size(request) {
            return Err(errno(libc::EINVAL));
        }
        let dev = *self.open.lock().unwrap_or_else(|e| e.into_inner()).get(&fd).ok_or_else(|| errno(libc::EBADF))?;
        match (dev, request) {
            (Device::Kfd, ioctl::KFD_IOC_GET_VERSION) => {
                let v = self.spec.kfd.as_ref().map_or([0, 0], |k| k.version);
                let mut out = KfdGetVersion { major: v[0], minor: v[1] };
                arg.copy_from_slice(ioctl::as_bytes_mut(&mut out));
                Ok(())
            }
            (Device::Render, _) => self.drm_ioctl(request, arg),
            (Device::Kfd, _) => self.kfd_ioctl(request, arg),
        }
    }

    fn mmap(&self, addr: usize, len: usize, prot: i32, flags: i32, fd: Option<Fd>, offset: u64) -> io::Result<usize> {
        let Some(fd) = fd else { return raw_mmap(addr, len, prot, flags, None, 0) };
        let dev = *self.open.lock().unwrap_or_else(|e| e.into_inner()).get(&fd).ok_or_else(|| errno(libc::EBADF))?;
        let st = self.kfd.lock().unwrap_or_else(|e| e.into_inner());
        match dev {
            // Doorbells: the page the queue's packet processor watches.
            Device::Kfd => st.doorbell_pages.get(&offset).copied().ok_or_else(|| errno(libc::EINVAL)),
            // Device memory: host memory at the same address (GPU address = host address).
            Device::Render => {
                drop(st);
                if let Some(gem) = self.gem_mmap(offset, len) {
                    return gem;
                }
                let st = self.kfd.lock().unwrap_or_else(|e| e.into_inner());
                let (va, size) = st.allocs.get(&(offset >> 32)).copied().ok_or_else(|| errno(libc::EINVAL))?;
                if flags & libc::MAP_FIXED == 0 || addr as u64 != va || len as u64 > size {
                    return Err(errno(libc::EINVAL));
                }
                raw_mmap(addr, len, prot, libc::MAP_PRIVATE | libc::MAP_FIXED, None, 0)
            }
        }
    }

    fn munmap(&self, addr: usize, len: usize) -> io::Result<()> {
        let st = self.kfd.lock().unwrap_or_else(|e| e.into_inner());
        if st.doorbell_pages.values().any(|&p| p == addr) {
            return Ok(()); // doorbell pages live as long as the node
        }
        drop(st);
        if self.is_gem_memory(addr) {
            return Ok(()); // GEM memory lives until GEM_CLOSE
        }
        raw_munmap(addr, len)
    }

    fn describe(&self) -> String {
        format!("emulated node {}", self.source)
    }

    fn is_emulated(&self) -> bool {
        true
    }

    fn register_host_kernel(&self, object: u64, f: HostKernel) -> bool {
        self.register_kernel(object, f);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gpu_nodes;

    const NODE: &str = r#"
        [kfd]
        version = [1, 16]
        [[gpus]]
        name = "Fake"
        gpu_id = 77
        gfx_target_version = 110000
        simd_count = 96
        simd_per_cu = 2
        drm_render_minor = 129
        memory_bytes = 1024
    "#;

    #[test]
    fn topology_is_read_back_through_the_os_trait() {
        let node = FakeNode::from_toml(NODE, "test").unwrap();
        let gpus = gpu_nodes(&node).unwrap();
        assert_eq!(gpus.len(), 1, "the CPU node must be skipped");
        assert_eq!(gpus[0].gpu_id, 77);
        assert_eq!(gpus[0].compute_units, 48);
        assert_eq!(gpus[0].drm_render_minor, 129);
        assert_eq!(gpus[0].local_memory_bytes, 1024);
        assert_eq!(gpus[0].gfx_target(), "gfx1100");
    }

    #[test]
    fn ioctl_with_a_wrong_sized_argument_is_refused() {
        let node = FakeNode::from_toml(NODE, "test").unwrap();
        let fd = node.open_rw(Path::new("/dev/kfd")).unwrap();
        let mut short = [0u8; 4];
        assert!(node.ioctl(fd, ioctl::KFD_IOC_GET_VERSION, &mut short).is_err());
        let mut v = KfdGetVersion::default();
        node.ioctl(fd, ioctl::KFD_IOC_GET_VERSION, ioctl::as_bytes_mut(&mut v)).unwrap();
        assert_eq!((v.major, v.minor), (1, 16));
    }

    #[test]
    fn unknown_fields_in_a_node_file_are_rejected() {
        let err = FakeNode::from_toml("[kfd]\npresnt = true\n", "typo.toml").unwrap_err();
        assert!(err.to_string().contains("typo.toml"), "{err}");
    }
}

/// An ioctl argument read as its struct.
fn read<T: Copy + Default>(arg: &[u8]) -> T {
    let mut v = T::default();
    crate::ioctl::as_bytes_mut(&mut v).copy_from_slice(arg);
    v
}
