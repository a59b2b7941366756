//! Building one step: which decodes and prefill chunks run next.
//!
//! Bands are planned in order, most urgent first: the interactive band's decodes, then its
//! prefill chunks and admissions, then the batch band's. When an interactive prompt is being
//! computed the step is the interactive band's alone — batch decodes wait one step — so an
//! interactive request's time to first token is not that of a step full of batch work.
//! Inside a band: decodes first, in fairness order when there are more streams than the
//! budget; then prefill chunks of admitted (or preempted) requests; then admissions, which
//! stop at the first request that does not fit rather than skipping it.
//!
//! Every step has a token budget (`step_tokens`; a prefill token deep in its prompt weighs
//! more). A step that carries decodes also has a time allowance for prefill
//! ([`super::cost::StepCost`]), so the streams beside a long prompt keep their pace. While an
//! interactive tenant is active (`interactive_window`), a step of batch decodes carries only
//! as many as fit in an interactive prompt's step, and no batch prefill when that cut applies.

use super::{Engine, Phase};
use crate::engine::output::RowLogits;
use crate::engine::request::{Band, Finish};
use std::time::{Duration, Instant};

/// One entry of a step: request index, tokens, and their budget weight (0 for a decode).
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// Index into the engine's active requests.
    pub i: usize,
    /// Tokens this step computes for it.
    pub n: u32,
    /// Budget weight: 0 for a decode, `n` × the per-token weight for a prefill chunk.
    pub weight: f64,
}

/// A step as it is built.
#[derive(Debug, Default)]
pub(super) struct StepPlan {
    /// Entries in row order.
    pub entries: Vec<Entry>,
    /// Requests preempted while building it.
    pub preempted: Vec<usize>,
    /// Budget tokens left.
    pub budget: u32,
    /// Whether the step computes an interactive prompt (batch decodes left out).
    pub interactive_prompt: bool,
}

impl StepPlan {
    fn has(&self, i: usize) -> bool {
        self.entries.iter().any(|e| e.i == i) || self.preempted.contains(&i)
    }
    /// Decode rows planned.
    pub fn decodes(&self) -> usize {
        self.entries.iter().filter(|e| e.weight == 0.0).count()
    }
    /// Weighted prefill tokens planned.
    pub fn prefill_weight(&self) -> f64 {
        self.entries.iter().map(|e| e.weight).sum()
    }
}

impl Engine {
    /// One step. Returns after executing it (or immediately when there is nothing to run).
    pub(super) fn step(&mut self) -> anyhow::Result<()> {
        // Clients that went away: cancel, free pages now.
        for i in (0..self.active.len()).rev() {
            if self.active[i].req.events.is_closed() {
                self.finish(i, Finish::Cancelled);
            }
        }
        // Held logits whose grammar mask has come: sample them, so those requests rejoin.
        for i in (0..self.active.len()).rev() {
            if self.active[i].held_logits.is_some() && self.active[i].out.ready() {
                let logits = self.active[i].held_logits.take().unwrap_or_default();
                if let Some(f) = self.sample(i, RowLogits::Whole(&logits)) {
                    self.finish(i, f);
                }
            }
        }
        let mut plan = StepPlan { budget: self.cfg.step_tokens.max(1), ..Default::default() };
        let (mut blocked, mut interactive_prompt) = (false, false);
        // Requests of the interactive class, not batch requests promoted by aging: a long batch
        // stream must not keep its own band's steps short.
        if self.active.iter().any(|a| a.req.band == Band::Interactive) {
            self.last_interactive = Some(Instant::now());
        }
        for band in [Band::Interactive, Band::Batch] {
            let capped = self.plan_decodes(band, &mut plan)?;
            if capped {
                // Batch decodes were cut to keep the step short: no batch prefill either.
                continue;
            }
            if blocked {
                // An earlier band's request waits for memory: nothing is admitted past it.
                continue;
            }
            let prefilled;
            (prefilled, blocked) = self.plan_prefills(band, &mut plan)?;
            if band == Band::Interactive && prefilled {
                interactive_prompt = true;
                break;
            }
        }
        plan.interactive_prompt = interactive_prompt;
        if interactive_prompt {
            // Running decodes this step left out (the batch band's), for /metrics.
            let waiting =
                self.in_phase(Phase::Running).filter(|&i| self.active[i].pending() == 1 && !plan.has(i)).count() as u64;
            self.stats.lock().unwrap_or_else(|e| e.into_inner()).batch_decodes_deferred += waiting;
        }
        if plan.entries.is_empty() {
            self.refresh_stats(0.0);
            if !self.active.is_empty() {
                // Everything waits on memory or limits held by nobody runnable: avoid spinning.
                std::thread::sleep(Duration::from_millis(2));
            }
            return Ok(());
        }
        self.execute(plan)
    }

