//! KFD ioctl numbers and argument layouts (Linux uapi `kfd_ioctl.h` 1.17), and the helpers
//! every ioctl definition shares; the amdgpu DRM ones are in [`crate::drm`].

use std::mem::{offset_of, size_of};

const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

/// Encodes an ioctl request number: `dir << 30 | size << 16 | type << 8 | nr`.
pub const fn ioc(dir: u64, ty: u8, nr: u8, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | ((ty as u64) << 8) | nr as u64
}
pub(crate) const fn ior<T>(ty: u8, nr: u8) -> u64 {
    ioc(IOC_READ, ty, nr, size_of::<T>())
}
pub(crate) const fn iow<T>(ty: u8, nr: u8) -> u64 {
    ioc(IOC_WRITE, ty, nr, size_of::<T>())
}
pub(crate) const fn iowr<T>(ty: u8, nr: u8) -> u64 {
    ioc(IOC_READ | IOC_WRITE, ty, nr, size_of::<T>())
}

/// The size encoded in a request number; the fake OS uses it to check argument buffers.
pub const fn ioc_size(request: u64) -> usize {
    ((request >> 16) & 0x3fff) as usize
}

// ---- KFD ('K') --------------------------------------------------------------------------

/// `AMDKFD_IOC_GET_VERSION` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdGetVersion {
    /// Interface major version.
    pub major: u32,
    /// Interface minor version.
    pub minor: u32,
}

/// `AMDKFD_IOC_CREATE_QUEUE` argument (interface 1.17 layout, 96 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdCreateQueue {
    pub ring_base_address: u64,
    pub write_pointer_address: u64,
    pub read_pointer_address: u64,
    pub doorbell_offset: u64,
    pub ring_size: u32,
    pub gpu_id: u32,
    pub queue_type: u32,
    pub queue_percentage: u32,
    pub queue_priority: u32,
    pub queue_id: u32,
    pub eop_buffer_address: u64,
    pub eop_buffer_size: u64,
    pub ctx_save_restore_address: u64,
    pub ctx_save_restore_size: u32,
    pub ctl_stack_size: u32,
    pub sdma_engine_id: u32,
    pub pad: u32,
}

/// `AMDKFD_IOC_DESTROY_QUEUE` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdDestroyQueue {
    pub queue_id: u32,
    pub pad: u32,
}

/// `AMDKFD_IOC_CREATE_EVENT` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdCreateEvent {
    pub event_page_offset: u64,
    pub event_trigger_data: u32,
    pub event_type: u32,
    pub auto_reset: u32,
    pub node_id: u32,
    pub event_id: u32,
    pub event_slot_index: u32,
}

/// `AMDKFD_IOC_DESTROY_EVENT` / `SET_EVENT` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdEventId {
    pub event_id: u32,
    pub pad: u32,
}

/// `AMDKFD_IOC_WAIT_EVENTS` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdWaitEvents {
    pub events_ptr: u64,
    pub num_events: u32,
    pub wait_for_all: u32,
    pub timeout: u32,
    pub wait_result: u32,
}

/// One element of the array `KfdWaitEvents::events_ptr` points to (48 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdEventData {
    pub payload: [u64; 4],
    pub kfd_event_data_ext: u64,
    pub event_id: u32,
    pub pad: u32,
}

/// `AMDKFD_IOC_ACQUIRE_VM` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdAcquireVm {
    pub drm_fd: u32,
    pub gpu_id: u32,
}

/// `AMDKFD_IOC_ALLOC_MEMORY_OF_GPU` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdAllocMemory {
    pub va_addr: u64,
    pub size: u64,
    pub handle: u64,
    pub mmap_offset: u64,
    pub gpu_id: u32,
    pub flags: u32,
}

/// `AMDKFD_IOC_FREE_MEMORY_OF_GPU` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdFreeMemory {
    pub handle: u64,
}

/// `AMDKFD_IOC_MAP_MEMORY_TO_GPU` / `UNMAP_MEMORY_FROM_GPU` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdMapMemory {
    pub handle: u64,
    pub device_ids_array_ptr: u64,
    pub n_devices: u32,
    pub n_success: u32,
}

