//! `zinc bench`: llama-bench's shapes (pp512, tg128; mean ± sd over repetitions) and a
//! batched grid like llama-batched-bench, with the backend, the device that executed and the
//! backend's own counters.

mod cpu_check;

use crate::{
    engine::{
        open::{open_for_model, prepare_steps},
        sequence::{step_many, Sequence},
    },
    model::loaded::{resolve_model, Model},
};
use anyhow::Result;
use serde_json::json;
use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};
use zinc_formats::random::Rng;
use zinc_plugin_api::{BackendBox, LogitRows};

/// Least time each test's warm-up runs after its first run. A GPU left idle while the weights
/// upload sits at its lowest clock and needs a few hundred milliseconds of work to leave it
/// (seen on the H200: `docs/measurements/vulkan-h200-session16-2026-12-04/q7/`), which made the
/// first repetitions of a large file in a fresh process slow when one run was the whole
/// warm-up. The first run does not count: it also records the test's step shapes and creates
/// the pipelines they use, host work during which the device stays idle.
const WARM_UP: Duration = Duration::from_secs(1);

/// Runs `test` (given its repetition: 0 for the warm-up) once, then again until WARM_UP has
/// passed (at least once more), then `reps` measured times, returning what each measured run
/// returned.
/// `reps` = 0 runs nothing.
fn warmed_up<T>(reps: u32, mut test: impl FnMut(u32) -> Result<T>) -> Result<Vec<T>> {
    if reps == 0 {
        return Ok(Vec::new());
    }
    test(0)?;
    let started = Instant::now();
    test(0)?;
    while started.elapsed() < WARM_UP {
        test(0)?;
    }
    (1..=reps).map(test).collect()
}

/// Most rows of a prompt step: the pp test's chunk, and the grid's prefill steps.
const PROMPT_STEP: u32 = 512;

/// Options of `zinc bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Model file (default: the default model).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Prompt-processing length.
    #[arg(short = 'p', long, default_value_t = 512)]
    pub n_prompt: u32,
    /// Generation length.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub n_gen: u32,
    /// Repetitions of each test (after its warm-up: one run, then more for at least a second).
    #[arg(short = 'r', long, default_value_t = 3)]
    pub reps: u32,
    /// Parallel sequence counts for the batched grid (`0` skips it).
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,16")]
    pub batch: Vec<u32>,
    /// Prompt tokens per sequence in the batched grid.
    #[arg(long, default_value_t = 128)]
    pub batch_prompt: u32,
    /// Generated tokens per sequence in the batched grid.
    #[arg(long, default_value_t = 128)]
    pub batch_gen: u32,
    /// What the batched grid's steps return for each sequence: `summary`, its likeliest tokens
    /// (what a server returns for greedy and top-k streams), or `whole`, every logit.
    #[arg(long, value_enum, default_value_t = BatchLogits::Summary)]
    pub batch_logits: BatchLogits,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Skip the check of this backend's logits against the CPU tier's (the run is then
    /// reported as not checked).
    #[arg(long)]
    pub no_cpu_check: bool,
}

/// What the batched grid's steps return per sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BatchLogits {
    /// The row's likeliest tokens and its log-normaliser (`LogitRows::LastTop`).
    Summary,
    /// The whole row (`LogitRows::Last`).
    Whole,
}

impl BatchLogits {
    fn rows(self) -> LogitRows {
        match self {
            BatchLogits::Summary => LogitRows::LastTop,
            BatchLogits::Whole => LogitRows::Last,
        }
    }

    fn name(self) -> &'static str {
        match self {
            BatchLogits::Summary => "summary",
            BatchLogits::Whole => "whole",
        }
    }
}

fn mean_sd(v: &[f64]) -> (f64, f64) {
    let m = v.iter().sum::<f64>() / v.len() as f64;
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (v.len().max(2) - 1) as f64;
    (m, var.sqrt())
}

fn random_tokens(n: u32, vocab: u32, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    // Skip the first 256 ids, where control tokens usually live.
    (0..n).map(|_| 256 + (rng.next_u64() % (vocab as u64 - 256)) as u32).collect()
}

/// One measured repetition: its wall time and the device time the backend counted in it.
struct RepTimes {
    wall: f64,
    device: f64,
}