    /// Adds one decode for each running request of `band`, while the budget lasts. Returns
    /// whether batch decodes were cut short to keep the step as short as an interactive
    /// prompt's (interactive tenants active).
    fn plan_decodes(&mut self, band: Band, plan: &mut StepPlan) -> anyhow::Result<bool> {
        let mut decoders: Vec<usize> = self
            .in_phase(Phase::Running)
            .filter(|&i| {
                let a = &self.active[i];
                a.pending() == 1 && !a.kv.pages().is_empty() && a.effective_band(self.cfg.aging) == band && !plan.has(i)
            })
            .collect();
        // Fairness order (the tenant's virtual counter), then the stream that waited longest
        // for its last token, so streams of one tenant take turns when not all fit.
        decoders.sort_by_key(|&i| {
            let (_, counter, seq) = self.order_key(i);
            (counter, self.active[i].last_token, seq)
        });
        // An interactive tenant that asked recently is likely to ask again: keep batch steps
        // as short as its prompt's step for `interactive_window` after its last request.
        let recent = self.last_interactive.is_some_and(|t| t.elapsed() < self.cfg.interactive_window);
        let cap = match band {
            Band::Batch if recent => self.cost.batch_rows_allowance().unwrap_or(usize::MAX),
            _ => usize::MAX,
        };
        let (mut planned, mut capped) = (0, false);
        for (k, &i) in decoders.iter().enumerate() {
            if planned >= cap {
                capped = true;
                let left = decoders[k..].iter().filter(|i| !plan.preempted.contains(i)).count() as u64;
                self.stats.lock().unwrap_or_else(|e| e.into_inner()).batch_decodes_shortened += left;
                break;
            }
            if plan.budget == 0 {
                // More running streams than the step budget: the rest decode next step, and
                // the order above (the tenant's virtual counter) shares the steps fairly.
                break;
            }
            if plan.preempted.contains(&i) {
                continue;
            }
            let need = self.pages_needed(i, 1);
            while self.kv.available() < need {
                match self.victim(i) {
                    Some(v)
                        if !plan.preempted.contains(&v) && self.active[v].effective_band(self.cfg.aging) >= band =>
                    {
                        self.preempt(v)?;
                        plan.preempted.push(v);
                    }
                    _ => break,
                }
            }
            if self.kv.available() < need {
                self.preempt(i)?;
                plan.preempted.push(i);
                continue;
            }
            self.grow(i, need);
            plan.entries.push(Entry { i, n: 1, weight: 0.0 });
            plan.budget = plan.budget.saturating_sub(1);
            planned += 1;
        }
        let preempted = &plan.preempted;
        plan.entries.retain(|e| !preempted.contains(&e.i));
        Ok(capped)
    }

    /// Budget weight of request `i`'s next prompt token: tokens deep in a long context cost
    /// more (their attention), `1 + position / attention_equiv`.
    fn token_weight(&self, i: usize) -> f64 {
        1.0 + self.active[i].n_computed as f64 / self.cfg.attention_equiv.max(1) as f64
    }

