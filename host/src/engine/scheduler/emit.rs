//! What happens after a step: each sampled row through its request's output stage
//! ([`crate::engine::output`]), ending requests, and the shared stats.

use super::Engine;
use crate::engine::logprobs::token_logprob;
use crate::engine::output::RowLogits;
use crate::engine::request::{Event, Finish, Usage};
use std::time::Instant;

impl Engine {
    /// Samples the next token of request `i`, streams its text; returns how it finished.
    pub(super) fn sample(&mut self, i: usize, row: RowLogits) -> Option<Finish> {
        let now = Instant::now();
        let model = self.model.clone();
        let a = &mut self.active[i];
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        match a.last_token {
            None => stats.ttft.observe((now - a.req.arrived).as_secs_f64()),
            Some(t) => stats.itl.observe((now - t).as_secs_f64()),
        }
        drop(stats);
        a.last_token = Some(now);
        self.vtc.charge_output(a.req.band, a.req.tenant, 1);
        // A grammar's mask time is host time the tenant used: charged as the output tokens
        // a decode step of that length would have given.
        let mask = a.out.take_mask_time().as_secs_f64();
        if let Some(step) = self.cost.decode_step().filter(|&s| s > 0.0 && mask > 0.0) {
            self.vtc.charge_output_equivalent(a.req.band, a.req.tenant, mask / step);
        }
        let e = a.out.step(&model.tokenizer, row, &mut a.tokens);
        if let Some(lp) = e.logprob {
            let _ = a.req.events.send(Event::Logprobs(vec![lp]));
        }
        if let Some(text) = e.text {
            let _ = a.req.events.send(Event::Text(text));
        }
        if let Some(error) = e.error {
            tracing::warn!(request = a.req.id, "{error}");
            let _ = a.req.events.send(Event::GrammarFailed(error));
        }
        e.finish
    }

    /// Sends the log-probabilities of the prompt tokens that `rows` (the logits of the rows
    /// of request `i`'s chunk, which starts at its `n_computed`) predict and that were not
    /// sent before.
    pub(super) fn score_prompt(&mut self, i: usize, rows: &[f32]) {
        let a = &mut self.active[i];
        let (Some(top), vocab) = (a.req.prompt_logprobs, self.model.program.hparams.n_vocab as usize) else { return };
        let mut scored = Vec::new();
        for (r, logits) in rows.chunks_exact(vocab).enumerate() {
            // Row r sits at position n_computed + r and predicts the token after it.
            let target = a.n_computed as usize + r + 1;
            if target == a.prompt_scored as usize && target < a.req.prompt.len() {
                scored.push(token_logprob(logits, a.req.prompt[target], top as usize));
                a.prompt_scored += 1;
            }
        }
        if !scored.is_empty() {
            let _ = a.req.events.send(Event::PromptLogprobs(scored));
        }
    }

    /// Releases a request's pages and tells its client how it ended.
    pub(super) fn finish(&mut self, i: usize, finish: Finish) {
        let mut a = self.active.swap_remove(i);
        tracing::debug!(request = a.req.id, finish = finish.label(), generated = a.out.generated(), "request finished");
        self.kv.release(&mut a.kv);
        let usage = Usage {
            prompt_tokens: a.req.prompt.len() as u32,
            completion_tokens: a.out.generated(),
            cached_tokens: a.cached_tokens,
        };
        let name = self.tenant_name(a.req.tenant);
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        // Published before the client hears of the end, so that it never sees the pages of a
        // request it knows has ended.
        s.kv_pages_used = self.kv.pool().in_use();
        s.kv_pages_cached = self.kv.pool().cached();
        s.kv_window_pages_used = self.kv.window_pool().map_or(0, |w| w.in_use());
        self.admission.leave(a.req.tenant, a.admitted());
        let _ = a.req.events.send(Event::Done { finish, usage });
        let t = s.tenant(&name);
        t.requests += 1;
        t.prompt_tokens += a.req.prompt.len() as u64;
        t.completion_tokens += a.out.generated() as u64;
        t.cached_tokens += a.cached_tokens as u64;
        if finish != Finish::Cancelled {
            s.e2e.observe(a.req.arrived.elapsed().as_secs_f64());
        }
    }

    /// Copies page usage and backend counters into the shared stats; `elapsed` is the time
    /// the current holdings were held (integrated into page-seconds).
    pub(super) fn refresh_stats(&mut self, elapsed: f64) {
        let counters = self.backend.counters();
        let mut per_tenant: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for a in &self.active {
            *per_tenant.entry(a.req.tenant).or_default() += a.kv.pages().len() as u32;
        }
        let names: Vec<(String, u32)> = per_tenant.iter().map(|(t, p)| (self.tenant_name(*t), *p)).collect();
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.backend = counters;
        let pool = self.kv.pool();
        s.kv_pages_used = pool.in_use();
        s.kv_pages_cached = pool.cached();
        s.kv_window_pages_used = self.kv.window_pool().map_or(0, |w| w.in_use());
        s.prefix_queries = pool.stats.queries;
        s.prefix_hits = pool.stats.hits;
        for t in s.tenants.values_mut() {
            t.pages = 0;
        }
        for (name, pages) in names {
            let t = s.tenant(&name);
            t.pages = pages;
            t.kv_page_seconds += pages as f64 * elapsed;
        }
    }
}
