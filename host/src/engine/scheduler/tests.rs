//! The engine against a stand-in backend: what it plans (chunk sizes, row order, prefix hits)
//! is read from the steps the backend receives. The backend sleeps in proportion to each
//! step's rows, so that the engine's cost model measures a realistic shape, and its logits
//! pick a token from the row's position alone, so greedy output never depends on batching.

use super::*;
use crate::engine::request::Usage;
use crate::engine::sampler::SamplerConfig;
use std::thread;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use zinc_plugin_api::{
    BackendImpl, Counters, DeviceInfo, DeviceKind, GuardedBackend, KvPoolInfo, KvPoolSpec, ModelProgram, PageCopy,
    PluginResult, SchedulingHints, StepOutput,
};

/// One step as the backend saw it: (sequence id, rows) per chunk, in row order.
type SeenStep = Vec<(u64, u32)>;

struct StandIn {
    hints: SchedulingHints,
    n_vocab: usize,
    seen: Arc<Mutex<Vec<SeenStep>>>,
    /// Every chunk's sequence id and the logits it asked for.
    kinds: Arc<Mutex<Vec<(u64, LogitRows)>>>,
    /// Fails every step from this one on (counting from 1), in this way.
    fail_from: Option<usize>,
    failure: Failure,
    executed: usize,
}

/// How the stand-in fails.
#[derive(Debug, Clone, Copy)]
enum Failure {
    /// As a lost device does.
    Device,
    /// As a backend that calls the step inconsistent.
    Invalid,
    /// With an output that lacks the summaries the step asked for, as a faulty plugin might.
    Malformed,
}

impl StandIn {
    fn new(hints: SchedulingHints, n_vocab: usize, seen: Arc<Mutex<Vec<SeenStep>>>) -> StandIn {
        let kinds = Default::default();
        StandIn { hints, n_vocab, seen, kinds, fail_from: None, failure: Failure::Device, executed: 0 }
    }
}

impl BackendImpl for StandIn {
    fn device(&self) -> DeviceInfo {
        DeviceInfo::new("stand-in", "test", "none", DeviceKind::Cpu, 0, vec![])
    }
    fn load_model(&mut self, _: &ModelProgram) -> PluginResult<()> {
        Ok(())
    }
    fn create_kv_pool(&mut self, spec: KvPoolSpec) -> PluginResult<KvPoolInfo> {
        Ok(KvPoolInfo {
            n_pages: spec.n_pages,
            page_size: spec.page_size,
            bytes_per_page: 64,
            window_pages: 0,
            bytes_per_window_page: 0,
        })
    }
    fn execute(&mut self, step: &Step) -> PluginResult<StepOutput> {
        self.executed += 1;
        let failing = self.fail_from.is_some_and(|n| self.executed >= n);
        match self.failure {
            Failure::Invalid if failing => {
                return Err(zinc_plugin_api::PluginError::invalid("stand-in: device lost, or so it says"))
            }
            Failure::Device if failing => return Err(zinc_plugin_api::PluginError::device("stand-in: device lost")),
            _ => {}
        }
        self.seen.lock().unwrap().push(step.seqs.iter().map(|c| (c.seq_id, c.n_rows)).collect());
        self.kinds.lock().unwrap().extend(step.seqs.iter().map(|c| (c.seq_id, c.logits)));
        thread::sleep(Duration::from_micros(1000 + 200 * step.tokens.len() as u64));
        let mut logits = Vec::new();
        for c in step.seqs.iter() {
            let rows: Vec<u32> = match c.logits {
                LogitRows::None => vec![],
                LogitRows::Last | LogitRows::LastTop => vec![c.first_row + c.n_rows - 1],
                LogitRows::All => (c.first_row..c.first_row + c.n_rows).collect(),
            };
            for r in rows {
                let mut l = vec![0f32; self.n_vocab];
                // A plain word piece chosen by position: never a stop token.
                l[1000 + (step.positions[r as usize] as usize * 7) % 500] = 10.0;
                logits.extend(l);
            }
        }
        let mut out = StepOutput::from_picked_rows(step, &logits, self.n_vocab, 0);
        if failing {
            out.top_norms.clear();
        }
        Ok(out)
    }
    fn copy_pages(&mut self, _: &[PageCopy]) -> PluginResult<()> {
        Ok(())
    }
    fn swap_out(&mut self, pages: &[u32]) -> PluginResult<Vec<u8>> {
        Ok(vec![0; pages.len() * 64])
    }
    fn swap_in(&mut self, _: &[u32], _: &[u8]) -> PluginResult<()> {
        Ok(())
    }
    fn counters(&self) -> Counters {
        Counters::default()
    }
    fn scheduling(&self) -> SchedulingHints {
        self.hints
    }
}

