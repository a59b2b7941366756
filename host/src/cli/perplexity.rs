//! `zinc perplexity`: how well a model predicts a text, by llama.cpp's method, so that the
//! figure compares directly with `llama-perplexity` on the same file and text.
//!
//! The text is tokenized whole (with BOS where the model wants one, control tokens as plain
//! text), cut into non-overlapping chunks of `ctx` tokens, and each chunk is run from an empty
//! context with its first token replaced by BOS (where the model has one and adds it); the
//! tokens of each chunk's second half are scored, each by the log-probability the model gave
//! it after the tokens before it. Perplexity is `exp` of the mean negative log-probability;
//! its standard error is that of the mean, carried through `exp`.

use crate::{
    engine::{logprobs::log_normaliser, open::open_for_model, sequence::Sequence},
    model::loaded::{resolve_model, Model},
};
use anyhow::{bail, Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

/// Options of `zinc perplexity`.
#[derive(Debug, clap::Args)]
pub struct PerplexityArgs {
    /// Model file (default: the default model).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// The text to score (UTF-8).
    #[arg(short = 'f', long = "file", value_name = "TEXT")]
    pub file: PathBuf,
    /// Tokens per chunk; each chunk's second half is scored.
    #[arg(long, default_value_t = 512)]
    pub ctx: u32,
    /// Score at most this many chunks (default: every whole chunk of the text).
    #[arg(long)]
    pub chunks: Option<usize>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Rows per step while scoring: each step's logits (rows × vocabulary) are scored and dropped,
/// so a 262,144-token vocabulary does not hold a whole chunk's logits at once.
const SCORE_ROWS: usize = 64;

/// Negative log-probabilities summed over scored tokens.
#[derive(Default, Debug, Clone, Copy)]
pub struct Nll {
    /// Tokens scored.
    pub count: u64,
    sum: f64,
    sum_sq: f64,
}

impl Nll {
    /// Adds the negative log-probability of `token` under `logits`.
    pub fn add(&mut self, logits: &[f32], token: u32) {
        let nll = log_normaliser(logits) - logits[token as usize] as f64;
        self.count += 1;
        self.sum += nll;
        self.sum_sq += nll * nll;
    }

    /// Perplexity so far.
    pub fn ppl(&self) -> f64 {
        (self.sum / self.count.max(1) as f64).exp()
    }

    /// Standard error of the perplexity (llama.cpp's: the mean's, times the perplexity).
    pub fn ppl_error(&self) -> f64 {
        let n = self.count as f64;
        if self.count < 2 {
            return f64::NAN;
        }
        let mean = self.sum / n;
        let var = (self.sum_sq / n - mean * mean).max(0.0);
        (var / (n - 1.0)).sqrt() * self.ppl()
    }
}

/// Runs `zinc perplexity`.
pub fn run(config: Option<&Path>, backend: Option<&str>, args: PerplexityArgs) -> Result<i32> {
    let path = resolve_model(args.model.as_deref())?;
    let model = Model::load(&path)?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("cannot read {} as UTF-8 text", args.file.display()))?;
    let ctx = args.ctx;
    if ctx < 4 {
        bail!("--ctx {ctx} is too short: each chunk's second half is scored; use 512 as llama-perplexity does");
    }
    let tokens = model.tokenizer.encode(&text, true, false);
    let whole = tokens.len() / ctx as usize;
    if whole < 1 {
        bail!(
            "{} holds {} tokens, fewer than one chunk of {ctx}: give a longer text or a smaller --ctx",
            args.file.display(),
            tokens.len()
        );
    }
    let n_chunks = args.chunks.map_or(whole, |c| c.clamp(1, whole));
    let (mut opened, _) = open_for_model(config, backend, &model, ctx, 1)?;
    let bos = model.tokenizer.bos.filter(|_| model.tokenizer.add_bos);
    let mut nll = Nll::default();
    let mut running = Vec::new();
    for c in 0..n_chunks {
        let mut chunk = tokens[c * ctx as usize..(c + 1) * ctx as usize].to_vec();
        if let Some(b) = bos {
            chunk[0] = b;
        }
        score_chunk(&mut opened.backend, &chunk, &mut nll)?;
        running.push(nll.ppl());
        if !args.json {
            eprint!("[{}]{:.4},", c + 1, nll.ppl());
        }
    }
    let dev = &opened.device;
    if args.json {
        let report = json!({
            "model": model.name, "backend": opened.name,
            "device": {"name": dev.name.as_str(), "kind": dev.kind.label()},
            "ctx": ctx, "chunks": n_chunks, "tokens_scored": nll.count,
            "ppl": nll.ppl(), "ppl_error": nll.ppl_error(), "running_ppl": running,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        eprintln!();
        println!(
            "perplexity {:.4} ± {:.4} over {} tokens ({n_chunks} chunks of {ctx}, second halves scored) | model {} | \
             backend {} | device {} ({})",
            nll.ppl(),
            nll.ppl_error(),
            nll.count,
            model.name,
            opened.name,
            dev.name,
            dev.kind.label()
        );
    }
    Ok(0)
}

/// Runs one chunk from an empty context and scores its second half: the logits at row `j`
/// score token `j + 1`, for `j` from `ctx / 2` to `ctx - 2`.
fn score_chunk(backend: &mut zinc_plugin_api::BackendBox, chunk: &[u32], nll: &mut Nll) -> Result<()> {
    let n = chunk.len();
    let first = n / 2;
    let mut seq = Sequence::new(0, n as u32, 0);
    seq.feed(backend, &chunk[..first], SCORE_ROWS * 4, false)?;
    // The last token is only ever a target: nothing reads its logits or its keys.
    for start in (first..n - 1).step_by(SCORE_ROWS) {
        let end = (start + SCORE_ROWS).min(n - 1);
        let logits = seq.feed(backend, &chunk[start..end], SCORE_ROWS, true)?;
        let vocab = logits.len() / (end - start);
        for (row, j) in (start..end).enumerate() {
            nll.add(&logits[row * vocab..(row + 1) * vocab], chunk[j + 1]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Nll;

    #[test]
    fn perplexity_of_a_uniform_guess_is_the_vocabulary_size() {
        let mut nll = Nll::default();
        for t in 0..10 {
            nll.add(&[0.5; 50], t);
        }
        assert!((nll.ppl() - 50.0).abs() < 1e-9, "{}", nll.ppl());
        assert!(nll.ppl_error().abs() < 1e-5, "{}", nll.ppl_error());
    }

    #[test]
    fn a_confident_right_guess_scores_near_one_and_errors_spread() {
        let mut nll = Nll::default();
        let mut logits = vec![0.0f32; 8];
        logits[3] = 20.0;
        nll.add(&logits, 3);
        assert!(nll.ppl() < 1.0001);
        nll.add(&logits, 4);
        // ln(e^20 + 7) - 0 ≈ 20 for the wrong token: mean ≈ 10.
        assert!((nll.ppl().ln() - 10.0).abs() < 1e-3, "{}", nll.ppl().ln());
        assert!(nll.ppl_error() > 0.0);
    }
}
