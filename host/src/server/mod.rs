//! The OpenAI-compatible HTTP server: tenants, admission, metrics, and the engine thread.
//!
//! * [`tenants`]: API keys (stored hashed), weights, classes, quotas, queue limits;
//! * [`api`]: request bodies and OpenAI's error shape;
//! * [`routes`]: the handlers;
//! * [`metrics`]: Prometheus text;
//! * [`status`]: the built-in page and the JSON it polls.

pub mod api;
pub mod hosts;
pub mod listener;
pub mod logprobs_json;
pub mod metrics;
pub mod reply;
pub mod routes;
pub mod status;
pub mod tenants;
pub mod tool_calls;

use crate::{
    engine::{
        admission::Admission,
        constraint::GrammarCompiler,
        scheduler::{Command, Engine, EngineConfig, FailoverOpen, TenantLimit},
        stats::Stats,
    },
    model::loaded::Model,
};
use anyhow::{Context, Result};
use axum::{
    extract::DefaultBodyLimit,
    routing::{get, post},
    Router,
};
use std::{
    net::SocketAddr,
    sync::{atomic::AtomicU64, mpsc, Arc, Mutex},
};
use tenants::Tenants;
use zinc_plugin_api::BackendBox;

/// Shared by every handler.
pub struct AppState {
    /// The model (tokenizer, template, name).
    pub model: Arc<Model>,
    /// Tenants.
    pub tenants: Tenants,
    /// Declared shared prefixes with their tokens.
    pub shared_prefixes: Vec<(String, Vec<u32>)>,
    /// Numbers for `/metrics` and `/v1/usage`.
    pub stats: Arc<Mutex<Stats>>,
    /// The engine's admission queue counts: bounded here before a request is submitted.
    pub admission: Arc<Admission>,
    /// The engine's inbox.
    pub engine: Mutex<mpsc::Sender<Command>>,
    /// Request ids.
    pub next_id: AtomicU64,
    /// Longest sequence.
    pub max_context: u32,
    /// The longest prompt text that could fit the context: `max_context` times the most bytes
    /// one token stands for. Longer text is refused before it is tokenized.
    pub prompt_text_limit: usize,
    /// Default `max_tokens` when a request gives none.
    pub default_max_tokens: u32,
    /// Tokens per KV page.
    pub page_size: u32,
    /// Largest request body accepted.
    pub body_limit: usize,
    /// How long a streamed reply may sit unread, its buffers full, before its request is
    /// cancelled (`reply::stream`).
    pub stream_stall: std::time::Duration,
    /// Which `Host` and `Origin` values requests may carry.
    pub hosts: hosts::AllowedHosts,
    /// The model's grammar compiler, built by the first request that asks for structured
    /// output (its token tables take a moment to build and most servers never need them).
    pub grammars: std::sync::OnceLock<Result<GrammarCompiler, String>>,
}

impl AppState {
    /// A copy of the stats for a report, with each tenant's waiting and running requests from
    /// the engine's admission counts.
    pub fn stats_snapshot(&self) -> Stats {
        let mut s = self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let queues = self.admission.snapshot();
        for t in &self.tenants.list {
            let q = queues.get(t.id as usize).copied().unwrap_or_default();
            let ts = s.tenant(&t.spec.name);
            (ts.waiting, ts.running) = (q.waiting, q.running);
        }
        s
    }