/// The default model: its tokenizer and vocabulary size (the stand-in ignores its weights).
fn model() -> Arc<Model> {
    Arc::new(crate::model::loaded::default_model_for_tests())
}

/// An engine on the stand-in backend, running on its own thread.
struct Harness {
    tx: mpsc::Sender<Command>,
    seen: Arc<Mutex<Vec<SeenStep>>>,
    kinds: Arc<Mutex<Vec<(u64, LogitRows)>>>,
    stats: Arc<Mutex<Stats>>,
    engine: Option<thread::JoinHandle<()>>,
    next_id: u64,
}

impl Harness {
    fn new(hints: SchedulingHints) -> Harness {
        Harness::with_pool(hints, 512, 0)
    }

    /// An engine with `n_pages` KV pages and `swap_bytes` of host memory for preempted pages.
    fn with_pool(hints: SchedulingHints, n_pages: u32, swap_bytes: u64) -> Harness {
        Harness::build(hints, n_pages, swap_bytes, None, None)
    }

    /// An engine whose backend fails every step from step `fail_from` on, with `failover`.
    fn failing(fail_from: usize, failover: Option<FailoverOpen>) -> Harness {
        Harness::build(SchedulingHints::default(), 512, 0, Some((fail_from, Failure::Device)), failover)
    }

    fn build(
        hints: SchedulingHints,
        n_pages: u32,
        swap_bytes: u64,
        fail: Option<(usize, Failure)>,
        failover: Option<FailoverOpen>,
    ) -> Harness {
        let model = model();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let n_vocab = model.program.hparams.n_vocab as usize;
        let (fail_from, failure) = (fail.map(|f| f.0), fail.map_or(Failure::Device, |f| f.1));
        let stand_in = StandIn { fail_from, failure, ..StandIn::new(hints, n_vocab, seen.clone()) };
        let kinds = stand_in.kinds.clone();
        let backend = GuardedBackend::boxed(stand_in);
        let cfg = EngineConfig {
            step_tokens: 256,
            page_size: 16,
            n_pages,
            window_pages: 0,
            max_context: 4096,
            aging: Duration::from_secs(60),
            swap_bytes,
            attention_equiv: 1 << 20,
            step_slowdown: 1.5,
            interactive_window: Duration::ZERO,
        };
        let limits = vec![TenantLimit { name: "t".into(), page_quota: 512, max_running: 64, weight: 1.0 }];
        let stats = Arc::new(Mutex::new(Stats { backend_name: "first".into(), ..Default::default() }));
        let mut engine = Engine::new(cfg, model, backend, limits, stats.clone());
        if let Some(open) = failover {
            engine = engine.with_failover(open);
        }
        let (tx, rx) = mpsc::channel();
        Harness { tx, seen, kinds, stats, engine: Some(thread::spawn(move || engine.run(rx))), next_id: 0 }
    }

    /// Submits a greedy interactive request; returns its event stream.
    fn submit(&mut self, prompt: Vec<u32>, max_tokens: u32) -> UnboundedReceiver<Event> {
        self.submit_in(Band::Interactive, prompt, max_tokens)
    }

    /// Submits a greedy request in `band`; returns its event stream.
    fn submit_in(&mut self, band: Band, prompt: Vec<u32>, max_tokens: u32) -> UnboundedReceiver<Event> {
        self.submit_with(band, prompt, max_tokens, |_| {})
    }

    /// Submits a greedy request in `band`, changed by `edit`; returns its event stream.
    fn submit_with(
        &mut self,
        band: Band,
        prompt: Vec<u32>,
        max_tokens: u32,
        edit: impl FnOnce(&mut Request),
    ) -> UnboundedReceiver<Event> {
        let (events, rx) = unbounded_channel();
        self.next_id += 1;
        let sampler = SamplerConfig { temperature: 0.0, ..Default::default() };
        let mut req = Request {
            id: self.next_id,
            tenant: 0,
            band,
            prompt,
            shared_prefix: 0,
            max_tokens,
            sampler,
            stop: vec![],
            ignore_eos: false,
            logprobs: None,
            prompt_logprobs: None,
            constraint: None,
            events,
            arrived: Instant::now(),
        };
        edit(&mut req);
        self.tx.send(Command::Submit(req)).unwrap();
        rx
    }

