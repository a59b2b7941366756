//! `zinc run`: one prompt, tokens streamed to stdout as they are produced.

use crate::{
    engine::{
        open::open_for_model,
        output::{OutputLimits, OutputStage, RowLogits},
        sampler::SamplerConfig,
        sequence::Sequence,
    },
    model::{
        chat::render_chat,
        loaded::{resolve_model, Model},
    },
};
use anyhow::{bail, Result};
use std::{
    io::Write,
    path::{Path, PathBuf},
    time::Instant,
};

/// Options of `zinc run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The prompt.
    pub prompt: String,
    /// Model file (default: SmolLM2-135M-Instruct Q4_1 from the model directory).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Tokens to generate at most.
    #[arg(short = 'n', long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_tokens: u32,
    /// Temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Top-k (0: off).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    /// Top-p (1: off).
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Min-p (0: off).
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Repetition penalty (1: off).
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Stop string: the output ends before it (repeatable; as the API's `stop`).
    #[arg(long)]
    pub stop: Vec<String>,
    /// Apply the model's chat template to the prompt (as one user message).
    #[arg(long)]
    pub chat: bool,
    /// Context length (default: the model's, at most 4096).
    #[arg(long)]
    pub ctx: Option<u32>,
}

/// Runs `zinc run`.
pub fn run(config: Option<&Path>, backend: Option<&str>, args: RunArgs) -> Result<i32> {
    let path = resolve_model(args.model.as_deref())?;
    let model = Model::load_with_progress(&path, std::io::IsTerminal::is_terminal(&std::io::stderr()))?;
    let ctx = model.context_length(Some(args.ctx.unwrap_or(4096)));
    let prompt = if args.chat {
        let tpl = model
            .chat_template
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("{} has no chat template; drop --chat", model.name))?;
        let msgs = [("user".to_string(), args.prompt.clone())];
        render_chat(tpl, &msgs, true, &model.tokenizer)?.tokens(&msgs, &model.tokenizer)?
    } else {
        model.tokenizer.encode(&args.prompt, true, false)
    };
    if prompt.is_empty() {
        bail!("the prompt is empty");
    }
    if prompt.len() as u32 >= ctx {
        bail!("the prompt is {} tokens, longer than the context of {ctx} tokens", prompt.len());
    }
    let (mut opened, _) = open_for_model(config, backend, &model, ctx, 1)?;
    let mut seq = Sequence::new(0, ctx, 0);
    let sampler = SamplerConfig {
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        min_p: args.min_p,
        repeat_penalty: args.repeat_penalty,
        seed: args.seed,
        ..Default::default()
    };
    let limits = OutputLimits { stop: args.stop, max_tokens: args.max_tokens, max_context: ctx, ..Default::default() };
    let mut stage = OutputStage::new(sampler, limits);
    let t0 = Instant::now();
    let mut logits = seq.feed(&mut opened.backend, &prompt, 512, false)?;
    let prefill = t0.elapsed();
    let mut history = prompt.clone();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let t1 = Instant::now();
    let finish = loop {
        let e = stage.step(&model.tokenizer, RowLogits::Whole(&logits), &mut history);
        if let Some(text) = e.text {
            write!(out, "{text}")?;
            out.flush()?;
        }
        match (e.finish, e.token) {
            (Some(f), _) => break f,
            (None, Some(tok)) => logits = seq.feed(&mut opened.backend, &[tok], 1, false)?,
            (None, None) => unreachable!("a token that does not join the text ends the generation"),
        }
    };
    writeln!(out)?;
    let decode = t1.elapsed();
    let c = opened.backend.counters();
    eprintln!(
        "zinc: {} on {} ({}) | prompt {} tokens in {:.2} s ({:.1} tok/s) | generated {} tokens in {:.2} s ({:.1} tok/s), finish {} | steps {} dispatches {}",
        opened.name,
        opened.device.name,
        opened.device.kind.label(),
        prompt.len(),
        prefill.as_secs_f64(),
        prompt.len() as f64 / prefill.as_secs_f64(),
        stage.generated(),
        decode.as_secs_f64(),
        stage.generated() as f64 / decode.as_secs_f64().max(1e-9),
        finish.label(),
        c.steps,
        c.dispatches,
    );
    Ok(0)
}
