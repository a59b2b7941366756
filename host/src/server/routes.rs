//! The HTTP handlers.

use super::{
    api::{ApiError, ChatRequest, Common, CompletionRequest, LogprobsAsk},
    metrics,
    reply::{respond, Echo, Kind},
    AppState,
};
use crate::{
    engine::{
        admission::QueueFull,
        constraint::{Constraint, Grammar},
        request::{Band, Event, Request},
        sampler::SamplerConfig,
        scheduler::Command,
    },
    model::chat::render_chat_with,
    server::{
        tenants::Tenant,
        tool_calls::{conversation, ToolUse},
    },
};
use axum::{
    body::Bytes,
    extract::{rejection::BytesRejection, State},
    http::{header, HeaderMap, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde_json::{json, Value};
use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Instant,
};
use tokio::sync::mpsc;

/// The credential of an `Authorization: Bearer …` header (the scheme's case does not matter,
/// as RFC 9110 says of authentication schemes).
pub(super) fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, credential) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| credential.trim())
}

fn auth<'a>(state: &'a AppState, headers: &HeaderMap) -> Result<&'a Tenant, ApiError> {
    state.tenants.authenticate(bearer(headers)).ok_or_else(ApiError::unauthorized)
}

/// Middleware of the routes that take a body: a request without a valid key is answered
/// 401, and one whose declared length is over the limit 413, from its headers, before its
/// body is read (up to the body limit, for each of many connections).
pub async fn check_before_body(
    State(st): State<Arc<AppState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Err(e) = auth(&st, req.headers()) {
        return e.into_response();
    }
    let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > st.body_limit as u64) {
        return ApiError::too_large(st.body_limit).into_response();
    }
    next.run(req).await
}

fn body<T: serde::de::DeserializeOwned>(state: &AppState, b: Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    let bytes = b.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(state.body_limit)
        } else {
            ApiError::bad(format!("cannot read the request body: {r}"), None)
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad(format!("invalid JSON body: {e}"), None))
}

/// A seed for a request that gives none: from the OS's randomness, different for every
/// request (two requests in the same second must not sample alike).
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    static COUNT: AtomicU64 = AtomicU64::new(0);
    RandomState::new().hash_one(COUNT.fetch_add(1, Ordering::Relaxed))
}

/// `GET /health`.
pub async fn health(State(st): State<Arc<AppState>>) -> impl IntoResponse {
    let s = st.stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Json(json!({"status": "ok", "model": st.model.name, "backend": s.backend_name, "device": s.device_name}))
}

/// `GET /v1/models`.
pub async fn models(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    auth(&st, &headers)?;
    Ok(Json(
        json!({"object": "list", "data": [{"id": st.model.name, "object": "model", "created": 0, "owned_by": "zinc"}]}),
    )
    .into_response())
}

/// `GET /metrics`.
pub async fn metrics_text(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    // The metrics name every tenant and its usage: with a tenants file, operators only.
    if !st.tenants.is_admin(bearer(&headers)) {
        return Err(ApiError::internal(
            StatusCode::UNAUTHORIZED,
            "GET /metrics needs the operators' key (admin_key_sha256 in the tenants file) as a bearer token",
        ));
    }
    let s = st.stats_snapshot();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], metrics::render(&s, &st.model.name)).into_response())
}

/// `GET /v1/usage`: the caller's tenant.
pub async fn usage(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let t = auth(&st, &headers)?;
    let u = st.stats_snapshot().tenant(&t.spec.name).clone();
    Ok(Json(json!({
        "tenant": t.spec.name,
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "cached_prompt_tokens": u.cached_tokens,
        "prefix_cache_hits": u.prefix_hits,
        "kv_page_seconds": u.kv_page_seconds,
        "queue_seconds": u.queue_seconds,
        "requests": u.requests,
        "rejected": u.rejected,
        "running": u.running,
        "waiting": u.waiting,
        "kv_pages": u.pages,
    }))
    .into_response())
}

/// What a validated request turns into before it is queued.
struct Prepared {
    prompt: Vec<u32>,
    shared_prefix: usize,
    constraint: Option<Constraint>,
}

/// The request field that named the output grammar, for errors about it.
fn grammar_param(c: &Common) -> &'static str {
    if c.grammar.is_some() {
        "grammar"
    } else {
        "response_format"
    }
}