    fn steps(&self) -> Vec<SeenStep> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(e) = self.engine.take() {
            e.join().unwrap();
        }
    }
}

/// Waits for a request's end; returns its usage.
fn done(rx: &mut UnboundedReceiver<Event>) -> Usage {
    finished(rx).2
}

/// Waits for a request's end; returns its text, how it ended and its usage.
fn finished(rx: &mut UnboundedReceiver<Event>) -> (String, Finish, Usage) {
    use tokio::sync::mpsc::error::TryRecvError;
    let mut text = String::new();
    // A stuck engine fails the test instead of hanging it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rx.try_recv() {
            Ok(Event::Done { finish, usage }) => return (text, finish, usage),
            Ok(Event::Error(e) | Event::GrammarFailed(e)) => panic!("request failed: {e}"),
            Ok(Event::Text(t)) => text.push_str(&t),
            Ok(Event::Logprobs(_) | Event::PromptLogprobs(_)) => {}
            Err(TryRecvError::Empty) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("the request did not end within 60 s ({e})"),
        }
    }
}

/// Requests whose sampler ranks within a summary's candidates (greedy, a small top-k, with or
/// without log-probabilities) get their rows summarised; penalties, an unranked draw (the
/// API's default: no top-k) and a top-k wider than the candidates get whole rows. Each
/// summarised request still generates what its whole rows would give (the stand-in's token).
#[test]
fn rows_are_summarised_where_the_sampler_needs_only_the_likeliest_tokens() {
    let mut h = Harness::new(SchedulingHints::default());
    let cases: [(SamplerConfig, Option<u32>, bool); 6] = [
        (SamplerConfig::greedy(), None, true),
        (SamplerConfig::greedy(), Some(5), true),
        (SamplerConfig { temperature: 0.1, top_k: 40, ..Default::default() }, None, true),
        (SamplerConfig { repeat_penalty: 1.2, ..SamplerConfig::greedy() }, None, false),
        (SamplerConfig { temperature: 0.1, top_k: 0, top_p: 1.0, min_p: 0.0, ..Default::default() }, None, false),
        (SamplerConfig { temperature: 0.1, top_k: 65, ..Default::default() }, None, false),
    ];
    let mut texts = Vec::new();
    for (sampler, logprobs, _) in &cases {
        let (sampler, logprobs) = (sampler.clone(), *logprobs);
        let mut rx = h.submit_with(Band::Interactive, prompt(10, 3), 6, move |r| {
            r.sampler = sampler;
            r.logprobs = logprobs;
        });
        texts.push(finished(&mut rx).0);
    }
    let kinds = h.kinds.lock().unwrap().clone();
    for (i, (_, _, summarised)) in cases.iter().enumerate() {
        let asked: Vec<LogitRows> = kinds.iter().filter(|k| k.0 == i as u64).map(|k| k.1).collect();
        let want = if *summarised { LogitRows::LastTop } else { LogitRows::Last };
        assert!(!asked.is_empty() && asked.iter().all(|&k| k == want), "request {i}: {asked:?}");
    }
    // The stand-in's logits have one maximum, 10 above the rest: at temperature 0.1 every
    // sampler picks it (the rest share e^-100 of the probability).
    assert!(texts.iter().all(|t| *t == texts[0] && !t.is_empty()), "{texts:?}");
}

/// Tokens that read as ordinary text.
fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 2000 + (i * 13 + salt) % 3000).collect()
}

/// A long prompt arriving beside a running stream, on a backend with these hints: the long
/// prompt's chunks (sequence 1) and every step's row order.
fn long_prompt_beside_a_stream(hints: SchedulingHints) -> (Vec<u32>, Vec<SeenStep>) {
    let mut h = Harness::new(hints);
    let mut stream = h.submit(prompt(20, 1), 120);
    // Let the stream's decode steps be measured before the long prompt comes.
    while h.steps().len() <= 8 {
        thread::sleep(Duration::from_millis(2));
    }
    let mut long = h.submit(prompt(900, 2), 1);
    done(&mut long);
    done(&mut stream);
    let steps = h.steps();
    let chunks = steps.iter().flatten().filter(|(s, _)| *s == 1).map(|&(_, n)| n).collect();
    (chunks, steps)
}