impl RepTimes {
    /// Tokens per second of each repetition of `n` tokens.
    fn rates(times: &[RepTimes], n: u32) -> Vec<f64> {
        times.iter().map(|t| n as f64 / t.wall).collect()
    }

    /// Mean wall and device seconds per token over the repetitions of `n` tokens each.
    fn per_token(times: &[RepTimes], n: u32) -> (f64, f64) {
        let tokens = (times.len() as f64) * n.max(1) as f64;
        (times.iter().map(|t| t.wall).sum::<f64>() / tokens, times.iter().map(|t| t.device).sum::<f64>() / tokens)
    }
}

/// The batched grid: for each count of sequences, their prompts prefilled together (whole
/// prompts per step while they fit in PROMPT_STEP rows), then every sequence decoding one
/// token per step; one JSON row each.
fn batched_grid(b: &mut BackendBox, args: &BenchArgs, ctx: u32, vocab: u32) -> Result<Vec<serde_json::Value>> {
    let pages_per_seq = ctx.div_ceil(crate::engine::sequence::PAGE_SIZE);
    let mut grid = Vec::new();
    for &nb in args.batch.iter().filter(|&&n| n > 0) {
        let mut seqs: Vec<Sequence> = (0..nb).map(|i| Sequence::new(i as u64, ctx, i * pages_per_seq)).collect();
        let prompts: Vec<Vec<u32>> =
            (0..nb).map(|i| random_tokens(args.batch_prompt, vocab, 1000 + i as u64)).collect();
        let t0 = Instant::now();
        let compiled_before = b.counters().kernels_compiled;
        // Prefill in steps of at most PROMPT_STEP tokens: whole prompts while they fit.
        let per_step = (PROMPT_STEP / args.batch_prompt.max(1)).max(1) as usize;
        for group in seqs.chunks_mut(per_step).zip(prompts.chunks(per_step)) {
            let mut work: Vec<_> =
                group.0.iter_mut().zip(group.1).map(|(s, p)| (s, &p[..], args.batch_logits.rows())).collect();
            step_many(b, &mut work)?;
        }
        let t_pp = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        for g in 0..args.batch_gen {
            let toks: Vec<[u32; 1]> = (0..nb).map(|i| [256 + (g * 31 + i * 7) % (vocab - 256)]).collect();
            let mut work: Vec<_> =
                seqs.iter_mut().zip(&toks).map(|(s, t)| (s, &t[..], args.batch_logits.rows())).collect();
            step_many(b, &mut work)?;
        }
        let t_tg = t1.elapsed().as_secs_f64();
        grid.push(json!({
            "sequences": nb, "prompt": args.batch_prompt, "gen": args.batch_gen,
            "logits": args.batch_logits.name(),
            "pp_tok_s": (nb * args.batch_prompt) as f64 / t_pp,
            "tg_tok_s": (nb * args.batch_gen) as f64 / t_tg,
            "prefill_s": t_pp,
            "kernels_compiled": b.counters().kernels_compiled - compiled_before,
        }));
    }
    Ok(grid)
}

