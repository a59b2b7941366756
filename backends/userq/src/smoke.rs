//! `zinc smoke userq`: the boring proof that zinc owns a compute user queue. Probe for slots,
//! allocate the queue's buffers and map them, create the queue, write one WRITE_DATA packet,
//! publish the write pointer and ring the doorbell, wait for the value in host-visible
//! memory with a timeout, then free the queue and every buffer. Each step prints evidence;
//! any failure is an error naming the step.

use crate::{
    device::{Access, UserqDevice},
    probe_userq,
    queue::{wait_value, UserQueue},
};
use std::{sync::Arc, time::Duration};
use zinc_amd_sys::{drm::domain, pm4, Os};

/// How long a packet may take before the smoke test calls it lost.
pub const PACKET_TIMEOUT: Duration = Duration::from_secs(2);
/// The value the WRITE_DATA packet stores.
pub const SMOKE_VALUE: u64 = 0x05ee_d0fc_0ffe_e000;
/// Ring size for the smoke queue.
const RING_BYTES: u64 = 16 * 1024;

/// Runs the smoke test; returns its evidence, one line per step.
pub fn smoke(os: Arc<dyn Os>) -> Result<Vec<String>, String> {
    let report = probe_userq(&*os);
    if !report.available {
        return Err(report.reason.to_string());
    }
    let node = report.devices.first().map(|d| d.name.to_string()).ok_or("no render node")?;
    let mut out = vec![format!("device: {node} ({}), {}", report.devices[0].features.join(" "), os.describe())];
    let dev = UserqDevice::open(os.clone(), &node)?;
    let fence = dev.alloc(4096, domain::GTT, Access::Shared)?;
    let result = (|| -> Result<(), String> {
        let mut q = UserQueue::create(&dev, RING_BYTES)?;
        let (ring_bytes, ring_va) = q.ring();
        out.push(format!(
            "queue: id {}, ring {ring_bytes} bytes at GPU {ring_va:#x}, doorbell handle {} index {}",
            q.id,
            q.doorbell_handle(),
            crate::queue::DOORBELL_INDEX
        ));
        // SAFETY: the fence buffer's CPU mapping, 4096 bytes.
        let before = unsafe { std::ptr::read_volatile(fence.cpu as *const u64) };
        let submitted = q.submit(&pm4::write_data_u64(fence.va, SMOKE_VALUE), PACKET_TIMEOUT);
        let waited = submitted
            .and_then(|_| wait_value(fence.cpu, SMOKE_VALUE, PACKET_TIMEOUT))
            .and_then(|landed| q.wait_drained(PACKET_TIMEOUT).map(|_| landed));
        let (rptr, wptr, bell) = (q.read_pointer(), q.write_pointer(), q.doorbell_value());
        let id = q.id;
        let freed = q.free(&dev);
        let waited = waited.map_err(|e| format!("WRITE_DATA: {e} (read pointer {rptr}, write pointer {wptr})"))?;
        out.push(format!(
            "WRITE_DATA: fence at GPU {:#x} {before:#x} -> {SMOKE_VALUE:#x} in {:.1} µs; doorbell {bell}, read pointer {rptr} of {wptr} dwords",
            fence.va,
            waited.as_secs_f64() * 1e6
        ));
        freed?;
        out.push(format!("freed: queue {id} and its ring, pointer, EOP and doorbell buffers"));
        Ok(())
    })();
    dev.free(fence);
    result.map(|_| out)
}

#[cfg(test)]
mod tests;
