//! `zinc serve`: the OpenAI-compatible server on the best backend.

use crate::{
    engine::{
        open::{open_for_model_except, prepare_steps},
        scheduler::{EngineConfig, FailoverOpen, Replacement},
        sequence::{PoolSize, PAGE_SIZE},
    },
    model::loaded::{resolve_model, Model},
    server::{listener::ConnectionLimits, serve, tenants::Tenants, ServeConfig},
};
use anyhow::Result;
use std::{
    net::{IpAddr, SocketAddr},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};
use zinc_plugin_api::KvPoolInfo;

/// Options of `zinc serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Model file (default: the default model).
    #[arg(short = 'm', long)]
    pub model: Option<PathBuf>,
    /// Address to listen on (loopback unless told otherwise).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (0 picks a free one; the URL is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Tenants file (default: one open tenant, no key).
    #[arg(long)]
    pub tenants: Option<PathBuf>,
    /// Serve a non-loopback address without a tenants file, that is to anyone who can reach
    /// it, with no key.
    #[arg(long)]
    pub insecure_open: bool,
    /// Host names (and `host:port`) that requests may name besides the loopback ones and the
    /// bound address (repeatable); others are refused, against DNS rebinding.
    #[arg(long)]
    pub allow_host: Vec<String>,
    /// Longest sequence, prompt plus output (default: the model's, at most 8192).
    #[arg(long)]
    pub ctx: Option<u32>,
    /// KV memory in tokens across all sequences (sets the page pool size).
    #[arg(long, default_value_t = 65536)]
    pub kv_tokens: u32,
    /// Sequences whose whole sliding windows the window pages hold at once (models with
    /// sliding-window layers: those layers keep only their windows' pages); 0 keeps every
    /// layer's keys for every position.
    #[arg(long, default_value_t = 64)]
    pub kv_window_seqs: u32,
    /// Token budget of one engine step: decodes first, then prefill chunks.
    #[arg(long, default_value_t = 128)]
    pub step_tokens: u32,
    /// Context length at which a prompt token's attention costs as much as its matmuls; a
    /// step takes fewer prefill tokens the deeper they are in their prompt.
    #[arg(long, default_value_t = 1024)]
    pub attention_equiv: u32,
    /// A step that carries running decodes takes prefill chunks for at most about this many
    /// times a decode-only step (measured as the server runs); 0 leaves only --step-tokens.
    /// Lower keeps streams beside a long prompt closer to their pace, higher gets the long
    /// prompt's first token sooner.
    #[arg(long, default_value_t = 2.0)]
    pub step_slowdown: f64,
    /// For this many seconds after an interactive request, batch steps carry only as many
    /// decodes as fit in the time of an interactive prompt's step, so the next interactive
    /// prompt never waits behind a long batch step (0: off; costs batch throughput meanwhile).
    #[arg(long, default_value_t = 5.0)]
    pub interactive_window: f64,
    /// Seconds after which a waiting batch request is ordered as interactive.
    #[arg(long, default_value_t = 10.0)]
    pub aging_secs: f64,
    /// Host memory for preempted requests' KV pages, in MiB (past it they are recomputed).
    #[arg(long, default_value_t = 1024)]
    pub swap_mib: u64,
    /// Largest request body in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    pub body_limit: usize,
    /// `max_tokens` when a request gives none.
    #[arg(long, default_value_t = 512)]
    pub default_max_tokens: u32,
    /// Connections served at once; more are closed as soon as they are accepted.
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
    /// Seconds a client has to send a request's headers (also how long an idle keep-alive
    /// connection stays open).
    #[arg(long, default_value_t = 10.0)]
    pub header_timeout_secs: f64,
    /// Seconds open connections get to finish after SIGINT or SIGTERM before the server
    /// closes them and exits.
    #[arg(long, default_value_t = 10.0)]
    pub shutdown_grace_secs: f64,
    /// Seconds a streaming client may leave its reply unread, once the connection's buffers
    /// are full, before its request is cancelled and its KV pages freed.
    #[arg(long, default_value_t = 30.0)]
    pub stream_stall_secs: f64,
}