/// The text report's tables: the two tests, time per token, the batched grid, the counters,
/// the load and the per-step figures, from `report` (the JSON report) and the repetitions' times.
fn print_tables(report: &serde_json::Value, (pp_times, tg_times): (&[RepTimes], &[RepTimes]), args: &BenchArgs) {
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(0.0);
    let u = |v: &serde_json::Value| v.as_u64().unwrap_or(0);
    let tests = &report["tests"];
    println!("| test | t/s |\n|---|---|");
    for t in tests.as_array().into_iter().flatten() {
        println!("| {} | {:.1} ± {:.1} |", t["test"].as_str().unwrap_or(""), f(&t["tok_s"]), f(&t["sd"]));
    }
    println!();
    for (name, n, times) in [("pp", args.n_prompt, pp_times), ("tg", args.n_gen, tg_times)] {
        if n == 0 {
            continue;
        }
        let (wall, device) = RepTimes::per_token(times, n);
        println!(
            "{name}{n} per token: wall {:.3} ms, on the device {:.3} ms, between steps and on the host {:.3} ms",
            wall * 1e3,
            device * 1e3,
            (wall - device) * 1e3
        );
    }
    let grid = report["batched"].as_array().cloned().unwrap_or_default();
    if !grid.is_empty() {
        println!(
            "\n| sequences | prompt | gen | S_PP t/s | S_TG t/s | prefill s | kernels compiled |\n|---|---|---|---|---|---|---|"
        );
        for g in &grid {
            println!(
                "| {} | {} | {} | {:.1} | {:.1} | {:.2} | {} |",
                g["sequences"],
                g["prompt"],
                g["gen"],
                f(&g["pp_tok_s"]),
                f(&g["tg_tok_s"]),
                f(&g["prefill_s"]),
                g["kernels_compiled"]
            );
        }
        println!("(each step returned, per sequence: {})", grid[0]["logits"].as_str().unwrap_or("?"));
    }
    let (c, prepare, load) = (&report["counters"], &report["prepare"], &report["load"]);
    println!(
        "\ncounters: steps {} submits {} dispatches {} bytes up {} down {} device time {:.2} s; kernels compiled {} \
         ({} of them before the tests, for steps of up to {} rows, in {:.2} s)",
        u(&c["steps"]),
        u(&c["submits"]),
        u(&c["dispatches"]),
        u(&c["bytes_uploaded"]),
        u(&c["bytes_downloaded"]),
        u(&c["device_time_ns"]) as f64 / 1e9,
        u(&c["kernels_compiled"]),
        u(&prepare["kernels_compiled"]),
        u(&prepare["rows"]),
        f(&prepare["s"])
    );
    println!(
        "load: file read in {:.2} s, backend opened (weights placed) in {:.2} s",
        f(&load["read_s"]),
        f(&load["open_s"])
    );
    let per = |x: u64| x as f64 / u(&c["steps"]).max(1) as f64;
    println!(
        "per step: {:.2} submits, {:.1} dispatches, {:.0} bytes read back",
        per(u(&c["submits"])),
        per(u(&c["dispatches"])),
        per(u(&c["bytes_downloaded"]))
    );
}

