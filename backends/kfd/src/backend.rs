//! The kfd backend's model execution: every op of the model program is one AQL kernel
//! dispatch, all of a step's dispatches are written back to back with the barrier bit (each
//! waits for the one before), the doorbell is rung once per step, and one completion signal
//! on the last packet retires the step: no fence per op.
//!
//! On the emulated device the kernel objects are bound to the CPU tier's op implementations
//! (the device's memory is host memory), so the whole plumbing (kernel arguments, grid
//! sizes, dependencies, completion, KV pages) runs end to end and must produce the CPU tier's
//! tokens. On real hardware the per-op kernels would be amdhsa code objects, which this build
//! does not have; there the backend opens but refuses models (see `open`).

use crate::driver::*;
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};
use zinc_amd_sys::Os;
use zinc_cpu_kernels::exec::CpuBackend;
use zinc_plugin_api::{
    BackendImpl, Counters, DeviceInfo, KvPoolInfo, KvPoolSpec, ModelProgram, PageCopy, PluginError, PluginResult, Step,
    StepOutput,
};

/// Packets in the queue (a SmolLM2 step is about 450 dispatches).
const QUEUE_SLOTS: u64 = 1024;
/// Kernel-argument bytes per dispatch: op index, error flag address (padded).
const KERNARG_BYTES: u64 = 32;
/// A step that takes longer than this is reported as lost.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);

/// The executor the emulated kernels run ops on, with the first error an op reported.
struct Device {
    exec: CpuBackend,
    error: Option<String>,
}

/// The kfd backend object.
pub struct KfdBackend {
    dev: KfdDevice,
    queue: Option<AqlQueue>,
    info: DeviceInfo,
    state: Arc<Mutex<Device>>,
    code: Buffer,
    kernargs: Buffer,
    signal_page: Buffer,
    event_page: Buffer,
    events: (u32, u32, u32, u32),
    counters: Counters,
}

// SAFETY: the raw device handles are used only by the thread that owns the backend; the
// emulated packet processor reaches the executor only through the Mutex.
unsafe impl Send for KfdBackend {}

impl KfdBackend {
    /// Brings up the device and queue and binds the op kernel. Fails on a device that cannot
    /// run host-bound kernels (real hardware without code objects).
    pub fn open(os: Arc<dyn Os>, info: DeviceInfo, threads: usize) -> Result<KfdBackend, String> {
        let dev = KfdDevice::open(os.clone())?;
        let code = dev.alloc(4096, HOST_VISIBLE)?;
        let state = Arc::new(Mutex::new(Device { exec: CpuBackend::new(info.clone(), threads), error: None }));
        let st = state.clone();
        let bound = os.register_host_kernel(
            code.va,
            Arc::new(move |kernarg, _grid| {
                // SAFETY: kernarg points at this backend's kernarg buffer: [op index, error flag].
                let (op, flag) = unsafe { (*(kernarg as *const u64), *((kernarg + 8) as *const u64)) };
                let mut d = st.lock().unwrap_or_else(|e| e.into_inner());
                if d.error.is_some() {
                    return;
                }
                if let Err(e) = d.exec.run_op(op as usize) {
                    d.error = Some(e.message.to_string());
                    // SAFETY: the flag word lives in the same kernarg buffer.
                    unsafe { *(flag as *mut u64) = 1 };
                }
            }),
        );
        if !bound {
            dev.free(code);
            return Err(format!(
                "kfd: no amdhsa code objects for {} are bundled with this build, so model programs cannot run on this device",
                dev.node.gfx_target()
            ));
        }
        let kernargs = dev.alloc(QUEUE_SLOTS * KERNARG_BYTES + 64, HOST_VISIBLE)?;
        let signal_page = dev.alloc(4096, HOST_VISIBLE)?;
        let event_page = dev.alloc(4096, HOST_VISIBLE)?;
        let (ev, slot) = dev.create_event(EVENT_SIGNAL, Some(&event_page))?;
        let (fault, _) = dev.create_event(EVENT_MEMORY, None)?;
        let (hw, _) = dev.create_event(EVENT_HW_EXCEPTION, None)?;
        let queue = AqlQueue::create(&dev, QUEUE_SLOTS)?;
        Ok(KfdBackend {
            dev,
            queue: Some(queue),
            info,
            state,
            code,
            kernargs,
            signal_page,
            event_page,
            events: (ev, slot, fault, hw),
            counters: Counters::default(),
        })
    }

