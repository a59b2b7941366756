//! The engine loop: one thread owns the backend and runs continuous-batching steps back to
//! back while work exists.
//!
//! Each step has a token budget. Running decodes go first (one token each, in fairness order
//! when there are more streams than the budget), then prefill chunks of admitted requests,
//! then new admissions, so one long prompt delays the others by at most one step. Admission order: priority band (a batch request waiting longer than the
//! aging time counts as interactive), then the tenant's virtual token counter, then arrival;
//! admission stops at the first request that does not fit rather than skipping it. Under KV
//! pressure the lowest band's least-computed request is preempted: its pages are swapped to
//! host memory while the swap budget allows, recomputed otherwise; it keeps its place.

use super::{
    fair::Vtc,
    pages::{page_hash, PagePool, Scope},
    request::{Band, Event, Finish, Request, Usage},
    sampler::Sampler,
    sequence::check,
    stats::Stats,
};
use crate::model::{loaded::Model, tokenizer::StreamDecoder};
use std::{
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};
use zinc_plugin_api::{BackendBox, LogitRows, PageCopy, SeqChunk, Step};

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Tokens per step (decodes plus prefill chunks).
    pub step_tokens: u32,
    /// Tokens per KV page.
    pub page_size: u32,
    /// Pages in the backend's pool.
    pub n_pages: u32,
    /// Longest sequence (prompt plus output).
    pub max_context: u32,
    /// A batch request waiting this long is ordered as interactive.
    pub aging: Duration,
    /// Host memory for swapped-out pages; past it, preempted requests are recomputed.
    pub swap_bytes: u64,
    /// Context length at which one token's attention costs as much as its matmuls. A prefill
    /// token at position p counts as `1 + p / attention_equiv` budget tokens, so steps deep
    /// into a long prompt take fewer tokens and every step costs about the same time.
    pub attention_equiv: u32,
}

/// Per-tenant limits the engine enforces at admission.
#[derive(Debug, Clone)]
pub struct TenantLimit {
    /// Name, for stats.
    pub name: String,
    /// KV pages the tenant's running requests may hold.
    pub page_quota: u32,
    /// Requests running at once.
    pub max_running: u32,
    /// Fair-share weight.
    pub weight: f64,
}

/// Messages to the engine thread.
pub enum Command {
    /// A new request.
    Submit(Request),
    /// Stop: cancel everything in flight and return.
    Shutdown,
}

struct Active {
    req: Request,
    tokens: Vec<u32>,
    n_computed: u32,
    pages: Vec<u32>,
    /// Hashes of the leading full prompt pages (published or matched).
    hashes: Vec<u64>,
    generated: u32,
    sampler: Sampler,
    decoder: StreamDecoder,
    text: String,
    emitted: usize,
    swapped: Option<Vec<u8>>,
    admitted: bool,
    cached_tokens: u32,
    first_token: Option<Instant>,
    last_token: Option<Instant>,
    seq: u64,
    /// Whether the partial page ending this request's shared prefix was offered for
    /// copy-on-write.
    partial_published: bool,
}

impl Active {
    fn pending(&self) -> u32 {
        self.tokens.len() as u32 - self.n_computed
    }
    fn effective_band(&self, aging: Duration) -> Band {
        if self.req.band == Band::Batch && self.req.arrived.elapsed() >= aging {
            Band::Interactive
        } else {
            self.req.band
        }
    }
}

/// The engine.
pub struct Engine {
    cfg: EngineConfig,
    model: Arc<Model>,
    backend: BackendBox,
    pool: PagePool,
    vtc: Vtc,
    limits: Vec<TenantLimit>,
    active: Vec<Active>,
    swapped_bytes: u64,
    stats: Arc<Mutex<Stats>>,
    next_seq: u64,
}

/// Prefix-cache key of a partial page that ends a shared prefix: distinct from every full
/// page's key (the parent is salted), scoped as shared.
fn partial_page_key(parent: u64, tokens: &[u32]) -> u64 {
    page_hash(Scope::Shared, parent ^ 0x9e37_79b9_7f4a_7c15, tokens)
}