/// Runs `zinc bench`.
pub fn run(config: Option<&Path>, backend: Option<&str>, args: BenchArgs) -> Result<i32> {
    let path = resolve_model(args.model.as_deref())?;
    let started = Instant::now();
    let model = Model::load(&path)?;
    let read_s = started.elapsed().as_secs_f64();
    let vocab = model.program.hparams.n_vocab;
    let max_batch = args.batch.iter().copied().max().unwrap_or(1).max(1);
    let ctx = (args.n_prompt.max(args.n_gen)).max(args.batch_prompt + args.batch_gen) + 16;
    let started = Instant::now();
    let (mut opened, _) = open_for_model(config, backend, &model, ctx, max_batch)?;
    // Opening the backend includes putting the weights where it reads them (the upload to a
    // GPU): what a user waits for before the first request, beside the file's reading.
    let open_s = started.elapsed().as_secs_f64();
    // Prompts go in chunks of up to 512 rows (`feed`, and the grid's prefill steps); decodes of
    // the grid take one row per sequence.
    let prepared = prepare_steps(&mut opened.backend, PROMPT_STEP.max(max_batch))?;
    let b = &mut opened.backend;
    let reps = args.reps.max(1);

    // Each measured repetition's wall time and the time the backend counted on its device in
    // it: their difference is what the host and the device's idle time between steps cost.
    let device_s = |b: &BackendBox| b.counters().device_time_ns as f64 / 1e9;
    // A test of no tokens (`-p 0` or `-n 0`) is skipped: it is neither run nor reported.
    let pp_times = warmed_up(if args.n_prompt > 0 { reps } else { 0 }, |r| {
        let toks = random_tokens(args.n_prompt, vocab, r as u64);
        let mut seq = Sequence::new(0, ctx, 0);
        let (t, d0) = (Instant::now(), device_s(b));
        seq.feed(b, &toks, PROMPT_STEP as usize, false)?;
        Ok(RepTimes { wall: t.elapsed().as_secs_f64(), device: device_s(b) - d0 })
    })?;
    let tg_times = warmed_up(if args.n_gen > 0 { reps } else { 0 }, |r| {
        let toks = random_tokens(args.n_gen, vocab, 100 + r as u64);
        let mut seq = Sequence::new(0, ctx, 0);
        let (t, d0) = (Instant::now(), device_s(b));
        for tok in &toks {
            seq.feed(b, &[*tok], 1, false)?;
        }
        Ok(RepTimes { wall: t.elapsed().as_secs_f64(), device: device_s(b) - d0 })
    })?;
    let grid = batched_grid(b, &args, ctx, vocab)?;
    let c = opened.backend.counters();
    // After the measurements, so that the CPU tier's work does not disturb them.
    let check = if opened.name == "cpu" || args.no_cpu_check {
        None
    } else {
        Some(cpu_check::run(config, &model, &mut opened.backend, vocab)?)
    };
    let comparable = check.as_ref().is_none_or(|c| c.passed());
    let tests: Vec<serde_json::Value> = [("pp", args.n_prompt, &pp_times), ("tg", args.n_gen, &tg_times)]
        .into_iter()
        .filter(|(_, n, _)| *n > 0)
        .map(|(name, n, times)| {
            let rates = RepTimes::rates(times, n);
            let (mean, sd) = mean_sd(&rates);
            json!({"test": format!("{name}{n}"), "tok_s": mean, "sd": sd, "runs": rates,
                   "wall_s": times.iter().map(|t| t.wall).collect::<Vec<_>>(),
                   "device_s": times.iter().map(|t| t.device).collect::<Vec<_>>()})
        })
        .collect();
    let dev = &opened.device;
    let report = json!({
        "model": model.name,
        "backend": opened.name,
        "device": {"name": dev.name.as_str(), "kind": dev.kind.label(), "driver": dev.driver.as_str(),
                   "features": dev.features.iter().map(|f| f.as_str()).collect::<Vec<_>>()},
        "software_device": matches!(dev.kind, zinc_plugin_api::DeviceKind::SoftwareGpu),
        "comparable": comparable,
        "cpu_check": check.as_ref().map(|c| c.to_json()),
        "tests": tests,
        "batched": grid,
        "counters": {"steps": c.steps, "submits": c.submits, "dispatches": c.dispatches,
                     "bytes_uploaded": c.bytes_uploaded, "bytes_downloaded": c.bytes_downloaded,
                     "device_time_ns": c.device_time_ns, "kernels_compiled": c.kernels_compiled},
        "prepare": {"s": prepared.took.as_secs_f64(), "kernels_compiled": prepared.kernels, "rows": PROMPT_STEP.max(max_batch)},
        "load": {"read_s": read_s, "open_s": open_s},
    });
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(0);
    }
    println!(
        "model {} | backend {} | device {} ({}, {})",
        model.name,
        opened.name,
        dev.name,
        dev.kind.label(),
        dev.driver
    );
    if matches!(dev.kind, zinc_plugin_api::DeviceKind::SoftwareGpu) {
        println!("note: a software implementation ran this; these are CPU numbers, not GPU numbers");
    }
    match &check {
        Some(c) => println!("{}", c.summary()),
        None if opened.name == "cpu" => {}
        None => println!("note: not checked against the CPU tier (--no-cpu-check)"),
    }
    print_tables(&report, (&pp_times, &tg_times), &args);
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::{warmed_up, WARM_UP};
    use std::time::Instant;

    #[test]
    fn the_warm_up_runs_for_its_least_time_and_only_the_later_runs_are_measured() {
        let started = Instant::now();
        let mut warm_runs = 0;
        let measured = warmed_up(3, |r| {
            if r == 0 {
                warm_runs += 1;
            }
            Ok(r)
        })
        .unwrap();
        assert!(started.elapsed() >= WARM_UP);
        assert!(warm_runs > 2, "a run far shorter than the warm-up is repeated");
        assert_eq!(measured, vec![1, 2, 3]);
        // Runs longer than the warm-up: the first and one more.
        let mut slow_warm_runs = 0;
        let one = warmed_up(1, |r| {
            if r == 0 {
                slow_warm_runs += 1;
                std::thread::sleep(WARM_UP);
            }
            Ok(r)
        })
        .unwrap();
        assert_eq!((slow_warm_runs, one), (2, vec![1]));
        // No repetitions asked for (a test of no tokens): nothing runs, not even the warm-up.
        let mut runs = 0;
        assert!(warmed_up(0, |_| {
            runs += 1;
            Ok(())
        })
        .unwrap()
        .is_empty());
        assert_eq!(runs, 0);
    }
}