#[test]
fn a_time_allowance_never_cuts_a_chunk_below_the_backends_smallest() {
    for min in [16, 48] {
        let (chunks, _) = long_prompt_beside_a_stream(SchedulingHints { min_prefill_chunk: min, row_group: 1 });
        assert_eq!(chunks.iter().sum::<u32>(), 900, "{chunks:?}");
        let (last, rest) = chunks.split_last().unwrap();
        assert!(rest.iter().all(|&n| n >= min), "min {min}: {chunks:?}");
        // The allowance (about five tokens here) cut chunks to the floor; a slow machine's
        // longer steps may raise it a little.
        assert!(rest.iter().any(|&n| n < 2 * min), "min {min}: no chunk was cut near the floor: {chunks:?}");
        assert!(*last >= 1);
    }
}

#[test]
fn rows_are_grouped_longest_first_only_for_backends_that_group_them() {
    let longest_first = |s: &SeenStep| s.windows(2).all(|w| w[0].1 >= w[1].1);
    let (_, grouped) = long_prompt_beside_a_stream(SchedulingHints { min_prefill_chunk: 16, row_group: 16 });
    assert!(grouped.iter().all(longest_first), "{grouped:?}");
    let (_, plain) = long_prompt_beside_a_stream(SchedulingHints { min_prefill_chunk: 16, row_group: 1 });
    let mixed: Vec<&SeenStep> = plain.iter().filter(|s| s.len() > 1).collect();
    assert!(!mixed.is_empty());
    assert!(mixed.iter().any(|s| !longest_first(s)), "decodes go first in plan order: {mixed:?}");
}

#[test]
fn a_repeated_prompt_computes_only_what_the_prefix_cache_lacks() {
    let mut h = Harness::new(SchedulingHints::default());
    let p = prompt(40, 3);
    let first = done(&mut h.submit(p.clone(), 2));
    let second = done(&mut h.submit(p, 2));
    assert_eq!((first.cached_tokens, second.cached_tokens), (0, 32), "two full pages of 16 are cached");
    let rows_of = |seq: u64| h.steps().iter().flatten().filter(|(s, _)| *s == seq).map(|&(_, n)| n).sum::<u32>();
    // Prompt rows plus one decode row each (the second token).
    assert_eq!((rows_of(0), rows_of(1)), (41, 9));
}

#[test]
fn a_preempted_request_resumes_where_it_was_and_every_page_comes_back() {
    // Alone, the batch request's output: the stand-in picks tokens by position, so a resumed
    // request that lost or repeated a position would read differently.
    let alone = {
        let mut h = Harness::new(SchedulingHints::default());
        finished(&mut h.submit_in(Band::Batch, prompt(100, 5), 80)).0
    };
    for swap_bytes in [1 << 20, 0] {
        // Twelve pages: the batch request grows to all of them, so the interactive one can
        // only run by preempting it (swapped out, or dropped and recomputed).
        let mut h = Harness::with_pool(SchedulingHints::default(), 12, swap_bytes);
        let mut batch = h.submit_in(Band::Batch, prompt(100, 5), 80);
        while h.steps().len() < 40 {
            thread::sleep(Duration::from_millis(5));
        }
        let mut interactive = h.submit(prompt(60, 6), 10);
        let (_, finish, usage) = finished(&mut interactive);
        assert_eq!((finish, usage.completion_tokens), (Finish::Length, 10));
        let (text, finish, usage) = finished(&mut batch);
        assert_eq!((finish, usage.completion_tokens), (Finish::Length, 80), "swap {swap_bytes}");
        assert_eq!(text, alone, "swap {swap_bytes}: the resumed output differs");
        let resumed = h.steps().iter().flatten().filter(|(s, n)| *s == 0 && *n > 1).count();
        assert!(resumed > (swap_bytes == 0) as usize, "swap {swap_bytes}: no recompute seen");
        let stats = h.stats.lock().unwrap().clone();
        assert!(stats.preemptions >= 1, "swap {swap_bytes}: nothing was preempted");
        assert_eq!(stats.kv_pages_used, 0, "swap {swap_bytes}: pages still held after both ended");
    }
}