    fn exec<T>(&self, f: impl FnOnce(&mut CpuBackend) -> PluginResult<T>) -> PluginResult<T> {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()).exec)
    }
}

impl BackendImpl for KfdBackend {
    fn device(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn load_model(&mut self, program: &ModelProgram) -> PluginResult<()> {
        // The emulated device's memory is host memory: weights stay where the host mapped them.
        self.exec(|e| e.load_model(program))
    }

    fn create_kv_pool(&mut self, spec: KvPoolSpec) -> PluginResult<KvPoolInfo> {
        self.exec(|e| e.create_kv_pool(spec))
    }

    fn execute(&mut self, step: &Step) -> PluginResult<StepOutput> {
        let n_ops = self.exec(|e| e.begin_step(step))?;
        self.state.lock().unwrap_or_else(|e| e.into_inner()).error = None;
        let (ev, slot, fault, hw) = self.events;
        let sig = Signal { addr: self.signal_page.va };
        sig.init(1, self.event_page.va + slot as u64 * 8, ev);
        let flag = self.kernargs.va + QUEUE_SLOTS * KERNARG_BYTES;
        // SAFETY: host-visible kernarg buffer we own; the device reads it after the header.
        unsafe { *(flag as *mut u64) = 0 };
        let q = self.queue.as_mut().ok_or_else(|| PluginError::device("kfd queue is gone"))?;
        for k in 0..n_ops {
            let slot_args = self.kernargs.va + (k as u64 % QUEUE_SLOTS) * KERNARG_BYTES;
            // A kernarg slot is reused only after its packet retired: write_packet waits for
            // ring space, and ring and kernarg slots are the same size modulo QUEUE_SLOTS.
            let pkt = dispatch(self.code.va, slot_args, 1, 1, if k + 1 == n_ops { sig.addr } else { 0 });
            q.write_packet_with(&pkt, STEP_TIMEOUT, || {
                // SAFETY: as above.
                unsafe {
                    *(slot_args as *mut u64) = k as u64;
                    *((slot_args + 8) as *mut u64) = flag;
                }
            })
            .map_err(PluginError::device)?;
            self.counters.dispatches += 1;
            if k as u64 % (QUEUE_SLOTS / 2) == QUEUE_SLOTS / 2 - 1 {
                // Long programs: let the device start before the ring fills.
                q.ring();
                self.counters.submits += 1;
            }
        }
        q.ring();
        self.counters.submits += 1;
        wait_signal(&self.dev, &sig, 0, ev, &[fault, hw], Duration::from_micros(100), STEP_TIMEOUT)
            .map_err(PluginError::device)?;
        if let Some(e) = self.state.lock().unwrap_or_else(|e| e.into_inner()).error.take() {
            let _ = self.exec(|e| e.end_step());
            return Err(PluginError::device(format!("an op failed on the device: {e}")));
        }
        let out = self.exec(|e| e.end_step())?;
        self.counters.steps += 1;
        self.counters.device_time_ns += out.device_time_ns;
        self.counters.bytes_downloaded += out.logits.len() as u64 * 4;
        Ok(out)
    }

    fn copy_pages(&mut self, copies: &[PageCopy]) -> PluginResult<()> {
        self.exec(|e| e.copy_pages(copies))
    }

    fn swap_out(&mut self, pages: &[u32]) -> PluginResult<Vec<u8>> {
        self.exec(|e| e.swap_out(pages))
    }

    fn swap_in(&mut self, pages: &[u32], data: &[u8]) -> PluginResult<()> {
        self.exec(|e| e.swap_in(pages, data))
    }

    fn counters(&self) -> Counters {
        self.counters
    }
}

impl Drop for KfdBackend {
    fn drop(&mut self) {
        if let Some(q) = self.queue.take() {
            q.destroy(&self.dev);
        }
        let (ev, _, fault, hw) = self.events;
        for e in [ev, fault, hw] {
            self.dev.destroy_event(e);
        }
        for b in [self.code, self.kernargs, self.signal_page, self.event_page] {
            self.dev.free(b);
        }
    }
}
