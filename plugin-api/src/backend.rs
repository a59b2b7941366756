//! The backend object: what `open` returns and the engine drives, one call per step.
#![allow(non_local_definitions)] // abi_stable 0.11's sabi_trait expands to impls inside a const.

use crate::{
    error::{PluginError, PluginResult},
    module::guard,
    probe::DeviceInfo,
    program::ModelProgram,
    step::{Step, StepOutput},
};
use abi_stable::{
    sabi_trait,
    std_types::{RBox, RResult, RVec},
    StableAbi,
};

/// Shape of the KV page pool the host asks for.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvPoolSpec {
    /// Pages in the pool. Page ids are `0 .. n_pages`.
    pub n_pages: u32,
    /// Tokens per page (16 unless measured otherwise).
    pub page_size: u32,
    /// Pages of a second class for the sliding-window layers alone, ids `n_pages ..
    /// n_pages + window_pages` (see [`crate::kv`]); 0 keeps every layer in the first class.
    pub window_pages: u32,
}

/// What the backend actually allocated for the KV pool.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvPoolInfo {
    /// Pages allocated.
    pub n_pages: u32,
    /// Tokens per page.
    pub page_size: u32,
    /// Bytes one page occupies across its layers (K and V); also the swap unit.
    pub bytes_per_page: u64,
    /// Window pages allocated (ids from `n_pages`).
    pub window_pages: u32,
    /// Bytes one window page occupies (its layers' K and V).
    pub bytes_per_window_page: u64,
}

impl KvPoolInfo {
    /// Bytes of page `page` (either class), as copies and swaps move it; 0 outside the pool.
    pub fn page_bytes(&self, page: u32) -> u64 {
        if page < self.n_pages {
            self.bytes_per_page
        } else if page - self.n_pages < self.window_pages {
            self.bytes_per_window_page
        } else {
            0
        }
    }
}

/// One page-to-page copy (copy-on-write of a shared prefix page), both pages of one class.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCopy {
    /// Page to read.
    pub src: u32,
    /// Page to overwrite.
    pub dst: u32,
}

/// Work the backend counted, as evidence for benchmarks (never derived from configuration).
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Steps executed.
    pub steps: u64,
    /// Submissions to the device (command buffers, doorbell rings, thread-pool runs).
    pub submits: u64,
    /// Kernel dispatches (or CPU op invocations).
    pub dispatches: u64,
    /// Bytes copied host → device (weights, step inputs).
    pub bytes_uploaded: u64,
    /// Bytes copied device → host (logits, swapped pages).
    pub bytes_downloaded: u64,
    /// Device time spent in steps, nanoseconds.
    pub device_time_ns: u64,
    /// Kernels compiled for the device (pipelines created); a step that needs a new one waits
    /// for the driver's compiler, so a warm server should add none (see `prepare_steps`).
    pub kernels_compiled: u64,
}

/// How the engine should shape steps for a backend: facts about its kernels that the host
/// would otherwise have to hard-code.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulingHints {
    /// The smallest prefill chunk worth running: a time allowance never cuts a long prompt's
    /// chunk below it (the CPU tier's prompt attention and weight panels work on 16 rows at a
    /// time; fewer rows re-read the whole context and weights for little work).
    pub min_prefill_chunk: u32,
    /// Rows the backend's prompt kernels take together from one sequence, counted from the
    /// step's first row (a GPU's tiles of 16). Above 1, the engine places the longest chunks
    /// first so that they start on a group boundary; at 1 the order of rows does not matter.
    pub row_group: u32,
}

impl Default for SchedulingHints {
    /// No preferences: any chunk size, any row order.
    fn default() -> Self {
        SchedulingHints { min_prefill_chunk: 1, row_group: 1 }
    }
}

/// The FFI-safe backend interface. Plugins do not implement this directly: they implement
/// [`BackendImpl`] and wrap it in [`GuardedBackend`], which catches panics.
#[sabi_trait]
pub trait Backend: Send {
    /// The device that really runs the work, as queried from it.
    fn device(&self) -> DeviceInfo;
    /// Loads (uploads or adopts) the model program and its weights.
    fn load_model(&mut self, program: &ModelProgram) -> RResult<(), PluginError>;
    /// Allocates the KV page pool for the loaded model; replaces any earlier pool.
    fn create_kv_pool(&mut self, spec: KvPoolSpec) -> RResult<KvPoolInfo, PluginError>;
    /// Runs one whole step.
    fn execute(&mut self, step: &Step) -> RResult<StepOutput, PluginError>;
    /// Copies whole pages (copy-on-write of shared prefixes).
    fn copy_pages(&mut self, copies: RVec<PageCopy>) -> RResult<(), PluginError>;
    /// Reads pages out to host memory (preemption by swapping), in the order given.
    fn swap_out(&mut self, pages: RVec<u32>) -> RResult<RVec<u8>, PluginError>;
    /// Writes pages back from host memory, the inverse of `swap_out`.
    fn swap_in(&mut self, pages: RVec<u32>, data: RVec<u8>) -> RResult<(), PluginError>;
    /// Work counted so far.
    #[sabi(last_prefix_field)]
    fn counters(&self) -> Counters;
    /// How the engine should shape steps for this backend.
    fn scheduling(&self) -> SchedulingHints;
    /// Readies the backend for steps of up to `max_rows` rows of every kind (decodes, prompt
    /// chunks, both together), after `create_kv_pool` and before the first request: a backend
    /// that compiles kernels per step shape compiles all of them now, so that no request waits
    /// for a compiler when the mix of streams changes.
    fn prepare_steps(&mut self, max_rows: u32) -> RResult<(), PluginError>;
}

/// The boxed backend object that crosses the boundary.
pub type BackendBox = Backend_TO<'static, RBox<()>>;

