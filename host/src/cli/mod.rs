//! The `zinc` command line: one module per subcommand.

pub mod bench;
pub mod perplexity;
pub mod probe;
pub mod pull;
pub mod run;
pub mod serve;
pub mod smoke;
pub mod synth;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// zinc: a local LLM serving runtime with plugin drivers.
#[derive(Debug, Parser)]
#[command(name = "zinc", version, about)]
pub struct Cli {
    /// Plugin configuration file (default: $ZINC_CONFIG, else the plugins.toml next to zinc;
    /// one in the working directory is read only when named here).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Force one backend (also $ZINC_BACKEND); zinc exits rather than fall back from it.
    #[arg(long, global = true, value_name = "NAME")]
    pub backend: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show every backend plugin, what it found, and which one zinc would use.
    Probe(probe::ProbeArgs),
    /// Generate text from one prompt, streaming tokens as they are produced.
    Run(run::RunArgs),
    /// Write a synthetic GGUF model (seeded random weights, a real tokenizer).
    Synth(synth::SynthArgs),
    /// Measure prompt processing and generation speed (llama-bench shapes, batched grid).
    Bench(bench::BenchArgs),
    /// Serve the OpenAI-compatible HTTP API.
    Serve(serve::ServeArgs),
    /// Score a text's perplexity by llama.cpp's method (comparable with llama-perplexity).
    Perplexity(perplexity::PerplexityArgs),
    /// Run a driver's self-test on this node (kfd, userq) and print its evidence.
    Smoke(smoke::SmokeArgs),
    /// Fetch the default model into the model directory.
    Pull(pull::PullArgs),
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Probe(args) => probe::run(cli.config.as_deref(), cli.backend.as_deref(), args),
        Command::Run(args) => run::run(cli.config.as_deref(), cli.backend.as_deref(), args),
        Command::Synth(args) => synth::run(args),
        Command::Bench(args) => bench::run(cli.config.as_deref(), cli.backend.as_deref(), args),
        Command::Serve(args) => serve::run(cli.config.as_deref(), cli.backend.as_deref(), args),
        Command::Perplexity(args) => perplexity::run(cli.config.as_deref(), cli.backend.as_deref(), args),
        Command::Smoke(args) => smoke::run(cli.config.as_deref(), args),
        Command::Pull(args) => pull::run(args),
    }
}

/// Logs to stderr; the level comes from `ZINC_LOG` (error, warn, info, debug, trace).
pub fn init_logging() {
    let level = match std::env::var("ZINC_LOG").unwrap_or_default().to_ascii_lowercase().as_str() {
        "error" => tracing::Level::ERROR,
        "info" => tracing::Level::INFO,
        "debug" => tracing::Level::DEBUG,
        "trace" => tracing::Level::TRACE,
        _ => tracing::Level::WARN,
    };
    let _ = tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).try_init();
}
