//! AQL packets and HSA signals as the packet processor reads them (ROCR's `hsa.h`,
//! `amd_hsa_signal.h`, `amd_hsa_queue.h`; `shared/reference/amd-queues.md`).

use std::mem::{offset_of, size_of};

/// Packet types (header bits 0-7).
pub mod packet_type {
    pub const INVALID: u16 = 1;
    pub const KERNEL_DISPATCH: u16 = 2;
    pub const BARRIER_AND: u16 = 3;
    pub const BARRIER_OR: u16 = 5;
}

/// Header bit 8: wait for earlier packets to complete before launching.
pub const HEADER_BARRIER: u16 = 1 << 8;
/// System-scope acquire (bits 9-10) and release (bits 11-12).
pub const HEADER_SYSTEM_SCOPES: u16 = (2 << 9) | (2 << 11);
/// A kernel dispatch with barrier bit and system-scope fences.
pub const DISPATCH_HEADER: u16 = packet_type::KERNEL_DISPATCH | HEADER_BARRIER | HEADER_SYSTEM_SCOPES;
/// A barrier-AND with system-scope fences.
pub const BARRIER_AND_HEADER: u16 = packet_type::BARRIER_AND | HEADER_BARRIER | HEADER_SYSTEM_SCOPES;

/// Bytes per packet.
pub const PACKET_BYTES: usize = 64;

/// `hsa_kernel_dispatch_packet_t`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelDispatchPacket {
    pub header: u16,
    pub setup: u16,
    pub workgroup_size_x: u16,
    pub workgroup_size_y: u16,
    pub workgroup_size_z: u16,
    pub reserved0: u16,
    pub grid_size_x: u32,
    pub grid_size_y: u32,
    pub grid_size_z: u32,
    pub private_segment_size: u32,
    pub group_segment_size: u32,
    pub kernel_object: u64,
    pub kernarg_address: u64,
    pub reserved2: u64,
    pub completion_signal: u64,
}

/// `hsa_barrier_and_packet_t`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct BarrierAndPacket {
    pub header: u16,
    pub reserved0: u16,
    pub reserved1: u32,
    pub dep_signal: [u64; 5],
    pub reserved2: u64,
    pub completion_signal: u64,
}

/// `amd_signal_t` (64 bytes, 64-byte aligned).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct AmdSignal {
    pub kind: i64,
    pub value: i64,
    pub event_mailbox_ptr: u64,
    pub event_id: u32,
    pub reserved1: u32,
    pub start_ts: u64,
    pub end_ts: u64,
    pub reserved2: [u64; 2],
}

/// `AMD_SIGNAL_KIND_USER`.
pub const SIGNAL_KIND_USER: i64 = 1;

/// Byte offsets in the `amd_queue_t` page that the driver and packet processor share.
pub mod queue_offsets {
    /// `write_dispatch_id` (u64): next packet index the producer will write.
    pub const WRITE_DISPATCH_ID: usize = 56;
    /// `read_dispatch_id` (u64): next packet index the packet processor will read.
    pub const READ_DISPATCH_ID: usize = 128;
}

const _: () = {
    assert!(size_of::<KernelDispatchPacket>() == PACKET_BYTES);
    assert!(offset_of!(KernelDispatchPacket, workgroup_size_x) == 4);
    assert!(offset_of!(KernelDispatchPacket, grid_size_x) == 12);
    assert!(offset_of!(KernelDispatchPacket, private_segment_size) == 24);
    assert!(offset_of!(KernelDispatchPacket, group_segment_size) == 28);
    assert!(offset_of!(KernelDispatchPacket, kernel_object) == 32);
    assert!(offset_of!(KernelDispatchPacket, kernarg_address) == 40);
    assert!(offset_of!(KernelDispatchPacket, completion_signal) == 56);
    assert!(size_of::<BarrierAndPacket>() == PACKET_BYTES);
    assert!(offset_of!(BarrierAndPacket, dep_signal) == 8);
    assert!(offset_of!(BarrierAndPacket, completion_signal) == 56);
    assert!(size_of::<AmdSignal>() == 64);
    assert!(offset_of!(AmdSignal, value) == 8);
    assert!(offset_of!(AmdSignal, event_mailbox_ptr) == 16);
    assert!(offset_of!(AmdSignal, event_id) == 24);
    assert!(offset_of!(AmdSignal, start_ts) == 32);
    assert!(offset_of!(AmdSignal, end_ts) == 40);
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_match_the_reference_values() {
        assert_eq!(DISPATCH_HEADER, 0x1502);
        assert_eq!(BARRIER_AND_HEADER, 0x1503);
    }
}
