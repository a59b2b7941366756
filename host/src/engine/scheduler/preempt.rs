//! Preemption under KV pressure: which request gives way, and the prefix cache as requests
//! use it (the pages themselves are the KV manager's, `engine/kv.rs`).

use super::{Engine, Phase};

impl Engine {
    /// Picks the request to preempt: lowest band, then least computed; never `keep`.
    pub(super) fn victim(&self, keep: usize) -> Option<usize> {
        (0..self.active.len()).filter(|&i| i != keep && !self.active[i].kv.pages().is_empty()).max_by_key(|&i| {
            let a = &self.active[i];
            (a.effective_band(self.cfg.aging), std::cmp::Reverse(a.n_computed), a.seq)
        })
    }

    /// Preempts request `i`: its pages are swapped to host memory while the budget allows,
    /// else dropped, and it recomputes from its first token.
    pub(super) fn preempt(&mut self, i: usize) -> anyhow::Result<()> {
        let a = &mut self.active[i];
        let swapped = self.kv.swap_out(&mut a.kv, &mut self.backend)?;
        a.phase = Phase::Preempted;
        if !swapped {
            a.n_computed = 0;
        }
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).preemptions += 1;
        tracing::info!(request = a.req.id, swapped, "preempted");
        Ok(())
    }

    /// Gives a swapped request its pages back, running again; false while the pool lacks
    /// them.
    pub(super) fn resume(&mut self, i: usize) -> anyhow::Result<bool> {
        let a = &mut self.active[i];
        let back = self.kv.swap_in(&mut a.kv, a.req.tenant, &mut self.backend)?;
        if back {
            a.phase = Phase::Running;
        }
        Ok(back)
    }

    /// Matches request `i`'s leading prompt pages in the prefix cache: computation starts
    /// after them.
    pub(super) fn match_prefix(&mut self, i: usize) {
        let a = &mut self.active[i];
        let prompt = a.req.prompt_pages();
        let matched = self.kv.match_prefix(&mut a.kv, prompt, &mut self.backend);
        a.n_computed = matched.tokens;
        a.cached_tokens = matched.tokens;
    }

    /// Publishes request `i`'s newly computed prompt pages in the prefix cache.
    pub(super) fn publish(&mut self, i: usize) {
        let a = &mut self.active[i];
        let prompt = a.req.prompt_pages();
        self.kv.publish(&mut a.kv, prompt, a.n_computed);
    }

    /// Undoes a prefix match for a request that could not be admitted after all.
    pub(super) fn unmatch(&mut self, i: usize) {
        let a = &mut self.active[i];
        self.kv.release(&mut a.kv);
        a.n_computed = 0;
        a.cached_tokens = 0;
    }
}