/// Runs `zinc serve`.
pub fn run(config: Option<&Path>, backend: Option<&str>, args: ServeArgs) -> Result<i32> {
    if !args.host.is_loopback() && args.tenants.is_none() && !args.insecure_open {
        anyhow::bail!(
            "serving {} without a tenants file would let anyone who can reach it use the model with no key; \
             pass --tenants FILE (README: Configuration), or --insecure-open to serve it open",
            args.host
        );
    }
    let tenants = match &args.tenants {
        Some(p) => Tenants::load(p)?,
        None => Tenants::open_default(),
    };
    let path = resolve_model(args.model.as_deref())?;
    let model = Arc::new(Model::load_with_progress(&path, std::io::IsTerminal::is_terminal(&std::io::stderr()))?);
    let ctx = model.context_length(Some(args.ctx.unwrap_or(8192)));
    let kv_tokens = args.kv_tokens.max(ctx);
    // The pool is allocated as one "sequence" of kv_tokens: pages are shared by all requests.
    let size = PoolSize { ctx: kv_tokens, seqs: 1, window_seqs: args.kv_window_seqs };
    let (mut opened, pool) = open_for_model_except(config, backend, &[], &model, size)?;
    let prepared = prepare_steps(&mut opened.backend, args.step_tokens.max(1))?;
    if prepared.kernels > 0 {
        eprintln!(
            "zinc: compiled {} kernels for steps of up to {} rows in {:.1} s",
            prepared.kernels,
            args.step_tokens,
            prepared.took.as_secs_f64()
        );
    }
    eprintln!(
        "zinc: backend {} on {} ({}); {}; context {} tokens; step budget {} tokens",
        opened.name,
        opened.device.name,
        opened.device.kind.label(),
        describe_pool(&pool),
        ctx,
        args.step_tokens
    );
    let engine = EngineConfig {
        step_tokens: args.step_tokens.max(1),
        page_size: PAGE_SIZE,
        n_pages: pool.n_pages,
        window_pages: pool.window_pages,
        max_context: ctx,
        aging: Duration::from_secs_f64(args.aging_secs.max(0.0)),
        swap_bytes: args.swap_mib << 20,
        attention_equiv: args.attention_equiv,
        step_slowdown: args.step_slowdown.max(0.0),
        interactive_window: Duration::from_secs_f64(args.interactive_window.max(0.0)),
    };
    let cfg = ServeConfig {
        addr: SocketAddr::new(args.host, args.port),
        engine,
        body_limit: args.body_limit,
        stream_stall: Duration::from_secs_f64(args.stream_stall_secs.max(0.1)),
        default_max_tokens: args.default_max_tokens,
        allowed_hosts: args.allow_host.clone(),
        connections: ConnectionLimits {
            max_connections: args.max_connections.max(1),
            header_timeout: Duration::from_secs_f64(args.header_timeout_secs.max(0.1)),
            shutdown_grace: Duration::from_secs_f64(args.shutdown_grace_secs.clamp(0.0, 3600.0)),
        },
    };
    let device = opened.device.name.to_string();
    // A forced backend never becomes another one; otherwise a backend that fails while
    // serving hands its requests to the next in the fallback chain.
    let failover = backend.is_none().then(|| failover(config, model.clone(), size, args.step_tokens.max(1)));
    serve(cfg, model, (opened.backend, opened.name, device), tenants, failover)?;
    Ok(0)
}

/// Opens the best backend after those that failed while serving, sized and readied as at
/// start.
fn failover(config: Option<&Path>, model: Arc<Model>, size: PoolSize, step_tokens: u32) -> FailoverOpen {
    let config = config.map(Path::to_path_buf);
    Box::new(move |failed: &[String]| {
        let (mut opened, pool) = open_for_model_except(config.as_deref(), None, failed, &model, size)?;
        prepare_steps(&mut opened.backend, step_tokens)?;
        let device = opened.device.name.to_string();
        eprintln!("zinc: backend {} failed; serving on {} ({device}) now", failed.join(", "), opened.name);
        let (n_pages, window_pages) = (pool.n_pages, pool.window_pages);
        Ok(Replacement { backend: opened.backend, name: opened.name, device, n_pages, window_pages })
    })
}

/// The KV pool in words: its pages and their memory, and the window pages where the model's
/// sliding-window layers have their own.
fn describe_pool(pool: &KvPoolInfo) -> String {
    let mib = |pages: u32, bytes: u64| pages as u64 * bytes / (1 << 20);
    let full = format!(
        "{} KV pages of {} tokens ({} MiB)",
        pool.n_pages,
        pool.page_size,
        mib(pool.n_pages, pool.bytes_per_page)
    );
    match pool.window_pages {
        0 => full,
        w => format!("{full} and {w} window pages ({} MiB)", mib(w, pool.bytes_per_window_page)),
    }
}
