//! amdgpu DRM ioctl numbers and argument layouts (Linux uapi `amdgpu_drm.h`, `drm.h`): the
//! INFO queries, GEM buffers and their GPU virtual addresses, and user-mode queues.
//!
//! DRM copies in at most the size the kernel knows and zero-fills the rest, so the classic
//! 40-byte `drm_amdgpu_gem_va` (before the timeline fields were appended) works on every
//! kernel; zinc uses it.

use crate::ioctl::{iow, iowr};
use std::mem::{offset_of, size_of};

/// `drm_amdgpu_info`: 8-byte return pointer, size, query, 16-byte query-specific union.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DrmAmdgpuInfo {
    pub return_pointer: u64,
    pub return_size: u32,
    pub query: u32,
    /// For `HW_IP_INFO`: `[0]` ip type, `[1]` ip instance.
    pub args: [u32; 4],
}

/// `drm_amdgpu_userq_in` / `_out` union (72 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DrmAmdgpuUserq {
    pub op: u32,
    pub queue_id: u32,
    pub ip_type: u32,
    pub doorbell_handle: u32,
    /// Index of the doorbell inside the doorbell BO, in doorbell-sized (8-byte) units.
    pub doorbell_offset: u32,
    pub flags: u32,
    pub queue_va: u64,
    pub queue_size: u64,
    pub rptr_va: u64,
    pub wptr_va: u64,
    /// User pointer to the IP-specific MQD ([`MqdComputeGfx11`] for compute).
    pub mqd: u64,
    pub mqd_size: u64,
}

/// `drm_amdgpu_userq_mqd_compute_gfx11`: the compute queue's end-of-pipe buffer.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct MqdComputeGfx11 {
    pub eop_va: u64,
}

/// `drm_amdgpu_gem_create` (in: size, alignment, domains, flags; out: handle at 0).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DrmAmdgpuGemCreate {
    pub bo_size: u64,
    pub alignment: u64,
    pub domains: u64,
    pub domain_flags: u64,
}

/// `drm_amdgpu_gem_mmap` (in: handle; out: the fake offset to mmap the render node at).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DrmAmdgpuGemMmap {
    pub handle_or_offset: u64,
}

/// `drm_amdgpu_gem_va`, the classic 40-byte layout.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DrmAmdgpuGemVa {
    pub handle: u32,
    pub pad: u32,
    pub operation: u32,
    pub flags: u32,
    pub va_address: u64,
    pub offset_in_bo: u64,
    pub map_size: u64,
}

/// `drm_gem_close` (core DRM).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct DrmGemClose {
    pub handle: u32,
    pub pad: u32,
}

pub const DRM_IOCTL_AMDGPU_GEM_CREATE: u64 = iowr::<DrmAmdgpuGemCreate>(b'd', 0x40);
pub const DRM_IOCTL_AMDGPU_GEM_MMAP: u64 = iowr::<DrmAmdgpuGemMmap>(b'd', 0x41);
pub const DRM_IOCTL_AMDGPU_INFO: u64 = iow::<DrmAmdgpuInfo>(b'd', 0x40 + 0x05);
pub const DRM_IOCTL_AMDGPU_GEM_VA: u64 = iow::<DrmAmdgpuGemVa>(b'd', 0x40 + 0x08);
pub const DRM_IOCTL_AMDGPU_USERQ: u64 = iowr::<DrmAmdgpuUserq>(b'd', 0x40 + 0x16);
pub const DRM_IOCTL_GEM_CLOSE: u64 = iow::<DrmGemClose>(b'd', 0x09);

/// AMDGPU_INFO query ids.
pub const AMDGPU_INFO_HW_IP_INFO: u32 = 0x02;
pub const AMDGPU_INFO_DEV_INFO: u32 = 0x16;
pub const AMDGPU_INFO_UQ_FW_AREAS: u32 = 0x24;
/// `AMDGPU_HW_IP_COMPUTE`.
pub const AMDGPU_HW_IP_COMPUTE: u32 = 1;
/// USERQ ops.
pub const AMDGPU_USERQ_OP_CREATE: u32 = 1;
pub const AMDGPU_USERQ_OP_FREE: u32 = 2;

/// GEM memory domains.
pub mod domain {
    pub const GTT: u64 = 0x2;
    pub const VRAM: u64 = 0x4;
    pub const DOORBELL: u64 = 0x40;
}
/// GEM_VA operations.
pub const AMDGPU_VA_OP_MAP: u32 = 1;
pub const AMDGPU_VA_OP_UNMAP: u32 = 2;
/// GEM_VA page flags.
pub mod vm_page {
    pub const READABLE: u32 = 1 << 1;
    pub const WRITEABLE: u32 = 1 << 2;
    pub const EXECUTABLE: u32 = 1 << 3;
}

