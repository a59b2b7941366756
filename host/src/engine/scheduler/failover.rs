//! Failover: when the backend fails a step with a failure of its device or plugin (a lost
//! device, a driver error, a panic), the next backend in the fallback chain takes over and
//! every request in flight recomputes its tokens so far on it, as after a preemption that
//! dropped its pages. Nothing already streamed is sent again, and no request is lost. The
//! requests fail with the error, as without failover, when the step itself was inconsistent,
//! when no other backend opens, or when the backend was forced (it must never silently become
//! another one).

use super::{cost, Engine, Phase};
use crate::engine::{
    kv::{KvManager, SeqKv},
    sequence::BackendError,
};
use zinc_plugin_api::{BackendBox, ErrorKind};

/// Opens the backend to serve on after one failed, given the names of every backend that
/// failed so far (never opened again): the next in the fallback chain, with the model loaded
/// and its KV pool made.
pub type FailoverOpen = Box<dyn FnMut(&[String]) -> anyhow::Result<Replacement> + Send>;

/// A backend that failover opened.
pub struct Replacement {
    /// The backend, the model loaded and its KV pool made.
    pub backend: BackendBox,
    /// Its plugin's name.
    pub name: String,
    /// The device it runs on, for labels.
    pub device: String,
    /// Pages of its KV pool.
    pub n_pages: u32,
    /// Window pages of its KV pool.
    pub window_pages: u32,
}

/// The opener and the backends that failed so far.
pub(super) struct Failover {
    open: FailoverOpen,
    failed: Vec<String>,
}

impl Engine {
    /// Lets this engine move its requests to another backend when its backend fails a step
    /// (see the module comment).
    pub fn with_failover(mut self, open: FailoverOpen) -> Engine {
        self.failover = Some(Failover { open, failed: Vec::new() });
        self
    }

    /// After a failed step: opens the next backend and moves every request in flight to it.
    /// False when this engine has no failover or no other backend opened; the caller then
    /// fails the requests.
    pub(super) fn fail_over(&mut self, error: &anyhow::Error) -> bool {
        // A lost or faulting device, or a plugin that panicked: another backend may serve. An
        // inconsistent step or an op the backend lacks is the engine's or the model's
        // problem, which the next backend would share.
        let device_failed = error.chain().find_map(|e| e.downcast_ref::<BackendError>()).is_some_and(|e| {
            matches!(e.kind, ErrorKind::Device | ErrorKind::Panic | ErrorKind::Unavailable | ErrorKind::OutOfMemory)
        });
        let Some(f) = self.failover.as_mut().filter(|_| device_failed) else { return false };
        let failed = self.stats.lock().unwrap_or_else(|e| e.into_inner()).backend_name.clone();
        f.failed.push(failed.clone());
        let next = match (f.open)(&f.failed) {
            Ok(next) => next,
            Err(e) => {
                tracing::error!(backend = %failed, "backend failed ({error:#}) and no other backend opened: {e:#}");
                return false;
            }
        };
        tracing::error!(
            backend = %failed,
            next = %next.name,
            requests = self.active.len(),
            "backend failed ({error:#}); its requests in flight recompute on the next backend"
        );
        self.backend = next.backend;
        self.hints = self.backend.scheduling();
        self.cfg.n_pages = next.n_pages;
        self.cfg.window_pages = next.window_pages;
        let window = self.cfg.window_spec(&self.model);
        self.kv = KvManager::with_window(next.n_pages, self.cfg.page_size, self.cfg.swap_bytes, window);
        // Step costs measured on the failed backend say nothing about this one.
        self.cost = cost::StepCost::default();
        for a in &mut self.active {
            a.kv = SeqKv::default();
            a.n_computed = 0;
            a.held_logits = None;
            if a.admitted() {
                a.phase = Phase::Preempted;
            }
        }
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.backend_name = next.name;
        s.device_name = next.device;
        s.kv_pages_total = next.n_pages;
        s.kv_window_pages_total = next.window_pages;
        s.failovers += 1;
        drop(s);
        // Backwards: finishing a request moves the last one into its place.
        for i in (0..self.active.len()).rev() {
            self.refuse_if_it_cannot_fit(i);
        }
        true
    }
}
