//! `zinc synth`: write a synthetic model of a chosen shape and type.

use crate::model::{loaded::resolve_model, quant_mix::QuantMix, synth};
use anyhow::Result;
use std::{io::Write, path::PathBuf};

/// Options of `zinc synth`.
#[derive(Debug, clap::Args)]
pub struct SynthArgs {
    /// Shape preset: real models' dimensions (llama-7b, qwen2-7b, gemma2-9b, gemma3-4b,
    /// phi3-mini, qwen3-30b-a3b, smollm2) or small test models (tiny-*; tiny-mixtral is a llama file with
    /// experts).
    #[arg(long, default_value = "tiny-llama", value_parser = clap::builder::PossibleValuesParser::new(synth::PRESETS))]
    pub preset: String,
    /// Tensor type of every matrix (f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, q3_k, q4_k, q5_k, iq4_nl,
    /// iq4_xs), or one
    /// of llama.cpp's K-quant presets with its per-tensor choices (q2_k, q3_k_m, q4_k_m, q5_k_m, q6_k).
    #[arg(long = "type")]
    pub dtype: Option<String>,
    /// Override the number of layers.
    #[arg(long)]
    pub layers: Option<u32>,
    /// Seed of the weights.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// GGUF file to copy the tokenizer from (default: the default model).
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Output file.
    #[arg(short = 'o', long)]
    pub output: PathBuf,
    /// Write only the tokenizer (a small file for `--tokenizer` elsewhere), no model.
    #[arg(long)]
    pub tokenizer_only: bool,
}

/// Runs `zinc synth`.
pub fn run(args: SynthArgs) -> Result<i32> {
    if args.tokenizer_only {
        let donor = resolve_model(args.tokenizer.as_deref())?;
        synth::write_tokenizer_only(&donor, &args.output)?;
        println!("{}", args.output.display());
        return Ok(0);
    }
    let mut spec = synth::preset(&args.preset)?;
    if let Some(t) = &args.dtype {
        spec.types = QuantMix::parse(t)?;
    }
    if let Some(l) = args.layers {
        spec.n_layer = l.max(1);
    }
    spec.seed = args.seed;
    let donor = resolve_model(args.tokenizer.as_deref())?;
    let mut last = 0;
    synth::write_synthetic(&spec, &donor, &args.output, |done, total| {
        let pct = done * 100 / total.max(1);
        if pct >= last + 5 || done == total {
            last = pct;
            eprint!("\rzinc synth: {pct:3}% of {:.2} GiB", total as f64 / (1u64 << 30) as f64);
            let _ = std::io::stderr().flush();
        }
    })?;
    eprintln!();
    println!("{}", args.output.display());
    Ok(0)
}
