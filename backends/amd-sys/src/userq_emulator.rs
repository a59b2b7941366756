//! An emulated compute user queue: one thread per queue that watches its doorbell, reads the
//! write pointer from the queue's wptr buffer, runs the PM4 packets between the read and
//! write pointers, and publishes the read pointer, as the MES-mapped queue does. GPU virtual
//! addresses go through the node's GEM_VA mappings; an address no mapping covers is a GPU
//! page fault, after which the queue stops (the driver sees a fence that never lands and
//! times out).

use crate::{
    emulator::{DeviceThread, FaultModes},
    pm4,
};
use std::{
    sync::{
        atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*},
        Arc, Mutex,
    },
    time::Duration,
};

/// One GEM_VA mapping: `size` bytes at GPU address `va`, backed by host memory at `host`.
#[derive(Debug, Clone, Copy)]
pub struct VaMapping {
    /// GPU virtual address of the first byte.
    pub va: u64,
    /// Bytes mapped.
    pub size: u64,
    /// Host address of the first byte.
    pub host: usize,
    /// The GEM handle the mapping belongs to.
    pub handle: u32,
}

/// The GPU virtual address space of one render-node file: its GEM_VA mappings.
#[derive(Debug, Default)]
pub struct VaSpace {
    /// Mappings in creation order; they never overlap.
    pub maps: Vec<VaMapping>,
}

impl VaSpace {
    /// The host address behind `len` bytes at `va`, when one mapping covers all of them.
    pub fn translate(&self, va: u64, len: u64) -> Option<usize> {
        self.maps
            .iter()
            .find(|m| va >= m.va && va.checked_add(len).is_some_and(|end| end <= m.va + m.size))
            .map(|m| m.host + (va - m.va) as usize)
    }
    /// True when `[va, va + size)` overlaps an existing mapping.
    pub fn overlaps(&self, va: u64, size: u64) -> bool {
        self.maps.iter().any(|m| va < m.va + m.size && m.va < va + size)
    }
}

/// Where a user queue's parts live, as host addresses (translated at creation).
pub struct UserQueueSpec {
    /// GPU address of the ring (PM4 dwords).
    pub ring_va: u64,
    /// Ring bytes (a power of two).
    pub ring_bytes: u64,
    /// Host address of the u64 write pointer (in dwords, never wrapped).
    pub wptr: usize,
    /// Host address of the u64 read pointer.
    pub rptr: usize,
    /// Host address of the queue's u64 doorbell.
    pub doorbell: usize,
}

/// A running emulated user queue.
pub struct UserQueueProcessor {
    _thread: DeviceThread,
    /// Set when the queue faulted (bad packet or unmapped address), with the stop reason
    /// readable through [`UserQueueProcessor::fault`].
    faulted: Arc<Mutex<Option<String>>>,
}

impl UserQueueProcessor {
    /// Starts the queue's thread.
    pub fn start(q: UserQueueSpec, va: Arc<Mutex<VaSpace>>, faults: FaultModes) -> UserQueueProcessor {
        let faulted = Arc::new(Mutex::new(None));
        let f = faulted.clone();
        let thread = DeviceThread::spawn("zinc-emulated-mes", move |stop| {
            if let Err(why) = run(&q, &va, &faults, &stop) {
                *f.lock().unwrap_or_else(|e| e.into_inner()) = Some(why);
            }
        });
        UserQueueProcessor { _thread: thread, faulted }
    }

    /// Why the queue stopped, if it faulted.
    pub fn fault(&self) -> Option<String> {
        self.faulted.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

// SAFETY (whole module): the host addresses come from GEM buffers the fake node owns; a
// queue's buffers stay alive while the queue exists (the node refuses to close a GEM handle
// that a live queue uses), and dropping the processor joins this thread.
unsafe fn u64_at(addr: usize) -> &'static AtomicU64 {
    &*(addr as *const AtomicU64)
}

fn run(q: &UserQueueSpec, va: &Mutex<VaSpace>, faults: &FaultModes, stop: &AtomicBool) -> Result<(), String> {
    let ring_dw = q.ring_bytes / 4;
    let ring_host =
        va.lock().unwrap_or_else(|e| e.into_inner()).translate(q.ring_va, q.ring_bytes).ok_or("ring unmapped")?;
    let dword = |i: u64| -> u32 {
        // SAFETY: inside the ring, which was translated whole above.
        unsafe { &*((ring_host + ((i % ring_dw) * 4) as usize) as *const AtomicU32) }.load(Acquire)
    };
    let mut consumed: u64 = 0;
    while !stop.load(Acquire) {
        let rung = unsafe { u64_at(q.doorbell) }.load(Acquire);
        let wptr = unsafe { u64_at(q.wptr) }.load(Acquire);
        if rung <= consumed || faults.never_retire {
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        if faults.retire_delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(faults.retire_delay_ms));
        }
        // The doorbell wakes the queue; the write pointer says how far to go.
        while consumed < wptr && !stop.load(Acquire) {
            let header = dword(consumed);
            if !pm4::is_type3(header) {
                return Err(format!("not a type-3 PM4 header {header:#010x} at dword {consumed}"));
            }
            let body = pm4::body_dwords(header) as u64;
            if consumed + 1 + body > wptr {
                return Err(format!("packet at dword {consumed} runs past the write pointer {wptr}"));
            }
            match pm4::opcode(header) {
                pm4::NOP => {}
                pm4::WRITE_DATA => {
                    let control = dword(consumed + 1);
                    if control & (0xf << 8) != pm4::WRITE_DATA_DST_MEMORY {
                        return Err(format!(
                            "WRITE_DATA to destination {} (only memory is emulated)",
                            (control >> 8) & 0xf
                        ));
                    }
                    let dst = dword(consumed + 2) as u64 | (dword(consumed + 3) as u64) << 32;
                    let n = body.saturating_sub(3);
                    let host = va
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .translate(dst, n * 4)
                        .ok_or_else(|| format!("GPU page fault: WRITE_DATA to unmapped {dst:#x}"))?;
                    for i in 0..n {
                        // SAFETY: translated above for all n dwords.
                        unsafe { &*((host + (i * 4) as usize) as *const AtomicU32) }
                            .store(dword(consumed + 4 + i), Release);
                    }
                }
                op => return Err(format!("PM4 opcode {op:#x} is not emulated")),
            }
            consumed += 1 + body;
            unsafe { u64_at(q.rptr) }.store(consumed, Release);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translation_needs_one_mapping_to_cover_the_whole_range() {
        let va = VaSpace { maps: vec![VaMapping { va: 0x10000, size: 0x1000, host: 0x7000_0000, handle: 1 }] };
        assert_eq!(va.translate(0x10008, 8), Some(0x7000_0008));
        assert_eq!(va.translate(0x10ffc, 8), None, "straddles the end");
        assert_eq!(va.translate(0xfff8, 8), None);
        assert_eq!(va.translate(u64::MAX - 2, 8), None);
        assert!(va.overlaps(0xf000, 0x1001) && !va.overlaps(0x11000, 0x1000));
    }
}
