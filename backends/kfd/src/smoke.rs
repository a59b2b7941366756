//! `zinc smoke kfd`: the intentionally boring proof that zinc owns a compute queue. Create
//! the queue, map the doorbell, submit a barrier-AND with a host-visible completion signal,
//! ring, and wait with a timeout; then a tiny kernel from a bundled amdhsa code object that
//! writes a value into host-visible memory. Every step's evidence goes into the report; any
//! failure is an error with the step.

use crate::{
    code_object::{bundled_targets, bundled_write_value, dispatch_kernel, CodeObject, WRITE_VALUE_KERNEL},
    driver::*,
};
use std::{sync::Arc, time::Duration};
use zinc_amd_sys::Os;

/// How long a packet may take before the smoke test calls it lost.
pub const PACKET_TIMEOUT: Duration = Duration::from_secs(2);
/// Value the tiny kernel writes.
pub const KERNEL_VALUE: u64 = 0x5a17_c0de;

/// Runs the smoke test; returns its evidence, one line per step.
pub fn smoke(os: Arc<dyn Os>) -> DriverResult<Vec<String>> {
    let mut out = Vec::new();
    let dev = KfdDevice::open(os.clone())?;
    out.push(format!(
        "device: {} gpu_id {} ({}), KFD interface {}.{}, {}",
        dev.node.gfx_target(),
        dev.node.gpu_id,
        if dev.node.name.is_empty() { "unnamed" } else { &dev.node.name },
        dev.version.0,
        dev.version.1,
        os.describe()
    ));
    let page = dev.alloc(4096, HOST_VISIBLE)?;
    let events = dev.alloc(4096, HOST_VISIBLE)?;
    // Events made so far, destroyed on every way out (success, skip or error).
    let mut made: Vec<u32> = Vec::new();
    let result = (|| -> DriverResult<()> {
        let mut event = |ty, page| -> DriverResult<(u32, u32)> {
            let (id, slot) = dev.create_event(ty, page)?;
            made.push(id);
            Ok((id, slot))
        };
        let (ev, slot) = event(EVENT_SIGNAL, Some(&events))?;
        let (fault, _) = event(EVENT_MEMORY, None)?;
        let (hw, _) = event(EVENT_HW_EXCEPTION, None)?;
        let mut q = AqlQueue::create(&dev, 64)?;
        let sizes = dev.queue_sizes;
        out.push(format!(
            "queue: id {} doorbell offset {:#x}, 64 packets, EOP {} B, control stack {} B, context save {} B ({})",
            q.id, q.doorbell_offset, sizes.eop, sizes.ctl_stack, sizes.cwsr, sizes.source
        ));
        let sig = Signal { addr: page.va };
        sig.init(1, events.va + slot as u64 * 8, ev);
        let before = sig.value();
        let idx = q.write_packet(&barrier_and([0; 5], sig.addr), PACKET_TIMEOUT)?;
        q.ring();
        let waited = wait_signal(&dev, &sig, 0, ev, &[fault, hw], Duration::from_micros(200), PACKET_TIMEOUT);
        let waited = match waited {
            Ok(t) => t,
            Err(e) => {
                q.destroy(&dev);
                return Err(format!("barrier-AND: {e}"));
            }
        };
        out.push(format!(
            "barrier-AND: packet {idx}, doorbell {}, signal {before} -> {} in {:.1} µs",
            q.last_doorbell,
            sig.value(),
            waited.as_secs_f64() * 1e6
        ));
        // The tiny kernel: the bundled code object for this target, loaded into executable
        // memory; it stores the value in its kernarg at the address in its kernarg.
        let target = page.va + 256;
        let kernarg = page.va + 512;
        // SAFETY: host-visible page we own.
        unsafe {
            *(target as *mut u64) = 0;
            *(kernarg as *mut u64) = target;
            *((kernarg + 8) as *mut u64) = KERNEL_VALUE;
        }
        let gfx = dev.node.gfx_target();
        let Some(bytes) = bundled_write_value(&gfx) else {
            q.destroy(&dev);
            let known: Vec<&str> = bundled_targets().collect();
            out.push(format!("kernel: skipped: no code object for {gfx} is bundled (have {})", known.join(", ")));
            return Ok(());
        };
        let loaded = CodeObject::parse(bytes).and_then(|obj| obj.load(&dev, WRITE_VALUE_KERNEL));
        let (code, kernel) = match loaded {
            Ok(l) => l,
            Err(e) => {
                q.destroy(&dev);
                return Err(e);
            }
        };
        out.push(format!(
            "code object: {gfx} {WRITE_VALUE_KERNEL}, descriptor at {:#x}, kernarg {} bytes",
            kernel.descriptor, kernel.kernarg_bytes
        ));
        // On the emulated device the descriptor is bound to a host function doing what the
        // kernel does; real hardware runs the code object itself.
        let emulated = os.register_host_kernel(
            kernel.descriptor,
            Arc::new(|kernarg, _grid| {
                // SAFETY: the kernarg holds a u64 address in host-visible memory and a value.
                unsafe {
                    let dst = *(kernarg as *const u64) as *mut u64;
                    std::ptr::write_volatile(dst, *((kernarg + 8) as *const u64));
                }
            }),
        );
        sig.init(1, events.va + slot as u64 * 8, ev);
        let packet = dispatch_kernel(&kernel, kernarg, 1, 1, sig.addr);
        let idx = q.write_packet(&packet, PACKET_TIMEOUT)?;
        q.ring();
        let waited = wait_signal(&dev, &sig, 0, ev, &[fault, hw], Duration::from_micros(200), PACKET_TIMEOUT);
        q.destroy(&dev);
        dev.free(code);
        let waited = waited.map_err(|e| format!("kernel dispatch: {e}"))?;
        // SAFETY: as above.
        let got = unsafe { std::ptr::read_volatile(target as *const u64) };
        if got != KERNEL_VALUE {
            return Err(format!("kernel dispatch retired but memory holds {got:#x}, not {KERNEL_VALUE:#x}"));
        }
        out.push(format!(
            "kernel ({}): packet {idx}, wrote {got:#x} to {target:#x}, retired in {:.1} µs",
            if emulated { "emulated: host function bound to the descriptor" } else { "code object on the GPU" },
            waited.as_secs_f64() * 1e6
        ));
        Ok(())
    })();
    for e in made {
        dev.destroy_event(e);
    }
    dev.free(events);
    dev.free(page);
    result.map(|_| out)
}

#[cfg(test)]
mod tests;