/// `AMDKFD_IOC_RUNTIME_ENABLE` argument.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KfdRuntimeEnable {
    pub r_debug: u64,
    pub mode_mask: u32,
    pub capabilities_mask: u32,
}

pub const KFD_IOC_GET_VERSION: u64 = ior::<KfdGetVersion>(b'K', 0x01);
pub const KFD_IOC_CREATE_QUEUE: u64 = iowr::<KfdCreateQueue>(b'K', 0x02);
pub const KFD_IOC_DESTROY_QUEUE: u64 = iowr::<KfdDestroyQueue>(b'K', 0x03);
pub const KFD_IOC_CREATE_EVENT: u64 = iowr::<KfdCreateEvent>(b'K', 0x08);
pub const KFD_IOC_DESTROY_EVENT: u64 = iow::<KfdEventId>(b'K', 0x09);
pub const KFD_IOC_SET_EVENT: u64 = iow::<KfdEventId>(b'K', 0x0A);
pub const KFD_IOC_WAIT_EVENTS: u64 = iowr::<KfdWaitEvents>(b'K', 0x0C);
pub const KFD_IOC_ACQUIRE_VM: u64 = iow::<KfdAcquireVm>(b'K', 0x15);
pub const KFD_IOC_ALLOC_MEMORY_OF_GPU: u64 = iowr::<KfdAllocMemory>(b'K', 0x16);
pub const KFD_IOC_FREE_MEMORY_OF_GPU: u64 = iow::<KfdFreeMemory>(b'K', 0x17);
pub const KFD_IOC_MAP_MEMORY_TO_GPU: u64 = iowr::<KfdMapMemory>(b'K', 0x18);
pub const KFD_IOC_UNMAP_MEMORY_FROM_GPU: u64 = iowr::<KfdMapMemory>(b'K', 0x19);
pub const KFD_IOC_RUNTIME_ENABLE: u64 = iowr::<KfdRuntimeEnable>(b'K', 0x25);

/// KFD allocation flags.
pub mod alloc_flags {
    pub const VRAM: u32 = 1 << 0;
    pub const GTT: u32 = 1 << 1;
    pub const USERPTR: u32 = 1 << 2;
    pub const DOORBELL: u32 = 1 << 3;
    pub const MMIO_REMAP: u32 = 1 << 4;
    pub const CONTIGUOUS: u32 = 1 << 23;
    pub const EXT_COHERENT: u32 = 1 << 24;
    pub const UNCACHED: u32 = 1 << 25;
    pub const COHERENT: u32 = 1 << 26;
    pub const AQL_QUEUE_MEM: u32 = 1 << 27;
    pub const NO_SUBSTITUTE: u32 = 1 << 28;
    pub const PUBLIC: u32 = 1 << 29;
    pub const EXECUTABLE: u32 = 1 << 30;
    pub const WRITABLE: u32 = 1 << 31;
}

/// Views a plain-old-data ioctl struct as bytes for [`crate::os::Os::ioctl`].
pub fn as_bytes_mut<T: Copy>(v: &mut T) -> &mut [u8] {
    // SAFETY: T is a #[repr(C)] struct of integers (Copy, no padding holes with invalid
    // values); every byte pattern is a valid T.
    unsafe { std::slice::from_raw_parts_mut(v as *mut T as *mut u8, size_of::<T>()) }
}