/// What a plugin implements, with plain Rust results. See [`GuardedBackend`].
pub trait BackendImpl: Send + 'static {
    /// The device that really runs the work.
    fn device(&self) -> DeviceInfo;
    /// Loads the model program.
    fn load_model(&mut self, program: &ModelProgram) -> PluginResult<()>;
    /// Allocates the KV page pool.
    fn create_kv_pool(&mut self, spec: KvPoolSpec) -> PluginResult<KvPoolInfo>;
    /// Runs one step.
    fn execute(&mut self, step: &Step) -> PluginResult<StepOutput>;
    /// Copies pages.
    fn copy_pages(&mut self, copies: &[PageCopy]) -> PluginResult<()>;
    /// Reads pages to host memory.
    fn swap_out(&mut self, pages: &[u32]) -> PluginResult<Vec<u8>>;
    /// Writes pages from host memory.
    fn swap_in(&mut self, pages: &[u32], data: &[u8]) -> PluginResult<()>;
    /// Work counted so far.
    fn counters(&self) -> Counters;
    /// How the engine should shape steps for this backend (default: no preferences).
    fn scheduling(&self) -> SchedulingHints {
        SchedulingHints::default()
    }
    /// Readies steps of up to `max_rows` rows (default: nothing to ready).
    fn prepare_steps(&mut self, _max_rows: u32) -> PluginResult<()> {
        Ok(())
    }
}

/// Wraps a [`BackendImpl`] so that every call catches panics. After a panic the backend is
/// poisoned: its state may be half-updated, so every later call fails instead of guessing.
pub struct GuardedBackend<B: BackendImpl> {
    inner: B,
    poisoned: bool,
}

impl<B: BackendImpl> GuardedBackend<B> {
    /// Boxes `inner` as the FFI backend object.
    pub fn boxed(inner: B) -> BackendBox {
        Backend_TO::from_value(Self { inner, poisoned: false }, sabi_trait::TD_Opaque)
    }

    fn call<T>(&mut self, what: &str, f: impl FnOnce(&mut B) -> PluginResult<T>) -> RResult<T, PluginError> {
        if self.poisoned {
            return RResult::RErr(PluginError::device(format!(
                "backend unusable after an earlier panic; cannot {what}"
            )));
        }
        let inner = &mut self.inner;
        let out = guard(what, || f(inner));
        if matches!(&out, RResult::RErr(e) if e.kind == crate::ErrorKind::Panic) {
            self.poisoned = true;
        }
        out
    }
}

impl<B: BackendImpl> Backend for GuardedBackend<B> {
    fn device(&self) -> DeviceInfo {
        self.inner.device()
    }
    fn load_model(&mut self, program: &ModelProgram) -> RResult<(), PluginError> {
        self.call("load the model", |b| b.load_model(program))
    }
    fn create_kv_pool(&mut self, spec: KvPoolSpec) -> RResult<KvPoolInfo, PluginError> {
        self.call("create the KV pool", |b| b.create_kv_pool(spec))
    }
    fn execute(&mut self, step: &Step) -> RResult<StepOutput, PluginError> {
        self.call("execute a step", |b| b.execute(step))
    }
    fn copy_pages(&mut self, copies: RVec<PageCopy>) -> RResult<(), PluginError> {
        self.call("copy pages", |b| b.copy_pages(&copies))
    }
    fn swap_out(&mut self, pages: RVec<u32>) -> RResult<RVec<u8>, PluginError> {
        self.call("swap pages out", |b| b.swap_out(&pages).map(RVec::from))
    }
    fn swap_in(&mut self, pages: RVec<u32>, data: RVec<u8>) -> RResult<(), PluginError> {
        self.call("swap pages in", |b| b.swap_in(&pages, &data))
    }
    fn counters(&self) -> Counters {
        self.inner.counters()
    }
    fn scheduling(&self) -> SchedulingHints {
        self.inner.scheduling()
    }
    fn prepare_steps(&mut self, max_rows: u32) -> RResult<(), PluginError> {
        self.call("prepare step shapes", |b| b.prepare_steps(max_rows))
    }
}

/// A backend that opened its device but cannot run model programs: every work call fails
/// with [`crate::ErrorKind::Unsupported`] and the given reason, so the host falls through to
/// the next backend when it loads a model. Drivers under construction use it to show that
/// their device bring-up works without pretending to compute.
pub struct DeviceOnlyBackend {
    device: DeviceInfo,
    why: String,
}

impl DeviceOnlyBackend {
    /// A backend for `device` that refuses work with `why`.
    pub fn new(device: DeviceInfo, why: impl Into<String>) -> Self {
        Self { device, why: why.into() }
    }
    fn refuse<T>(&self) -> PluginResult<T> {
        Err(PluginError::unsupported(self.why.clone()))
    }
}

impl BackendImpl for DeviceOnlyBackend {
    fn device(&self) -> DeviceInfo {
        self.device.clone()
    }
    fn load_model(&mut self, _: &ModelProgram) -> PluginResult<()> {
        self.refuse()
    }
    fn create_kv_pool(&mut self, _: KvPoolSpec) -> PluginResult<KvPoolInfo> {
        self.refuse()
    }
    fn execute(&mut self, _: &Step) -> PluginResult<StepOutput> {
        self.refuse()
    }
    fn copy_pages(&mut self, _: &[PageCopy]) -> PluginResult<()> {
        self.refuse()
    }
    fn swap_out(&mut self, _: &[u32]) -> PluginResult<Vec<u8>> {
        self.refuse()
    }
    fn swap_in(&mut self, _: &[u32], _: &[u8]) -> PluginResult<()> {
        self.refuse()
    }
    fn counters(&self) -> Counters {
        Counters::default()
    }
}