/// Byte offset of `userq_ip_mask` in `drm_amdgpu_info_device`.
pub const DEV_INFO_USERQ_IP_MASK_OFFSET: usize = 436;
/// Byte offset of `virtual_address_offset` (u64) in `drm_amdgpu_info_device`.
pub const DEV_INFO_VA_OFFSET_OFFSET: usize = 144;
/// Byte offset of `virtual_address_max` (u64).
pub const DEV_INFO_VA_MAX_OFFSET: usize = 152;
/// Byte offset of `virtual_address_alignment` (u32).
pub const DEV_INFO_VA_ALIGNMENT_OFFSET: usize = 160;
/// Bytes zinc asks for when querying `drm_amdgpu_info_device` (covers `userq_ip_mask`).
pub const DEV_INFO_QUERY_SIZE: usize = 512;
/// Byte offset of `userq_num_slots` in `drm_amdgpu_info_hw_ip`.
pub const HW_IP_USERQ_NUM_SLOTS_OFFSET: usize = 32;
/// Bytes zinc asks for when querying `drm_amdgpu_info_hw_ip`.
pub const HW_IP_QUERY_SIZE: usize = 64;
/// Bytes zinc offers for the `UQ_FW_AREAS` answer.
pub const UQ_FW_AREAS_QUERY_SIZE: usize = 64;

/// The start of `drm_amdgpu_info_device` up to the GPU virtual address range, laid out as the
/// header declares it; the offsets above are checked against it.
#[repr(C)]
#[allow(dead_code)]
struct InfoDevicePrefix {
    device_id: u32,
    chip_rev: u32,
    external_rev: u32,
    pci_rev: u32,
    family: u32,
    num_shader_engines: u32,
    num_shader_arrays_per_engine: u32,
    gpu_counter_freq: u32,
    max_engine_clock: u64,
    max_memory_clock: u64,
    cu_active_number: u32,
    cu_ao_mask: u32,
    cu_bitmap: [[u32; 4]; 4],
    enabled_rb_pipes_mask: u32,
    num_rb_pipes: u32,
    num_hw_gfx_contexts: u32,
    pcie_gen: u32,
    ids_flags: u64,
    virtual_address_offset: u64,
    virtual_address_max: u64,
    virtual_address_alignment: u32,
}

/// Reads a little-endian u64 at `offset` of `buf`, 0 past the end.
pub fn read_u64(buf: &[u8], offset: usize) -> u64 {
    buf.get(offset..offset + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
}

// Compile-time checks against the reference tables (shared/reference/amd-queues.md) and
// the uapi header.
const _: () = {
    assert!(size_of::<DrmAmdgpuInfo>() == 32);
    assert!(offset_of!(DrmAmdgpuInfo, args) == 16);
    assert!(size_of::<DrmAmdgpuUserq>() == 72);
    assert!(offset_of!(DrmAmdgpuUserq, doorbell_offset) == 16);
    assert!(offset_of!(DrmAmdgpuUserq, flags) == 20);
    assert!(offset_of!(DrmAmdgpuUserq, queue_va) == 24);
    assert!(offset_of!(DrmAmdgpuUserq, queue_size) == 32);
    assert!(offset_of!(DrmAmdgpuUserq, rptr_va) == 40);
    assert!(offset_of!(DrmAmdgpuUserq, wptr_va) == 48);
    assert!(offset_of!(DrmAmdgpuUserq, mqd) == 56);
    assert!(offset_of!(DrmAmdgpuUserq, mqd_size) == 64);
    assert!(size_of::<MqdComputeGfx11>() == 8);
    assert!(size_of::<DrmAmdgpuGemCreate>() == 32);
    assert!(offset_of!(DrmAmdgpuGemCreate, domains) == 16);
    assert!(size_of::<DrmAmdgpuGemMmap>() == 8);
    assert!(size_of::<DrmAmdgpuGemVa>() == 40);
    assert!(offset_of!(DrmAmdgpuGemVa, operation) == 8);
    assert!(offset_of!(DrmAmdgpuGemVa, va_address) == 16);
    assert!(offset_of!(DrmAmdgpuGemVa, map_size) == 32);
    assert!(size_of::<DrmGemClose>() == 8);
    assert!(offset_of!(InfoDevicePrefix, virtual_address_offset) == DEV_INFO_VA_OFFSET_OFFSET);
    assert!(offset_of!(InfoDevicePrefix, virtual_address_max) == DEV_INFO_VA_MAX_OFFSET);
    assert!(offset_of!(InfoDevicePrefix, virtual_address_alignment) == DEV_INFO_VA_ALIGNMENT_OFFSET);
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers as `amdgpu_drm.h` / `drm.h` expand them, written out independently.
    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        let table: &[(u64, u64)] = &[
            (DRM_IOCTL_AMDGPU_GEM_CREATE, 0xC0206440),
            (DRM_IOCTL_AMDGPU_GEM_MMAP, 0xC0086441),
            (DRM_IOCTL_AMDGPU_INFO, 0x40206445),
            (DRM_IOCTL_AMDGPU_GEM_VA, 0x40286448),
            (DRM_IOCTL_AMDGPU_USERQ, 0xC0486456),
            (DRM_IOCTL_GEM_CLOSE, 0x40086409),
        ];
        for &(ours, kernel) in table {
            assert_eq!(ours, kernel, "ioctl {ours:#x} should be {kernel:#x}");
        }
    }

    #[test]
    fn read_u64_past_the_end_reads_zero() {
        let buf = [1u8, 0, 0, 0, 0, 0, 0, 0, 9];
        assert_eq!(read_u64(&buf, 0), 1);
        assert_eq!(read_u64(&buf, 2), 0);
    }
}
