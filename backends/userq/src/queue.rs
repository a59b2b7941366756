//! A compute user-mode queue: a PM4 ring, read and write pointers, an EOP buffer and a
//! doorbell, created with `DRM_IOCTL_AMDGPU_USERQ` and fed without any further system call:
//! write packets, publish the write pointer, ring the doorbell.

use crate::device::{Access, Bo, DriverResult, UserqDevice};
use std::{
    sync::atomic::{fence, AtomicU32, AtomicU64, Ordering::*},
    time::{Duration, Instant},
};
use zinc_amd_sys::drm::*;

/// The doorbell's index inside the doorbell page (any index in the page works; in 8-byte
/// doorbell units).
pub const DOORBELL_INDEX: u32 = 4;

/// A live compute user queue.
pub struct UserQueue {
    /// The kernel's queue id.
    pub id: u32,
    ring: Bo,
    wptr: Bo,
    rptr: Bo,
    eop: Bo,
    doorbell: Bo,
    ring_dw: u64,
    /// Dwords written so far (the write pointer; never wrapped).
    next: u64,
}

// SAFETY (whole module): the addresses are CPU mappings of GEM buffers this queue owns and
// frees only in `free`, after the kernel has unmapped the queue.
unsafe fn u64_at(addr: usize) -> &'static AtomicU64 {
    &*(addr as *const AtomicU64)
}

impl UserQueue {
    /// Allocates the queue's buffers and creates it. `ring_bytes` must be a power of two of
    /// at least 256.
    pub fn create(dev: &UserqDevice, ring_bytes: u64) -> DriverResult<UserQueue> {
        if ring_bytes < 256 || !ring_bytes.is_power_of_two() {
            return Err(format!("user queue ring of {ring_bytes} bytes: must be a power of two ≥ 256"));
        }
        let mut made: Vec<Bo> = Vec::new();
        let result = (|| -> DriverResult<UserQueue> {
            let mut take = |size, domain, access| -> DriverResult<Bo> {
                let bo = dev.alloc(size, domain, access)?;
                made.push(bo);
                Ok(bo)
            };
            let ring = take(ring_bytes, domain::GTT, Access::Shared)?;
            let wptr = take(4096, domain::GTT, Access::Shared)?;
            let rptr = take(4096, domain::GTT, Access::Shared)?;
            let eop = take(4096, domain::VRAM, Access::GpuOnly)?;
            let doorbell = take(4096, domain::DOORBELL, Access::CpuOnly)?;
            let mut mqd = MqdComputeGfx11 { eop_va: eop.va };
            let mut q = DrmAmdgpuUserq {
                op: AMDGPU_USERQ_OP_CREATE,
                ip_type: AMDGPU_HW_IP_COMPUTE,
                doorbell_handle: doorbell.handle,
                doorbell_offset: DOORBELL_INDEX,
                queue_va: ring.va,
                queue_size: ring_bytes,
                rptr_va: rptr.va,
                wptr_va: wptr.va,
                mqd: &mut mqd as *mut MqdComputeGfx11 as u64,
                mqd_size: std::mem::size_of::<MqdComputeGfx11>() as u64,
                ..Default::default()
            };
            dev.ioctl(DRM_IOCTL_AMDGPU_USERQ, &mut q, "USERQ create").map_err(|e| {
                if e.contains("No space left") {
                    format!("{e} (every compute user-queue slot is taken)")
                } else {
                    e
                }
            })?;
            // The answer overlays the request: the queue id is the first u32.
            Ok(UserQueue { id: q.op, ring, wptr, rptr, eop, doorbell, ring_dw: ring_bytes / 4, next: 0 })
        })();
        if result.is_err() {
            for bo in made {
                dev.free(bo);
            }
        }
        result
    }

    /// The GPU's read pointer (dwords consumed).
    pub fn read_pointer(&self) -> u64 {
        unsafe { u64_at(self.rptr.cpu) }.load(Acquire)
    }