    /// The grammar compiler for the served model's vocabulary.
    pub fn grammar_compiler(&self) -> Result<&GrammarCompiler, String> {
        self.grammars
            .get_or_init(|| GrammarCompiler::new(&self.model.tokenizer).map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// Server settings.
pub struct ServeConfig {
    /// Where to listen.
    pub addr: SocketAddr,
    /// Engine settings.
    pub engine: EngineConfig,
    /// Largest request body.
    pub body_limit: usize,
    /// How long a streamed reply may sit unread, its buffers full, before its request is
    /// cancelled.
    pub stream_stall: std::time::Duration,
    /// Default `max_tokens`.
    pub default_max_tokens: u32,
    /// Connection cap and deadlines.
    pub connections: listener::ConnectionLimits,
    /// Host names requests may name besides the loopback ones and the bound address.
    pub allowed_hosts: Vec<String>,
}

/// The router over a state.
pub fn router(state: Arc<AppState>) -> Router {
    // Requests with bodies are refused without a valid key, or with a declared length over
    // the limit, before the body is read.
    let generate = Router::new()
        .route("/v1/chat/completions", post(routes::chat))
        .route("/v1/completions", post(routes::completions))
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), routes::check_before_body));
    Router::new()
        .route("/", get(status::page))
        .route("/v1/status", get(status::status))
        .route("/health", get(routes::health))
        .route("/metrics", get(routes::metrics_text))
        .route("/v1/models", get(routes::models))
        .route("/v1/usage", get(routes::usage))
        .merge(generate)
        .layer(axum::middleware::from_fn_with_state(state.clone(), hosts::check))
        .layer(DefaultBodyLimit::max(state.body_limit))
        .with_state(state)
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        if let Ok(mut s) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            s.recv().await;
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// Runs the server on `backend` (with its name and device) until SIGINT or SIGTERM; with
/// `failover`, a backend failing mid-serving hands its requests to the next one. In-flight
/// requests are cancelled at shutdown (their streams end with `finish_reason: "cancelled"`)
/// and the engine thread is joined.
pub fn serve(
    cfg: ServeConfig,
    model: Arc<Model>,
    (backend, backend_name, device_name): (BackendBox, String, String),
    tenants: Tenants,
    failover: Option<FailoverOpen>,
) -> Result<()> {
    let stats = Arc::new(Mutex::new(Stats { backend_name, device_name, ..Default::default() }));
    let limits: Vec<TenantLimit> = tenants
        .list
        .iter()
        .map(|t| TenantLimit {
            name: t.spec.name.clone(),
            page_quota: t.spec.kv_page_quota,
            max_running: t.spec.max_running,
            weight: t.spec.weight,
        })
        .collect();
    let (tx, rx) = mpsc::channel();
    let mut engine = Engine::new(cfg.engine.clone(), model.clone(), backend, limits, stats.clone());
    if let Some(open) = failover {
        engine = engine.with_failover(open);
    }
    let admission = engine.admission();
    let engine_thread = std::thread::Builder::new().name("zinc-engine".into()).spawn(move || engine.run(rx))?;
    let shared_prefixes =
        tenants.shared_prefixes.iter().map(|p| (p.clone(), model.tokenizer.encode(p, true, true))).collect();
    let prompt_text_limit = cfg.engine.max_context as usize * model.tokenizer.max_token_bytes();
    let state = Arc::new(AppState {
        model,
        tenants,
        shared_prefixes,
        stats,
        admission,
        engine: Mutex::new(tx.clone()),
        next_id: AtomicU64::new(1),
        max_context: cfg.engine.max_context,
        prompt_text_limit,
        default_max_tokens: cfg.default_max_tokens,
        page_size: cfg.engine.page_size,
        body_limit: cfg.body_limit,
        stream_stall: cfg.stream_stall,
        hosts: hosts::AllowedHosts::new(cfg.addr, &cfg.allowed_hosts),
        grammars: std::sync::OnceLock::new(),
    });
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(async move {
        let listener =
            tokio::net::TcpListener::bind(cfg.addr).await.with_context(|| format!("cannot listen on {}", cfg.addr))?;
        let addr = listener.local_addr()?;
        println!("zinc: serving {} on http://{addr}/v1 (chat and live view: http://{addr}/)", state.model.name);
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let app = router(state);
        let shutdown = async move {
            shutdown_signal().await;
            eprintln!("zinc: shutting down; cancelling in-flight requests");
            let _ = tx.send(Command::Shutdown);
        };
        listener::serve(listener, app, cfg.connections, shutdown).await.context("server failed")
    })?;
    let _ = engine_thread.join();
    Ok(())
}