/// The stand-in backend's choice at position `p`.
fn predicted(p: usize) -> u32 {
    1000 + (p as u32 * 7) % 500
}

/// A request that scores its prompt is told every prompt token's log-probability from the
/// second on, once each and in order, each from the row before it, over several chunks; it
/// does not reuse the cached pages of an earlier identical prompt (their rows' logits were
/// never computed for it), and with `max_tokens` 0 it generates nothing. Generated tokens'
/// log-probabilities come one per token.
#[test]
fn scored_prompts_get_every_tokens_log_probability_from_the_row_before_it() {
    let mut h = Harness::new(SchedulingHints { min_prefill_chunk: 16, row_group: 16 });
    let p: Vec<u32> = (0..300).map(|j| if j % 3 == 0 && j > 0 { predicted(j - 1) } else { 2000 + j as u32 }).collect();
    done(&mut h.submit(p.clone(), 1));
    let mut rx = h.submit_with(Band::Interactive, p.clone(), 0, |r| r.prompt_logprobs = Some(2));
    let mut scored = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (finish, usage) = loop {
        match rx.try_recv() {
            Ok(Event::PromptLogprobs(v)) => scored.extend(v),
            Ok(Event::Done { finish, usage }) => break (finish, usage),
            Ok(other) => panic!("unexpected event {other:?}"),
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("no end within 60 s ({e})"),
        }
    };
    assert_eq!((finish, usage.completion_tokens, usage.cached_tokens), (Finish::Length, 0, 0));
    assert_eq!(scored.len(), p.len() - 1);
    let vocab = model().program.hparams.n_vocab as f64;
    let norm = (10f64.exp() + vocab - 1.0).ln();
    for (k, t) in scored.iter().enumerate() {
        let j = k + 1;
        assert_eq!(t.token, p[j], "entry {k} is prompt token {j}");
        let want = if j % 3 == 0 { 10.0 - norm } else { -norm };
        assert!((t.logprob as f64 - want).abs() < 1e-4, "token {j}: {} vs {want}", t.logprob);
        assert_eq!(t.top.len(), 2);
        assert_eq!(t.top[0].0, predicted(j - 1), "token {j}'s likeliest");
    }
    let mut rx = h.submit_with(Band::Interactive, prompt(20, 3), 5, |r| r.logprobs = Some(0));
    let mut generated = Vec::new();
    while let Some(ev) = rx.blocking_recv() {
        match ev {
            Event::Logprobs(v) => generated.extend(v),
            Event::Done { .. } => break,
            _ => {}
        }
    }
    assert_eq!(generated.iter().map(|t| t.token).collect::<Vec<_>>(), (19..24).map(predicted).collect::<Vec<_>>());
    assert!(generated.iter().all(|t| (t.logprob as f64 - (10.0 - norm)).abs() < 1e-4 && t.top.is_empty()));
}

/// Finishes `n` requests of different prompt lengths, 24 tokens each, on harness `h`; returns
/// each one's text and token count, or the error it ended with.
fn four_requests(h: &mut Harness) -> Vec<Result<(String, u32), String>> {
    let mut rxs: Vec<_> =
        [40, 70, 20, 100].iter().enumerate().map(|(k, &n)| h.submit(prompt(n, k as u32), 24)).collect();
    rxs.iter_mut().map(outcome).collect()
}

/// Waits for a request's end: its text and token count, or the error it ended with.
fn outcome(rx: &mut UnboundedReceiver<Event>) -> Result<(String, u32), String> {
    use tokio::sync::mpsc::error::TryRecvError;
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match rx.try_recv() {
            Ok(Event::Done { usage, .. }) => return Ok((text, usage.completion_tokens)),
            Ok(Event::Error(e)) => return Err(e),
            Ok(Event::Text(t)) => text.push_str(&t),
            Ok(_) => {}
            Err(TryRecvError::Empty) if Instant::now() < deadline => thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("the request did not end within 60 s ({e})"),
        }
    }
}