    /// The write pointer (dwords published).
    pub fn write_pointer(&self) -> u64 {
        self.next
    }

    /// The value last written to the doorbell.
    pub fn doorbell_value(&self) -> u64 {
        unsafe { u64_at(self.doorbell.cpu + DOORBELL_INDEX as usize * 8) }.load(Acquire)
    }

    /// Ring bytes and GPU address, for evidence.
    pub fn ring(&self) -> (u64, u64) {
        (self.ring_dw * 4, self.ring.va)
    }

    /// The doorbell buffer's handle, for evidence.
    pub fn doorbell_handle(&self) -> u32 {
        self.doorbell.handle
    }

    /// Copies `packet` into the ring, waiting up to `timeout` for room (back-pressure), then
    /// publishes the write pointer and rings the doorbell with it. Returns the new write
    /// pointer.
    pub fn submit(&mut self, packet: &[u32], timeout: Duration) -> DriverResult<u64> {
        let n = packet.len() as u64;
        if n == 0 || n > self.ring_dw {
            return Err(format!("a {n}-dword packet does not fit a {}-dword ring", self.ring_dw));
        }
        let deadline = Instant::now() + timeout;
        while self.next + n - self.read_pointer() > self.ring_dw {
            if Instant::now() >= deadline {
                return Err(format!(
                    "the ring stayed full for {timeout:?} (read pointer {}, write pointer {})",
                    self.read_pointer(),
                    self.next
                ));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        for (i, &dw) in packet.iter().enumerate() {
            let slot = (self.next + i as u64) % self.ring_dw;
            // SAFETY: inside the ring's CPU mapping.
            unsafe { &*((self.ring.cpu + slot as usize * 4) as *const AtomicU32) }.store(dw, Relaxed);
        }
        self.next += n;
        // Packets before the write pointer, the write pointer before the doorbell.
        fence(SeqCst);
        unsafe { u64_at(self.wptr.cpu) }.store(self.next, Release);
        fence(SeqCst);
        unsafe { u64_at(self.doorbell.cpu + DOORBELL_INDEX as usize * 8) }.store(self.next, Release);
        Ok(self.next)
    }

    /// Waits until the GPU's read pointer reaches the write pointer: every packet consumed.
    pub fn wait_drained(&self, timeout: Duration) -> DriverResult<Duration> {
        let start = Instant::now();
        while self.read_pointer() != self.next {
            if start.elapsed() >= timeout {
                return Err(format!(
                    "the queue did not drain within {timeout:?} (read pointer {}, write pointer {})",
                    self.read_pointer(),
                    self.next
                ));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(start.elapsed())
    }

    /// Frees the queue, then its buffers.
    pub fn free(self, dev: &UserqDevice) -> DriverResult<()> {
        let mut q = DrmAmdgpuUserq { op: AMDGPU_USERQ_OP_FREE, queue_id: self.id, ..Default::default() };
        let freed = dev.ioctl(DRM_IOCTL_AMDGPU_USERQ, &mut q, "USERQ free");
        if freed.is_ok() {
            for bo in [self.ring, self.wptr, self.rptr, self.eop, self.doorbell] {
                dev.free(bo);
            }
        }
        // A queue the kernel would not free keeps its buffers: the GPU may still use them.
        freed
    }
}

/// Polls the u64 at CPU address `addr` until it equals `want`: spin briefly, then sleep in
/// short steps, up to `timeout`. Returns the time it took.
pub fn wait_value(addr: usize, want: u64, timeout: Duration) -> DriverResult<Duration> {
    let start = Instant::now();
    loop {
        if unsafe { u64_at(addr) }.load(Acquire) == want {
            return Ok(start.elapsed());
        }
        let waited = start.elapsed();
        if waited >= timeout {
            return Err(format!("the value never landed within {timeout:?}"));
        }
        if waited > Duration::from_micros(200) {
            std::thread::sleep(Duration::from_micros(50));
        } else {
            std::hint::spin_loop();
        }
    }
}