/// Reads a little-endian u32 at `offset` of `buf`, 0 past the end (an older kernel that
/// copied back less leaves new fields zero, which reads as "unsupported").
pub fn read_u32(buf: &[u8], offset: usize) -> u32 {
    buf.get(offset..offset + 4).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

// Compile-time checks against the reference tables (shared/reference/amd-queues.md).
const _: () = {
    assert!(size_of::<KfdGetVersion>() == 8);
    assert!(size_of::<KfdCreateQueue>() == 96);
    assert!(offset_of!(KfdCreateQueue, doorbell_offset) == 24);
    assert!(offset_of!(KfdCreateQueue, ring_size) == 32);
    assert!(offset_of!(KfdCreateQueue, gpu_id) == 36);
    assert!(offset_of!(KfdCreateQueue, queue_type) == 40);
    assert!(offset_of!(KfdCreateQueue, queue_percentage) == 44);
    assert!(offset_of!(KfdCreateQueue, queue_priority) == 48);
    assert!(offset_of!(KfdCreateQueue, queue_id) == 52);
    assert!(offset_of!(KfdCreateQueue, eop_buffer_address) == 56);
    assert!(offset_of!(KfdCreateQueue, eop_buffer_size) == 64);
    assert!(offset_of!(KfdCreateQueue, ctx_save_restore_address) == 72);
    assert!(offset_of!(KfdCreateQueue, ctx_save_restore_size) == 80);
    assert!(offset_of!(KfdCreateQueue, ctl_stack_size) == 84);
    assert!(offset_of!(KfdCreateQueue, sdma_engine_id) == 88);
    assert!(size_of::<KfdDestroyQueue>() == 8);
    assert!(size_of::<KfdCreateEvent>() == 32);
    assert!(offset_of!(KfdCreateEvent, event_type) == 12);
    assert!(offset_of!(KfdCreateEvent, node_id) == 20);
    assert!(offset_of!(KfdCreateEvent, event_id) == 24);
    assert!(offset_of!(KfdCreateEvent, event_slot_index) == 28);
    assert!(size_of::<KfdEventId>() == 8);
    assert!(size_of::<KfdWaitEvents>() == 24);
    assert!(offset_of!(KfdWaitEvents, timeout) == 16);
    assert!(offset_of!(KfdWaitEvents, wait_result) == 20);
    assert!(size_of::<KfdEventData>() == 48);
    assert!(offset_of!(KfdEventData, kfd_event_data_ext) == 32);
    assert!(offset_of!(KfdEventData, event_id) == 40);
    assert!(size_of::<KfdAcquireVm>() == 8);
    assert!(size_of::<KfdAllocMemory>() == 40);
    assert!(offset_of!(KfdAllocMemory, handle) == 16);
    assert!(offset_of!(KfdAllocMemory, mmap_offset) == 24);
    assert!(offset_of!(KfdAllocMemory, gpu_id) == 32);
    assert!(offset_of!(KfdAllocMemory, flags) == 36);
    assert!(size_of::<KfdFreeMemory>() == 8);
    assert!(size_of::<KfdMapMemory>() == 24);
    assert!(offset_of!(KfdMapMemory, n_devices) == 16);
    assert!(offset_of!(KfdMapMemory, n_success) == 20);
    assert!(size_of::<KfdRuntimeEnable>() == 16);
    assert!(offset_of!(KfdRuntimeEnable, capabilities_mask) == 12);
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers as the reference table prints them, computed independently of `ioc`.
    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        let table: &[(u64, u64)] = &[
            (KFD_IOC_GET_VERSION, 0x80084B01),
            (KFD_IOC_CREATE_QUEUE, 0xC0604B02),
            (KFD_IOC_DESTROY_QUEUE, 0xC0084B03),
            (KFD_IOC_CREATE_EVENT, 0xC0204B08),
            (KFD_IOC_DESTROY_EVENT, 0x40084B09),
            (KFD_IOC_SET_EVENT, 0x40084B0A),
            (KFD_IOC_WAIT_EVENTS, 0xC0184B0C),
            (KFD_IOC_ACQUIRE_VM, 0x40084B15),
            (KFD_IOC_ALLOC_MEMORY_OF_GPU, 0xC0284B16),
            (KFD_IOC_FREE_MEMORY_OF_GPU, 0x40084B17),
            (KFD_IOC_MAP_MEMORY_TO_GPU, 0xC0184B18),
            (KFD_IOC_UNMAP_MEMORY_FROM_GPU, 0xC0184B19),
            (KFD_IOC_RUNTIME_ENABLE, 0xC0104B25),
        ];
        for &(ours, kernel) in table {
            assert_eq!(ours, kernel, "ioctl {ours:#x} should be {kernel:#x}");
        }
        assert_eq!(ioc_size(KFD_IOC_CREATE_QUEUE), 96);
    }

    #[test]
    fn read_u32_past_the_end_reads_zero() {
        let buf = [1u8, 0, 0, 0, 7];
        assert_eq!(read_u32(&buf, 0), 1);
        assert_eq!(read_u32(&buf, 1), 0x0700_0000);
        assert_eq!(read_u32(&buf, 4), 0);
    }
}