/// Compiles the output grammar (from `response_format`, `grammar` or a `tool_choice` that
/// demands a call, named by `param`) on the blocking pool: a large schema takes a while, and
/// llguidance's limits bound it. A grammar llguidance refuses is the client's error, 400, with
/// llguidance's reason.
async fn constraint_for(
    st: &Arc<AppState>,
    grammar: Option<(Grammar, &'static str)>,
) -> Result<Option<Constraint>, ApiError> {
    let Some((grammar, param)) = grammar else { return Ok(None) };
    let state = st.clone();
    off_the_runtime(move || {
        let compiler =
            state.grammar_compiler().map_err(|e| ApiError::internal(StatusCode::INTERNAL_SERVER_ERROR, e))?;
        let constraint = compiler
            .compile(&grammar)
            .map_err(|e| ApiError::bad(format!("the output grammar was refused: {e}"), Some(param)))?;
        Ok(Some(constraint))
    })
    .await
}

fn sampler_for(c: &Common) -> SamplerConfig {
    let temperature = c.temperature.unwrap_or(1.0);
    SamplerConfig {
        temperature,
        top_k: c.top_k.unwrap_or(0) as usize,
        top_p: c.top_p.unwrap_or(1.0),
        min_p: c.min_p.unwrap_or(0.0),
        repeat_penalty: c.repetition_penalty.unwrap_or(1.0),
        repeat_last_n: 64,
        presence_penalty: c.presence_penalty.unwrap_or(0.0),
        frequency_penalty: c.frequency_penalty.unwrap_or(0.0),
        seed: c.seed.unwrap_or_else(random_seed),
    }
}

/// Checks limits and queues the request; returns its event stream.
fn enqueue(
    st: &AppState,
    t: &Tenant,
    c: &Common,
    p: Prepared,
    ask: LogprobsAsk,
) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
    let band = match c.priority.as_deref() {
        None => t.band,
        Some(s) => {
            let asked = Band::parse(s)
                .ok_or_else(|| ApiError::bad("priority must be interactive or batch", Some("priority")))?;
            // A request may ask for a lower class, never a higher one.
            asked.max(t.band)
        }
    };
    let ctx = st.max_context;
    let prompt_len = p.prompt.len() as u32;
    let max_tokens = c.max_tokens.unwrap_or_else(|| ctx.saturating_sub(prompt_len).min(st.default_max_tokens));
    if prompt_len == 0 {
        return Err(ApiError::bad("the prompt is empty", Some("prompt")));
    }
    let total = prompt_len as u64 + max_tokens as u64;
    if total > ctx as u64 {
        return Err(ApiError::bad(
            format!("prompt ({prompt_len} tokens) plus max_tokens ({max_tokens}) exceeds the context of {ctx} tokens; shorten the prompt or lower max_tokens"),
            Some("max_tokens"),
        ));
    }
    let pages = total.div_ceil(st.page_size as u64);
    // The pool as it is now: a failover may have left a smaller one than at start.
    let pool = st.stats.lock().unwrap_or_else(|e| e.into_inner()).kv_pages_total;
    let quota = (t.spec.kv_page_quota as u64).min(pool as u64);
    if pages > quota {
        return Err(ApiError::bad(
            format!(
                "this request needs {pages} KV pages ({total} tokens) but the tenant's quota is {quota}; shorten it"
            ),
            Some("max_tokens"),
        ));
    }
    if let Err(full) = st.admission.enqueue(t.id, t.spec.max_queued, st.tenants.max_queued_total) {
        st.stats.lock().unwrap_or_else(|e| e.into_inner()).tenant(&t.spec.name).rejected += 1;
        return Err(match full {
            QueueFull::Tenant { waiting } => {
                ApiError::busy(format!("tenant {} has {waiting} requests queued, its limit", t.spec.name), 1)
            }
            QueueFull::Server => ApiError::busy("the server's queue is full; retry shortly", 2),
        });
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let req = Request {
        id: st.next_id.fetch_add(1, Ordering::Relaxed),
        tenant: t.id,
        band,
        prompt: p.prompt,
        shared_prefix: p.shared_prefix,
        max_tokens,
        sampler: sampler_for(c),
        stop: c.stop_list(),
        ignore_eos: c.ignore_eos,
        logprobs: ask.generated,
        prompt_logprobs: ask.prompt(),
        constraint: p.constraint,
        events: tx,
        arrived: Instant::now(),
    };
    let sent = st.engine.lock().unwrap_or_else(|e| e.into_inner()).send(Command::Submit(req));
    if sent.is_err() {
        st.admission.withdraw(t.id);
        return Err(ApiError::internal(StatusCode::SERVICE_UNAVAILABLE, "the engine has stopped"));
    }
    Ok(rx)
}

/// Tokens of the longest declared shared prefix that starts the rendered prompt (prefixes are
/// tokenized once, when the server starts).
fn shared_prefix_len(st: &AppState, text: &str, prompt: &[u32]) -> usize {
    st.shared_prefixes
        .iter()
        .filter(|(p, t)| text.starts_with(p.as_str()) && prompt.starts_with(t))
        .map(|(_, t)| t.len())
        .max()
        .unwrap_or(0)
}

/// `POST /v1/chat/completions`.
pub async fn chat(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let t = auth(&st, &headers)?.clone();
    let req: ChatRequest = body(&st, b)?;
    req.common.check()?;
    let ask = req.common.logprobs_ask(true)?;
    if req.messages.is_empty() {
        return Err(ApiError::bad("messages must not be empty", Some("messages")));
    }
    let template = st.model.chat_template.as_deref();
    let tools = ToolUse::from_request(&req, template)?;
    let conv = conversation(&req, tools.as_ref(), template)?;
    let forced = tools.as_ref().and_then(ToolUse::forcing_grammar);
    let grammar = match (forced, req.common.output_grammar()?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::bad(
                "tool_choice that demands a call cannot be combined with response_format or grammar",
                Some("tool_choice"),
            ))
        }
        (Some(g), None) => Some((Grammar::Lark(g), "tool_choice")),
        (None, g) => g.map(|g| (g, grammar_param(&req.common))),
    };
    let constraint = constraint_for(&st, grammar).await?;
    let state = st.clone();
    let prepared = off_the_runtime(move || {
        let st = state;
        let tpl = st
            .model
            .chat_template
            .as_deref()
            .ok_or_else(|| ApiError::bad("this model has no chat template; use /v1/completions", None))?;
        let bad = |e: anyhow::Error| ApiError::bad(format!("{e:#}"), Some("messages"));
        let chat = render_chat_with(tpl, &conv.messages, &conv.extras, true, &st.model.tokenizer).map_err(bad)?;
        too_long_to_fit(&st, chat.text.len(), "messages")?;
        let prompt = chat.tokens(&conv.messages, &st.model.tokenizer).map_err(bad)?;
        let shared_prefix = shared_prefix_len(&st, &chat.text, &prompt);
        Ok(Prepared { prompt, shared_prefix, constraint })
    })
    .await?;
    let rx = enqueue(&st, &t, &req.common, prepared, ask)?;
    respond(st, Kind::Chat { tools: tools.map(|t| t.syntax) }, &req.common, ask, rx).await
}