#[test]
fn a_backend_that_fails_mid_serving_hands_its_requests_to_the_next_and_none_is_lost() {
    let expected = four_requests(&mut Harness::new(SchedulingHints::default()));
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen_after = Arc::new(Mutex::new(Vec::new()));
    let (asked2, seen2) = (asked.clone(), seen_after.clone());
    let open: FailoverOpen = Box::new(move |failed: &[String]| {
        asked2.lock().unwrap().push(failed.to_vec());
        let n_vocab = model().program.hparams.n_vocab as usize;
        let backend = GuardedBackend::boxed(StandIn::new(SchedulingHints::default(), n_vocab, seen2.clone()));
        Ok(Replacement { backend, name: "second".into(), device: "spare".into(), n_pages: 256, window_pages: 0 })
    });
    // The first backend fails from its sixth step: prompts done, streams mid-way.
    let mut h = Harness::failing(6, Some(open));
    let got = four_requests(&mut h);
    assert_eq!(got, expected, "every request ends as it would have without the failure");
    assert!(got.iter().all(|r| r.as_ref().is_ok_and(|(_, n)| *n == 24)));
    assert_eq!(*asked.lock().unwrap(), vec![vec!["first".to_string()]]);
    // The second backend recomputed every request's tokens so far: its first steps are
    // prompt chunks longer than one row.
    let after = seen_after.lock().unwrap().clone();
    assert!(after.first().is_some_and(|s| s.iter().any(|&(_, rows)| rows > 1)), "{after:?}");
    assert_eq!(h.steps().len(), 5, "the first backend ran five steps");
    let s = h.stats.lock().unwrap().clone();
    assert_eq!(
        (s.failovers, s.backend_name.as_str(), s.device_name.as_str(), s.kv_pages_total),
        (1, "second", "spare", 256)
    );
}

#[test]
fn without_a_next_backend_the_requests_fail_with_the_error_instead_of_hanging() {
    let refuse: FailoverOpen = Box::new(|_: &[String]| anyhow::bail!("nothing else opens"));
    // A step the backend calls inconsistent is no device failure: no failover is tried.
    let unused: FailoverOpen = Box::new(|_: &[String]| panic!("failover tried for an inconsistent step"));
    let harnesses = [
        Harness::failing(3, None),
        Harness::failing(3, Some(refuse)),
        Harness::build(SchedulingHints::default(), 512, 0, Some((3, Failure::Invalid)), Some(unused)),
    ];
    for mut h in harnesses {
        for r in four_requests(&mut h) {
            let e = r.expect_err("the request fails");
            assert!(e.contains("device lost"), "{e}");
        }
        assert_eq!(h.stats.lock().unwrap().failovers, 0);
    }
}

/// A plugin whose output lacks what the step asked for (here the summaries' normalisers) is a
/// failed device: the requests end with an error naming the fault, the engine does not read
/// past the output.
#[test]
fn a_backend_output_without_what_the_step_asked_for_fails_the_requests_instead_of_the_engine() {
    let mut h = Harness::build(SchedulingHints::default(), 512, 0, Some((3, Failure::Malformed)), None);
    for r in four_requests(&mut h) {
        let e = r.expect_err("the request fails");
        assert!(e.contains("summaries") && e.contains("0 normalisers"), "{e}");
    }
}

#[test]
fn a_request_that_cannot_fit_the_pool_fails_instead_of_waiting_forever() {
    // At submission: 124 tokens need 8 pages of 16; the pool has 4.
    let mut h = Harness::with_pool(SchedulingHints::default(), 4, 0);
    let e = outcome(&mut h.submit(prompt(100, 0), 24)).expect_err("the request fails, naming the pool");
    assert!(e.contains("needs 8 KV pages") && e.contains("pool holds 4"), "{e}");
    // After a failover to a pool of 6 pages, the request of 8 fails; the others (4, 6 and 3
    // pages) end as they would have without the failure.
    let expected = four_requests(&mut Harness::new(SchedulingHints::default()));
    let open: FailoverOpen = Box::new(move |_: &[String]| {
        let n_vocab = model().program.hparams.n_vocab as usize;
        let backend = GuardedBackend::boxed(StandIn::new(SchedulingHints::default(), n_vocab, Default::default()));
        Ok(Replacement { backend, name: "second".into(), device: "small".into(), n_pages: 6, window_pages: 0 })
    });
    let got = four_requests(&mut Harness::failing(6, Some(open)));
    assert_eq!(got[..3], expected[..3]);
    assert!(got[3].as_ref().is_err_and(|e| e.contains("pool holds 6")), "{:?}", got[3]);
}