fn longest_stop_prefix(text: &str, stops: &[String]) -> usize {
    // Length of the longest suffix of `text` that is a proper prefix of a stop string.
    let mut best = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if text.ends_with(&s[..i]) {
                best = best.max(i);
            }
        }
    }
    best
}

impl Engine {
    /// An engine over an opened backend with a KV pool of `cfg.n_pages` pages.
    pub fn new(
        cfg: EngineConfig,
        model: Arc<Model>,
        backend: BackendBox,
        limits: Vec<TenantLimit>,
        stats: Arc<Mutex<Stats>>,
    ) -> Engine {
        let mut vtc = Vtc::default();
        for (i, l) in limits.iter().enumerate() {
            vtc.set_weight(i as u32, l.weight);
        }
        {
            let mut s = stats.lock().unwrap_or_else(|e| e.into_inner());
            s.kv_pages_total = cfg.n_pages;
            for l in &limits {
                s.tenant(&l.name);
            }
        }
        let pool = PagePool::new(cfg.n_pages);
        Engine { cfg, model, backend, pool, vtc, limits, active: Vec::new(), swapped_bytes: 0, stats, next_seq: 0 }
    }

    /// Runs until `Shutdown` or until every sender is gone.
    pub fn run(mut self, rx: mpsc::Receiver<Command>) {
        loop {
            // Block only when idle.
            let first = if self.active.is_empty() {
                match rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                }
            } else {
                None
            };
            for cmd in first.into_iter().chain(std::iter::from_fn(|| rx.try_recv().ok())) {
                match cmd {
                    Command::Submit(r) => self.submit(r),
                    Command::Shutdown => {
                        for i in (0..self.active.len()).rev() {
                            self.finish(i, Finish::Cancelled);
                        }
                        return;
                    }
                }
            }
            if let Err(e) = self.step() {
                tracing::error!("engine step failed: {e:#}");
                for i in (0..self.active.len()).rev() {
                    let _ = self.active[i].req.events.send(Event::Error(format!("{e:#}")));
                    self.finish(i, Finish::Cancelled);
                }
            }
        }
    }

    fn tenant_name(&self, t: u32) -> String {
        self.limits.get(t as usize).map_or_else(|| format!("tenant{t}"), |l| l.name.clone())
    }

    fn submit(&mut self, req: Request) {
        let band = req.band;
        let others: Vec<u32> =
            self.active.iter().filter(|a| !a.admitted && a.req.band == band).map(|a| a.req.tenant).collect();
        if !others.contains(&req.tenant) {
            self.vtc.on_backlogged(band, req.tenant, others.into_iter());
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let sampler = Sampler::new(req.sampler.clone());
        self.active.push(Active {
            tokens: req.prompt.clone(),
            req,
            n_computed: 0,
            pages: Vec::new(),
            hashes: Vec::new(),
            generated: 0,
            sampler,
            decoder: StreamDecoder::new(),
            text: String::new(),
            emitted: 0,
            swapped: None,
            admitted: false,
            cached_tokens: 0,
            first_token: None,
            last_token: None,
            seq,
            partial_published: false,
        });
    }

    /// Releases a request's pages and tells its client how it ended.
    fn finish(&mut self, i: usize, finish: Finish) {
        let a = self.active.swap_remove(i);
        tracing::debug!(request = a.req.id, finish = finish.label(), generated = a.generated, "request finished");
        for &p in &a.pages {
            self.pool.release(p);
        }
        if let Some(d) = &a.swapped {
            self.swapped_bytes -= d.len() as u64;
        }
        let usage = Usage {
            prompt_tokens: a.req.prompt.len() as u32,
            completion_tokens: a.generated,
            cached_tokens: a.cached_tokens,
        };
        let _ = a.req.events.send(Event::Done { finish, usage });
        let name = self.tenant_name(a.req.tenant);
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let t = s.tenant(&name);
        if a.admitted {
            t.running = t.running.saturating_sub(1);
        } else {
            t.waiting = t.waiting.saturating_sub(1);
        }
        t.requests += 1;
        t.prompt_tokens += a.req.prompt.len() as u64;
        t.completion_tokens += a.generated as u64;
        t.cached_tokens += a.cached_tokens as u64;
        if finish != Finish::Cancelled {
            s.e2e.observe(a.req.arrived.elapsed().as_secs_f64());
        }
    }

    /// Pages a request may hold by its end (prompt plus `max_tokens`, within the context).
    fn max_pages(&self, a: &Active) -> u32 {
        let tokens = (a.req.prompt.len() as u32).saturating_add(a.req.max_tokens).min(self.cfg.max_context);
        tokens.div_ceil(self.cfg.page_size)
    }

    /// Pages the tenant's admitted requests may grow to.
    fn reserved_pages(&self, tenant: u32) -> u32 {
        self.active.iter().filter(|a| a.admitted && a.req.tenant == tenant).map(|a| self.max_pages(a)).sum()
    }

    fn owned_pages(&self, tenant: u32) -> u32 {
        self.active.iter().filter(|a| a.req.tenant == tenant).map(|a| a.pages.len() as u32).sum()
    }

    fn pages_needed(&self, a: &Active, n: u32) -> u32 {
        (a.n_computed + n).div_ceil(self.cfg.page_size).saturating_sub(a.pages.len() as u32)
    }

    /// Matches leading full prompt pages in the prefix cache (at least one prompt token is
    /// always left to compute, for the logits).
    fn match_prefix(&mut self, i: usize) -> anyhow::Result<()> {
        let ps = self.cfg.page_size as usize;
        let a = &self.active[i];
        let full = (a.req.prompt.len() - 1) / ps;
        let (tenant, shared) = (a.req.tenant, a.req.shared_prefix);
        let prompt = a.req.prompt.clone();
        let mut parent = 0u64;
        let mut found = Vec::new();
        for p in 0..full {
            let scope = if (p + 1) * ps <= shared { Scope::Shared } else { Scope::Tenant(tenant) };
            let h = page_hash(scope, parent, &prompt[p * ps..(p + 1) * ps]);
            match self.pool.lookup(h) {
                Some(page) => found.push((page, h)),
                None => break,
            }
            parent = h;
        }
        let a = &mut self.active[i];
        let matched = found.len();
        for (page, h) in found {
            a.pages.push(page);
            a.hashes.push(h);
            a.n_computed += ps as u32;
            a.cached_tokens += ps as u32;
        }
        // A shared prefix that ends mid-page: copy the page that holds its tail from the
        // request that computed it (copy-on-write), then compute on from the prefix's end.
        let shared_full = shared / ps;
        if shared % ps != 0 && matched == shared_full && shared < prompt.len() {
            let key = partial_page_key(parent, &prompt[shared_full * ps..shared]);
            if let Some(src) = self.pool.lookup(key) {
                let dst = self.pool.alloc(tenant);
                let copied = match dst {
                    Some(d) => check(self.backend.copy_pages(vec![PageCopy { src, dst: d }].into())).map(|_| d),
                    None => Err(anyhow::anyhow!("no page free for the copy")),
                };
                self.pool.release(src);
                match copied {
                    Ok(d) => {
                        let a = &mut self.active[i];
                        a.pages.push(d);
                        a.cached_tokens += (shared - shared_full * ps) as u32;
                        a.n_computed = shared as u32;
                        a.partial_published = true;
                    }
                    Err(e) => {
                        if let Some(d) = dst {
                            self.pool.release(d);
                        }
                        tracing::debug!("shared-prefix copy skipped: {e:#}");
                    }
                }
            }
        }
        Ok(())
    }

    /// Publishes newly completed full prompt pages, and the page holding the tail of a shared
    /// prefix that ends mid-page. A page carries one key: the shared tail's key wins over the
    /// full-page key of the same page (it serves every tenant, not only this prompt's owner).
    fn publish(&mut self, i: usize) {
        let ps = self.cfg.page_size as usize;
        let a = &self.active[i];
        let done = (a.n_computed as usize).min(a.req.prompt.len()) / ps;
        let shared = a.req.shared_prefix;
        let shared_full = shared / ps;
        let mut new = Vec::new();
        let mut parent = a.hashes.last().copied().unwrap_or(0);
        let mut partial = None;
        for p in a.hashes.len()..done.max(a.hashes.len()) {
            let scope = if (p + 1) * ps <= shared { Scope::Shared } else { Scope::Tenant(a.req.tenant) };
            let h = page_hash(scope, parent, &a.req.prompt[p * ps..(p + 1) * ps]);
            new.push((a.pages[p], h));
            parent = h;
        }
        if shared % ps != 0 && !a.partial_published && a.n_computed as usize >= shared && a.pages.len() > shared_full {
            // The parent chain up to the tail page is known once its full pages are hashed.
            let chain: Vec<u64> = a.hashes.iter().copied().chain(new.iter().map(|x| x.1)).collect();
            if chain.len() >= shared_full {
                let parent = if shared_full == 0 { 0 } else { chain[shared_full - 1] };
                partial =
                    Some((a.pages[shared_full], partial_page_key(parent, &a.req.prompt[shared_full * ps..shared])));
            }
        }
        if let Some((page, key)) = partial {
            self.pool.publish(page, key);
            self.active[i].partial_published = true;
        }
        for (page, h) in new {
            self.pool.publish(page, h);
            self.active[i].hashes.push(h);
        }
    }

    /// Picks the request to preempt: lowest band, then least computed; never `keep`.
    fn victim(&self, keep: usize) -> Option<usize> {
        (0..self.active.len()).filter(|&i| i != keep && !self.active[i].pages.is_empty()).max_by_key(|&i| {
            let a = &self.active[i];
            (a.effective_band(self.cfg.aging), std::cmp::Reverse(a.n_computed), a.seq)
        })
    }

    fn preempt(&mut self, i: usize) -> anyhow::Result<()> {
        let bytes_per_page = {
            let a = &self.active[i];
            a.pages.len() as u64
        };
        let pages = self.active[i].pages.clone();
        let mut swapped = false;
        if !pages.is_empty() && self.swapped_bytes < self.cfg.swap_bytes {
            let data = check(self.backend.swap_out(pages.clone().into()))?.into_vec();
            if self.swapped_bytes + data.len() as u64 <= self.cfg.swap_bytes {
                self.swapped_bytes += data.len() as u64;
                self.active[i].swapped = Some(data);
                swapped = true;
            }
        }
        let _ = bytes_per_page;
        for &p in &pages {
            self.pool.release(p);
        }
        let a = &mut self.active[i];
        a.pages.clear();
        if !swapped {
            a.n_computed = 0;
            a.hashes.clear();
        }
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).preemptions += 1;
        tracing::info!(request = a.req.id, swapped, "preempted");
        Ok(())
    }

    /// Gives a swapped request its pages back.
    fn resume(&mut self, i: usize) -> anyhow::Result<bool> {
        let Some(data) = self.active[i].swapped.as_ref() else { return Ok(true) };
        let n = self.active[i].n_computed.div_ceil(self.cfg.page_size);
        if self.pool.available() < n {
            return Ok(false);
        }
        let tenant = self.active[i].req.tenant;
        let pages: Vec<u32> = (0..n).map(|_| self.pool.alloc(tenant).expect("checked available")).collect();
        check(self.backend.swap_in(pages.clone().into(), data.clone().into()))?;
        let a = &mut self.active[i];
        self.swapped_bytes -= a.swapped.take().map_or(0, |d| d.len() as u64);
        a.pages = pages;
        // Swapped pages come back private: their cache entries were dropped with the pages.
        a.hashes.clear();
        Ok(true)
    }

    fn grow(&mut self, i: usize, need: u32) -> bool {
        let tenant = self.active[i].req.tenant;
        for _ in 0..need {
            match self.pool.alloc(tenant) {
                Some(p) => self.active[i].pages.push(p),
                None => return false,
            }
        }
        true
    }

    fn order_key(&self, i: usize) -> (Band, u64, u64) {
        let a = &self.active[i];
        let band = a.effective_band(self.cfg.aging);
        // Counters are non-negative floats: their bit patterns order like the values.
        let c = self.vtc.counter(a.req.band, a.req.tenant).max(0.0).to_bits();
        (band, c, a.seq)
    }

    /// One step. Returns after executing it (or immediately when there is nothing to run).
    fn step(&mut self) -> anyhow::Result<()> {
        // Clients that went away: cancel, free pages now.
        for i in (0..self.active.len()).rev() {
            if self.active[i].req.events.is_closed() {
                self.finish(i, Finish::Cancelled);
            }
        }
        let ps = self.cfg.page_size;
        let mut budget = self.cfg.step_tokens.max(1);
        let mut plan: Vec<(usize, u32)> = Vec::new();
        // 1. Decodes of running requests.
        let decoders: Vec<usize> = (0..self.active.len())
            .filter(|&i| {
                self.active[i].admitted
                    && self.active[i].swapped.is_none()
                    && self.active[i].pending() == 1
                    && !self.active[i].pages.is_empty()
            })
            .collect();
        let mut decoders = decoders;
        decoders.sort_by_key(|&i| self.order_key(i));
        let mut preempted = Vec::new();
        for &i in &decoders {
            if budget == 0 {
                // More running streams than the step budget: the rest decode next step, and
                // the order above (band, then the tenant's virtual counter) shares the steps
                // fairly between tenants.
                break;
            }
            if preempted.contains(&i) {
                continue;
            }
            let need = self.pages_needed(&self.active[i], 1);
            while self.pool.available() < need {
                match self.victim(i) {
                    Some(v)
                        if !preempted.contains(&v)
                            && self.active[v].effective_band(self.cfg.aging)
                                >= self.active[i].effective_band(self.cfg.aging) =>
                    {
                        self.preempt(v)?;
                        preempted.push(v);
                    }
                    _ => break,
                }
            }
            if self.pool.available() < need {
                self.preempt(i)?;
                preempted.push(i);
                continue;
            }
            self.grow(i, need);
            plan.push((i, 1));
            budget = budget.saturating_sub(1);
        }
        plan.retain(|(i, _)| !preempted.contains(i));
        // 2. Prefill chunks: admitted first, then waiting (admission), in fairness order.
        let mut candidates: Vec<usize> =
            (0..self.active.len()).filter(|i| !plan.iter().any(|(j, _)| j == i) && !preempted.contains(i)).collect();
        // Most urgent band first; within a band, requests already admitted (or preempted, which
        // keep their place) before new ones; then the tenant's counter; then arrival.
        candidates.sort_by_key(|&i| {
            let (band, counter, seq) = self.order_key(i);
            (band, !self.active[i].admitted, counter, seq)
        });
        for i in candidates {
            if budget == 0 {
                break;
            }
            if preempted.contains(&i) {
                continue;
            }
            let tenant = self.active[i].req.tenant;
            let limit = self.limits.get(tenant as usize).cloned();
            if !self.active[i].admitted {
                let running = self.active.iter().filter(|a| a.admitted && a.req.tenant == tenant).count() as u32;
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
                self.match_prefix(i)?;
            }
            if self.active[i].swapped.is_some() && !self.resume(i)? {
                break;
            }
            let pending = self.active[i].pending();
            // Cost-aware chunk: tokens deep in a long context cost more (their attention).
            let past = self.active[i].n_computed as f64;
            let per_token = 1.0 + past / self.cfg.attention_equiv.max(1) as f64;
            let affordable = ((budget as f64 / per_token) as u32).max(1);
            let mut n = pending.min(affordable);
            let quota_left = limit.map_or(u32::MAX, |l| l.page_quota.saturating_sub(self.owned_pages(tenant)));
            let fit = |e: &Self| -> u32 {
                let can = e.pool.available().min(quota_left);
                ((e.active[i].pages.len() as u32 + can) * ps).saturating_sub(e.active[i].n_computed)
            };
            // Memory held by a less urgent band gives way: preempt it for this request.
            let band = self.active[i].effective_band(self.cfg.aging);
            while fit(self) == 0 && quota_left > 0 {
                match self.victim(i) {
                    Some(v) if !preempted.contains(&v) && self.active[v].effective_band(self.cfg.aging) > band => {
                        self.preempt(v)?;
                        preempted.push(v);
                        plan.retain(|(j, _)| *j != v);
                    }
                    _ => break,
                }
            }
            n = n.min(fit(self));
            if n == 0 {
                // Does not fit now: stop here rather than skip (no starvation of large requests).
                if !self.active[i].admitted {
                    self.unmatch(i);
                }
                break;
            }
            let need = self.pages_needed(&self.active[i], n);
            self.grow(i, need);
            if !self.active[i].admitted {
                self.admit(i);
            }
            plan.push((i, n));
            budget = budget.saturating_sub(((n as f64 * per_token).ceil() as u32).max(1));
        }
        if plan.is_empty() {
            self.refresh_stats(0.0);
            if !self.active.is_empty() {
                // Everything waits on memory or limits held by nobody runnable: avoid spinning.
                std::thread::sleep(Duration::from_millis(2));
            }
            return Ok(());
        }
        self.execute(plan)
    }

    /// Undoes a prefix match for a request that could not be admitted after all.
    fn unmatch(&mut self, i: usize) {
        let a = &mut self.active[i];
        let pages = std::mem::take(&mut a.pages);
        a.n_computed = 0;
        a.cached_tokens = 0;
        a.hashes.clear();
        a.partial_published = false;
        for p in pages {
            self.pool.release(p);
        }
    }

    fn admit(&mut self, i: usize) {
        let a = &mut self.active[i];
        a.admitted = true;
        let waited = a.req.arrived.elapsed().as_secs_f64();
        let hits = (a.cached_tokens / self.cfg.page_size) as u64;
        let name = self.tenant_name(self.active[i].req.tenant);
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.queue_time.observe(waited);
        let t = s.tenant(&name);
        t.waiting = t.waiting.saturating_sub(1);
        t.running += 1;
        t.queue_seconds += waited;
        t.prefix_hits += hits;
    }

    fn execute(&mut self, plan: Vec<(usize, u32)>) -> anyhow::Result<()> {
        let started = Instant::now();
        let mut step = Step::default();
        let mut row = 0u32;
        let mut wants = Vec::new();
        for &(i, n) in &plan {
            let a = &self.active[i];
            let end = a.n_computed + n;
            let want = end as usize == a.tokens.len();
            let pages: Vec<u32> = a.pages[..end.div_ceil(self.cfg.page_size) as usize].to_vec();
            step.seqs.push(SeqChunk {
                seq_id: a.seq,
                first_row: row,
                n_rows: n,
                n_past: a.n_computed,
                page_table: pages.into(),
                logits: if want { LogitRows::Last } else { LogitRows::None },
            });
            step.tokens.extend(a.tokens[a.n_computed as usize..end as usize].iter().copied());
            step.positions.extend(a.n_computed..end);
            row += n;
            wants.push(want);
        }
        let out = check(self.backend.execute(&step))?;
        let vocab = self.model.program.hparams.n_vocab as usize;
        let mut logit_row = 0;
        let mut finished = Vec::new();
        for (k, &(i, n)) in plan.iter().enumerate() {
            let prefill = self.active[i].pending() > 1 || self.active[i].generated == 0;
            self.active[i].n_computed += n;
            let (band, tenant) = (self.active[i].req.band, self.active[i].req.tenant);
            if prefill {
                self.vtc.charge_prompt(band, tenant, n);
                self.publish(i);
            }
            if !wants[k] {
                continue;
            }
            let logits = &out.logits[logit_row * vocab..(logit_row + 1) * vocab];
            logit_row += 1;
            if let Some(f) = self.sample(i, logits) {
                finished.push((i, f));
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        finished.sort_by(|a, b| b.0.cmp(&a.0));
        for (i, f) in finished {
            self.finish(i, f);
        }
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).steps += 1;
        self.refresh_stats(elapsed);
        Ok(())
    }

    /// Copies page usage and backend counters into the shared stats; `elapsed` is the time
    /// the current holdings were held (integrated into page-seconds).
    fn refresh_stats(&mut self, elapsed: f64) {
        let counters = self.backend.counters();
        let mut per_tenant: std::collections::HashMap<u32, u32> = std::collections::HashMap::new();
        for a in &self.active {
            *per_tenant.entry(a.req.tenant).or_default() += a.pages.len() as u32;
        }
        let names: Vec<(String, u32)> = per_tenant.iter().map(|(t, p)| (self.tenant_name(*t), *p)).collect();
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.backend = counters;
        s.kv_pages_used = self.pool.in_use();
        s.prefix_queries = self.pool.stats.queries;
        s.prefix_hits = self.pool.stats.hits;
        for t in s.tenants.values_mut() {
            t.pages = 0;
        }
        for (name, pages) in names {
            let t = s.tenant(&name);
            t.pages = pages;
            t.kv_page_seconds += pages as f64 * elapsed;
        }
    }

    /// Samples the next token of request `i`, streams its text; returns how it finished.
    fn sample(&mut self, i: usize, logits: &[f32]) -> Option<Finish> {
        let now = Instant::now();
        let model = self.model.clone();
        let a = &mut self.active[i];
        let history_start = a.req.prompt.len();
        let tok = a.sampler.sample(logits, &a.tokens, &a.tokens[history_start..]);
        let mut stats = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        match a.last_token {
            None => stats.ttft.observe((now - a.req.arrived).as_secs_f64()),
            Some(t) => stats.itl.observe((now - t).as_secs_f64()),
        }
        drop(stats);
        a.first_token.get_or_insert(now);
        a.last_token = Some(now);
        self.vtc.charge_output(a.req.band, a.req.tenant, 1);
        if model.tokenizer.is_stop(tok) && !a.req.ignore_eos {
            return Some(Finish::Stop);
        }
        a.generated += 1;
        a.tokens.push(tok);
        let piece = a.decoder.push(&model.tokenizer.token_bytes(tok, false));
        a.text.push_str(&piece);
        if let Some(at) = a.req.stop.iter().filter_map(|s| a.text.find(s.as_str())).min() {
            if at > a.emitted {
                let _ = a.req.events.send(Event::Text(a.text[a.emitted..at].to_string()));
            }
            a.emitted = at.max(a.emitted);
            return Some(Finish::Stop);
        }
        let hold = longest_stop_prefix(&a.text, &a.req.stop);
        let safe = a.text.len() - hold;
        if safe > a.emitted {
            let _ = a.req.events.send(Event::Text(a.text[a.emitted..safe].to_string()));
            a.emitted = safe;
        }
        if a.generated >= a.req.max_tokens || a.tokens.len() as u32 >= self.cfg.max_context {
            let rest = a.decoder.finish();
            a.text.push_str(&rest);
            if a.text.len() > a.emitted {
                let _ = a.req.events.send(Event::Text(a.text[a.emitted..].to_string()));
                a.emitted = a.text.len();
            }
            return Some(Finish::Length);
        }
        None
    }

    /// Pages in use (for tests).
    pub fn pages_in_use(&self) -> u32 {
        self.pool.in_use()
    }
}

#[cfg(test)]
mod tests {
    use super::longest_stop_prefix;

    #[test]
    fn stop_prefixes_are_held_back() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(longest_stop_prefix("hello E", &stops), 1);
        assert_eq!(longest_stop_prefix("hello EN", &stops), 2);
        assert_eq!(longest_stop_prefix("hello\n", &stops), 1);
        assert_eq!(longest_stop_prefix("hello", &stops), 0);
    }
}