    /// Adds prefill chunks and admissions of `band`. Returns (whether any chunk was planned,
    /// whether a request that does not fit stopped admissions).
    fn plan_prefills(&mut self, band: Band, plan: &mut StepPlan) -> anyhow::Result<(bool, bool)> {
        let ps = self.cfg.page_size;
        // Beside running decodes, prefill gets the time allowance measured for this backend.
        let allowance = if plan.decodes() > 0 { self.cost.prefill_allowance(self.cfg.step_slowdown) } else { None };
        let mut candidates: Vec<usize> = (0..self.active.len())
            .filter(|&i| !plan.has(i) && self.active[i].effective_band(self.cfg.aging) == band)
            .collect();
        // The smallest chunk worth running on this backend.
        let min_chunk = self.hints.min_prefill_chunk.max(1);
        // Short prompts (one chunk of at most `min_chunk` tokens left) first: they cost little,
        // and their first token should not wait behind a long prompt's chunks. Then requests
        // already admitted (or preempted, which keep their place) before new ones; then the
        // tenant's counter; then arrival.
        candidates.sort_by_key(|&i| {
            let (_, counter, seq) = self.order_key(i);
            (self.active[i].pending() > min_chunk, !self.active[i].admitted(), counter, seq)
        });
        let mut prefilled = false;
        for i in candidates {
            // The time allowance applies to long prompts; a chunk is never cut below the
            // backend's smallest useful chunk ([`SchedulingHints`]).
            let room = match allowance {
                Some(a) if self.active[i].pending() > min_chunk => {
                    let left = a.saturating_sub(plan.prefill_weight().ceil() as u32);
                    plan.budget.min(left.max((min_chunk as f64 * self.token_weight(i)).ceil() as u32))
                }
                _ => plan.budget,
            };
            if room == 0 {
                break;
            }
            if plan.preempted.contains(&i) {
                continue;
            }
            let tenant = self.active[i].req.tenant;
            let limit = self.limits.get(tenant as usize).cloned();
            if !self.active[i].admitted() {
                let running = self.active.iter().filter(|a| a.admitted() && a.req.tenant == tenant).count() as u32;
                if limit.as_ref().is_some_and(|l| running >= l.max_running) {
                    continue;
                }
                // The KV quota is a reservation: a request is admitted only if its whole
                // prompt and output fit beside what the tenant's running requests may grow to.
                // A tenant at its quota waits without blocking other tenants' admissions.
                let reserved = self.reserved_pages(tenant);
                let needs = self.max_pages(&self.active[i]);
                if limit.as_ref().is_some_and(|l| reserved + needs > l.page_quota) {
                    continue;
                }
                // A request that scores its prompt needs every prompt row's logits: it
                // computes its whole prompt rather than reuse cached pages.
                if self.active[i].req.prompt_logprobs.is_none() {
                    self.match_prefix(i);
                }
            }
            if self.active[i].kv.is_swapped() && !self.resume(i)? {
                return Ok((prefilled, true));
            }
            let pending = self.active[i].pending();
            let per_token = self.token_weight(i);
            let affordable = ((room as f64 / per_token) as u32).max(1);
            let mut n = pending.min(affordable);
            let quota_left = limit.map_or(u32::MAX, |l| l.page_quota.saturating_sub(self.owned_pages(tenant)));
            let fit = |e: &Self| -> u32 {
                let can = e.kv.available().min(quota_left);
                ((e.active[i].kv.pages().len() as u32 + can) * ps).saturating_sub(e.active[i].n_computed)
            };
            // Memory held by a less urgent band gives way: preempt it for this request.
            while fit(self) == 0 && quota_left > 0 {
                match self.victim(i) {
                    Some(v) if !plan.preempted.contains(&v) && self.active[v].effective_band(self.cfg.aging) > band => {
                        self.preempt(v)?;
                        plan.preempted.push(v);
                        plan.entries.retain(|e| e.i != v);
                    }
                    _ => break,
                }
            }
            n = n.min(fit(self));
            if n == 0 {
                // Does not fit now: stop here rather than skip (no starvation of large requests).
                if !self.active[i].admitted() {
                    self.unmatch(i);
                }
                return Ok((prefilled, true));
            }
            let need = self.pages_needed(i, n);
            self.grow(i, need);
            match self.active[i].phase {
                Phase::Waiting => self.admit(i),
                Phase::Preempted => self.active[i].phase = Phase::Running,
                Phase::Running => {}
            }
            let weight = n as f64 * per_token;
            plan.entries.push(Entry { i, n, weight });
            plan.budget = plan.budget.saturating_sub((weight.ceil() as u32).max(1));
            prefilled = true;
        }
        Ok((prefilled, false))
    }
}
