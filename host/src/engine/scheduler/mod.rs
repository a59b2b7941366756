//! The engine loop: one thread owns the backend and runs continuous-batching steps back to
//! back while work exists.
//!
//! Each step has a token budget and, beside running decodes, a time allowance for prefill
//! (`plan.rs`, `cost.rs`): running decodes go first (one token each, in fairness order when
//! there are more streams than the budget), then prefill chunks of admitted requests, then
//! new admissions, band by band, so one long prompt delays the others by at most one step of
//! bounded length. Admission order: priority band (a batch request waiting longer than the
//! aging time counts as interactive), then the tenant's virtual token counter, then arrival;
//! admission stops at the first request that does not fit rather than skipping it. Under KV
//! pressure the lowest band's least-computed request is preempted: its pages are swapped to
//! host memory while the swap budget allows, recomputed otherwise; it keeps its place.

mod cost;
mod emit;
mod failover;
mod plan;
mod preempt;
#[cfg(test)]
mod tests;

use super::{
    admission::Admission,
    fair::Vtc,
    kv::{KvManager, SeqKv, WindowSpec},
    output::{OutputLimits, OutputStage, RowLogits},
    request::{Band, Event, Finish, Request},
    sequence::{check, BackendError},
    stats::Stats,
};
use crate::model::loaded::Model;
use std::{
    sync::{mpsc, Arc, Mutex},
    time::{Duration, Instant},
};
use zinc_plugin_api::{top_count, window_keys, BackendBox, ErrorKind, LogitRows, SchedulingHints, SeqChunk, Step};

pub use failover::{FailoverOpen, Replacement};

/// Engine settings.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Tokens per step (decodes plus prefill chunks).
    pub step_tokens: u32,
    /// Tokens per KV page.
    pub page_size: u32,
    /// Pages in the backend's pool.
    pub n_pages: u32,
    /// Window pages beside them, for the sliding-window layers (0: those layers' keys live in
    /// the full pages).
    pub window_pages: u32,
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
    /// A step that carries running decodes takes prefill work for at most about this many
    /// times the measured decode-only step ([`cost::StepCost`]); 0 leaves only the token
    /// budget. Smaller keeps the streams beside a long prompt closer to their pace; larger
    /// gets the long prompt's first token sooner.
    pub step_slowdown: f64,
    /// For this long after an interactive-band request was last seen, a step of batch decodes
    /// takes only as many as fit in the time of an interactive prompt's step (zero: never).
    pub interactive_window: Duration,
}

impl EngineConfig {
    /// The window pages of the pool as the KV manager sees them, for `model`'s windows.
    fn window_spec(&self, model: &Model) -> WindowSpec {
        WindowSpec { pages: self.window_pages, first_id: self.n_pages, keys: window_keys(&model.program) }
    }
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

/// Where a request is in its life. A request is `Waiting` until admitted (holding no pages: a
/// prefix match made while trying to admit it is undone when it does not fit), `Running` from
/// then on, and `Preempted` from the moment KV pressure takes its pages (swapped to host memory
/// or dropped for recompute) until it is given pages again; it keeps its place and its
/// admission meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Waiting,
    Running,
    Preempted,
}

struct Active {
    req: Request,
    tokens: Vec<u32>,
    n_computed: u32,
    /// Its KV pages, published prompt pages and swapped copy.
    kv: SeqKv,
    /// Sampling, stop checks and the streamed text.
    out: OutputStage,
    phase: Phase,
    cached_tokens: u32,
    last_token: Option<Instant>,
    seq: u64,
    /// Logits computed for this request whose grammar mask was not ready when the step
    /// ended: sampled at a later step, the request sitting out steps meanwhile.
    held_logits: Option<Vec<f32>>,
    /// Prompt tokens whose log-probability has been sent (requests that score their prompt;
    /// the first token has none, so this starts at 1). A prompt recomputed after preemption
    /// is not reported twice.
    prompt_scored: u32,
}