/// Refuses a prompt text of `len` bytes that no tokenization could fit in the context, before
/// the time to tokenize it is spent (a chat template can render megabytes from a short body).
fn too_long_to_fit(st: &AppState, len: usize, param: &str) -> Result<(), ApiError> {
    if len > st.prompt_text_limit {
        return Err(ApiError::bad(
            format!("the prompt's text ({len} bytes) cannot fit the context of {} tokens; shorten it", st.max_context),
            Some(param),
        ));
    }
    Ok(())
}

/// Runs `f` (template rendering and tokenization, whose time grows with the request) on the
/// blocking pool, so that the server's two runtime threads keep answering health checks and
/// streaming other requests meanwhile.
async fn off_the_runtime<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        ApiError::internal(StatusCode::INTERNAL_SERVER_ERROR, format!("preparing the prompt failed: {e}"))
    })?
}

/// `POST /v1/completions`.
pub async fn completions(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    b: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let t = auth(&st, &headers)?.clone();
    let req: CompletionRequest = body(&st, b)?;
    req.common.check()?;
    let ask = req.common.logprobs_ask(false)?;
    let text = match &req.prompt {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) if a.len() == 1 && a[0].is_string() => Some(a[0].as_str().unwrap_or("").to_string()),
        _ => None,
    };
    let prompt = match (text.clone(), &req.prompt) {
        (Some(text), _) => {
            too_long_to_fit(&st, text.len(), "prompt")?;
            let state = st.clone();
            off_the_runtime(move || Ok(state.model.tokenizer.encode(&text, true, false))).await?
        }
        (None, Value::Array(a)) if !a.is_empty() && a.iter().all(|v| v.is_u64()) => {
            let vocab = st.model.tokenizer.vocab_size();
            let ids: Option<Vec<u32>> = a
                .iter()
                .map(|v| v.as_u64().and_then(|v| u32::try_from(v).ok()).filter(|&i| (i as usize) < vocab))
                .collect();
            ids.ok_or_else(|| {
                ApiError::bad(format!("a prompt token id is outside the vocabulary (0..{vocab})"), Some("prompt"))
            })?
        }
        _ => {
            return Err(ApiError::bad(
                "prompt must be a string or a list of token ids (one prompt per request)",
                Some("prompt"),
            ))
        }
    };
    let grammar = req.common.output_grammar()?.map(|g| (g, grammar_param(&req.common)));
    let constraint = constraint_for(&st, grammar).await?;
    // An echoed prompt given as token ids reads as their text.
    let echo = ask.echo.then(|| Echo {
        text: text.unwrap_or_else(|| st.model.tokenizer.decode(&prompt, false)),
        // An empty prompt is refused when it is queued.
        first_token: prompt.first().copied().unwrap_or(0),
    });
    let rx = enqueue(&st, &t, &req.common, Prepared { prompt, shared_prefix: 0, constraint }, ask)?;
    respond(st, Kind::Completion { echo }, &req.common, ask, rx).await
}