impl Active {
    /// Admitted: running, or preempted and keeping its admission.
    fn admitted(&self) -> bool {
        self.phase != Phase::Waiting
    }
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
    kv: KvManager,
    vtc: Vtc,
    limits: Vec<TenantLimit>,
    active: Vec<Active>,
    stats: Arc<Mutex<Stats>>,
    next_seq: u64,
    cost: cost::StepCost,
    /// When an interactive-band request was last seen.
    last_interactive: Option<Instant>,
    /// How the backend wants its steps shaped.
    hints: SchedulingHints,
    /// Each tenant's waiting and running requests.
    admission: Arc<Admission>,
    /// Where requests go when the backend fails (see failover.rs); none for a forced backend.
    failover: Option<failover::Failover>,
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
            s.kv_window_pages_total = cfg.window_pages;
            for l in &limits {
                s.tenant(&l.name);
            }
        }
        let kv = KvManager::with_window(cfg.n_pages, cfg.page_size, cfg.swap_bytes, cfg.window_spec(&model));
        let n_tenants = limits.len();
        let hints = backend.scheduling();
        Engine {
            cfg,
            model,
            backend,
            kv,
            vtc,
            limits,
            active: Vec::new(),
            stats,
            next_seq: 0,
            cost: cost::StepCost::default(),
            last_interactive: None,
            hints,
            admission: Arc::new(Admission::new(n_tenants)),
            failover: None,
        }
    }

    /// The admission queue's counts, which the HTTP side bounds before it submits requests.
    pub fn admission(&self) -> Arc<Admission> {
        self.admission.clone()
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
                if self.fail_over(&e) {
                    continue;
                }
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

    fn submit(&mut self, mut req: Request) {
        let band = req.band;
        let others: Vec<u32> = self
            .active
            .iter()
            .filter(|a| a.phase == Phase::Waiting && a.req.band == band)
            .map(|a| a.req.tenant)
            .collect();
        if !others.contains(&req.tenant) {
            self.vtc.on_backlogged(band, req.tenant, others.into_iter());
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let limits = OutputLimits {
            stop: req.stop.clone(),
            max_tokens: req.max_tokens,
            max_context: self.cfg.max_context,
            ignore_eos: req.ignore_eos,
            logprobs: req.logprobs,
        };
        let out = OutputStage::new(req.sampler.clone(), limits).constrained(req.constraint.take());
        self.active.push(Active {
            tokens: req.prompt.clone(),
            req,
            n_computed: 0,
            kv: SeqKv::default(),
            out,
            phase: Phase::Waiting,
            cached_tokens: 0,
            last_token: None,
            seq,
            held_logits: None,
            prompt_scored: 1,
        });
        self.refuse_if_it_cannot_fit(self.active.len() - 1);
    }

    /// Fails request `i` if it could never be admitted, holding more pages by its end than the
    /// whole pool: the server refuses such requests before they come, but a failover may leave
    /// a smaller pool than the one they were checked against. Waiting would be forever.
    pub(super) fn refuse_if_it_cannot_fit(&mut self, i: usize) {
        let (needs, pool) = (self.max_pages(&self.active[i]), self.kv.pool().capacity());
        if needs > pool {
            let why = format!(
                "the request needs {needs} KV pages by its end but the pool holds {pool}; shorten it or lower max_tokens"
            );
            let _ = self.active[i].req.events.send(Event::Error(why));
            self.finish(i, Finish::Cancelled);
        }
    }

    /// Pages a request may hold by its end (prompt plus `max_tokens`, within the context).
    fn max_pages(&self, a: &Active) -> u32 {
        let tokens = (a.req.prompt.len() as u32).saturating_add(a.req.max_tokens).min(self.cfg.max_context);
        tokens.div_ceil(self.cfg.page_size)
    }

    /// Pages the tenant's admitted requests may grow to.
    fn reserved_pages(&self, tenant: u32) -> u32 {
        self.active.iter().filter(|a| a.admitted() && a.req.tenant == tenant).map(|a| self.max_pages(a)).sum()
    }

    fn owned_pages(&self, tenant: u32) -> u32 {
        self.active.iter().filter(|a| a.req.tenant == tenant).map(|a| a.kv.pages().len() as u32).sum()
    }

    /// Pages request `i` lacks to compute `n` more tokens.
    fn pages_needed(&self, i: usize, n: u32) -> u32 {
        let a = &self.active[i];
        self.kv.pages_needed(&a.kv, a.n_computed + n)
    }

    fn grow(&mut self, i: usize, need: u32) -> bool {
        let a = &mut self.active[i];
        self.kv.grow(&mut a.kv, a.req.tenant, need)
    }

    /// Indices of the requests in `phase`, in list order: the waiting, running and preempted
    /// queues are views of one list, ordered by each planning pass (fairness, band, arrival).
    fn in_phase(&self, phase: Phase) -> impl Iterator<Item = usize> + '_ {
        (0..self.active.len()).filter(move |&i| self.active[i].phase == phase)
    }

    fn order_key(&self, i: usize) -> (Band, u64, u64) {
        let a = &self.active[i];
        let band = a.effective_band(self.cfg.aging);
        // Counters are non-negative floats: their bit patterns order like the values.
        let c = self.vtc.counter(a.req.band, a.req.tenant).max(0.0).to_bits();
        (band, c, a.seq)
    }

    fn admit(&mut self, i: usize) {
        let a = &mut self.active[i];
        a.phase = Phase::Running;
        let waited = a.req.arrived.elapsed().as_secs_f64();
        let hits = (a.cached_tokens / self.cfg.page_size) as u64;
        let name = self.tenant_name(self.active[i].req.tenant);
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        s.queue_time.observe(waited);
        self.admission.admit(self.active[i].req.tenant);
        let t = s.tenant(&name);
        t.queue_seconds += waited;
        t.prefix_hits += hits;
    }

    fn execute(&mut self, plan: plan::StepPlan) -> anyhow::Result<()> {
        let started = Instant::now();
        let (decodes, prefill_weight, interactive_prompt) =
            (plan.decodes(), plan.prefill_weight(), plan.interactive_prompt);
        // Longest chunks first where the backend groups rows: a GPU backend's prompt tiles are
        // rows 16i..16i+15 of the step and take only tiles of one sequence, so a chunk placed
        // after a few decode rows had most of its rows on the one-row kernel (H200 trace:
        // every 16-token chunk beside four decodes deep in a long prompt). The order of rows
        // changes nothing else.
        let mut plan: Vec<(usize, u32)> = plan.entries.iter().map(|e| (e.i, e.n)).collect();
        if self.hints.row_group > 1 {
            plan.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        }
        let mut step = Step::default();
        let mut row = 0u32;
        let vocab = self.model.program.hparams.n_vocab as usize;
        // Rows whose sampler needs only the likeliest tokens get the backend's summary, not
        // the whole vocabulary (on a GPU, the step's largest readback and host loop).
        let top_count = top_count(vocab as u32) as usize;
        let mut wants = Vec::new();
        let mut scores = Vec::new();
        for &(i, n) in &plan {
            let a = &self.active[i];
            let end = a.n_computed + n;
            let want = end as usize == a.tokens.len();
            // Rows whose next token is a prompt token not yet scored, for requests that score
            // their prompt: every row's logits come back then.
            let score = a.req.prompt_logprobs.is_some() && (a.prompt_scored as usize) < a.req.prompt.len();
            let used = end.div_ceil(self.cfg.page_size) as usize;
            let window = a.kv.window();
            step.seqs.push(SeqChunk {
                seq_id: a.seq,
                first_row: row,
                n_rows: n,
                n_past: a.n_computed,
                page_table: a.kv.pages()[..used].to_vec().into(),
                window_table: window[..used.min(window.len())].to_vec().into(),
                logits: match (score, want) {
                    (true, _) => LogitRows::All,
                    (false, true) if a.out.summary_suffices(top_count, vocab) => LogitRows::LastTop,
                    (false, true) => LogitRows::Last,
                    (false, false) => LogitRows::None,
                },
            });
            scores.push(score);
            step.tokens.extend(a.tokens[a.n_computed as usize..end as usize].iter().copied());
            step.positions.extend(a.n_computed..end);
            row += n;
            wants.push(want);
        }
        let run = Instant::now();
        let out = check(self.backend.execute(&step))?;
        out.check_shape(&step, vocab).map_err(|message| BackendError { kind: ErrorKind::Device, message })?;
        let secs = run.elapsed().as_secs_f64();
        tracing::trace!(decodes, prefill_weight, rows = step.tokens.len(), secs, "step");
        self.cost.observe(decodes, prefill_weight, interactive_prompt, secs);
        let (mut logit_row, mut top_row) = (0, 0);
        let mut finished = Vec::new();
        for (k, &(i, n)) in plan.iter().enumerate() {
            let prefill = self.active[i].pending() > 1 || self.active[i].out.generated() == 0;
            if scores[k] {
                let rows = &out.logits[logit_row * vocab..(logit_row + n as usize) * vocab];
                self.score_prompt(i, rows);
                // The sampled row, if any, is the chunk's last.
                logit_row += n as usize - usize::from(wants[k]);
            }
            self.active[i].n_computed += n;
            let (band, tenant) = (self.active[i].req.band, self.active[i].req.tenant);
            if prefill {
                self.vtc.charge_prompt(band, tenant, n);
                self.publish(i);
            }
            let a = &mut self.active[i];
            self.kv.slide(&mut a.kv, a.n_computed);
            if !wants[k] {
                continue;
            }
            let row = if step.seqs[k].logits == LogitRows::LastTop {
                let r = top_row * top_count..(top_row + 1) * top_count;
                top_row += 1;
                RowLogits::Summary {
                    ids: &out.top_ids[r.clone()],
                    logits: &out.top_logits[r],
                    norm: out.top_norms[top_row - 1],
                }
            } else {
                logit_row += 1;
                RowLogits::Whole(&out.logits[(logit_row - 1) * vocab..logit_row * vocab])
            };
            if self.active[i].req.max_tokens == 0 {
                // Only its prompt was asked for (scored): nothing is generated.
                finished.push((i, Finish::Length));
                continue;
            }
            if !self.active[i].out.ready() {
                // Its grammar is still computing the mask: the others go on without it (a
                // grammar's row is always whole).
                if let RowLogits::Whole(logits) = row {
                    self.active[i].held_logits = Some(logits.to_vec());
                }
                continue;
            }
            if let Some(f) = self.sample(i, row) {
                finished.push((i, f));
            }
        }
        let elapsed = started.elapsed().as_secs_f64();
        finished.sort_by_key(|f| std::cmp::Reverse(f.0));
        for (i, f) in finished {
            self.finish(i, f);
        }
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).steps += 1;
        self.refresh_stats(elapsed);
        Ok(())
    }
}
