//! The HTTP handlers.

use super::{
    api::{ApiError, ChatRequest, Common, CompletionRequest},
    metrics, AppState,
};
use crate::{
    engine::{
        constraint::{Constraint, Grammar},
        request::{Band, Event, Request},
        sampler::SamplerConfig,
        scheduler::Command,
    },
    model::chat::render_chat,
    server::tenants::Tenant,
};
use axum::{
    body::Bytes,
    extract::{rejection::BytesRejection, State},
    http::{header, HeaderMap, StatusCode},
    response::{
        sse::{Event as SseEvent, KeepAlive, Sse},
        IntoResponse, Response,
    },
    Json,
};
use serde_json::{json, Value};
use std::{
    convert::Infallible,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Instant, SystemTime, UNIX_EPOCH},
};
use tokio::sync::mpsc;
use tokio_stream::{wrappers::UnboundedReceiverStream, StreamExt};

/// The credential of an `Authorization: Bearer …` header (the scheme's case does not matter,
/// as RFC 9110 says of authentication schemes).
fn bearer(headers: &HeaderMap) -> Option<&str> {
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

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
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
    let s = st.stats.lock().unwrap_or_else(|e| e.into_inner()).clone();
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], metrics::render(&s, &st.model.name)).into_response())
}

/// `GET /v1/usage`: the caller's tenant.
pub async fn usage(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let t = auth(&st, &headers)?;
    let mut s = st.stats.lock().unwrap_or_else(|e| e.into_inner());
    let u = s.tenant(&t.spec.name).clone();
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

/// Compiles the grammar the request's `response_format` or `grammar` asks for, on the
/// blocking pool (a large schema takes a while; llguidance's limits bound it); a grammar
/// llguidance refuses is the client's error, 400, with llguidance's reason.
async fn constraint_for(st: &Arc<AppState>, c: &Common) -> Result<Option<Constraint>, ApiError> {
    let Some(grammar) = c.output_grammar()? else { return Ok(None) };
    let param = if matches!(grammar, Grammar::Lark(_)) { "grammar" } else { "response_format" };
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
fn enqueue(st: &AppState, t: &Tenant, c: &Common, p: Prepared) -> Result<mpsc::UnboundedReceiver<Event>, ApiError> {
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
    let quota = (t.spec.kv_page_quota as u64).min(st.n_pages as u64);
    if pages > quota {
        return Err(ApiError::bad(
            format!(
                "this request needs {pages} KV pages ({total} tokens) but the tenant's quota is {quota}; shorten it"
            ),
            Some("max_tokens"),
        ));
    }
    {
        let mut s = st.stats.lock().unwrap_or_else(|e| e.into_inner());
        let waiting_total = s.waiting();
        let ts = s.tenant(&t.spec.name);
        if ts.waiting >= t.spec.max_queued {
            ts.rejected += 1;
            return Err(ApiError::busy(
                format!("tenant {} has {} requests queued, its limit", t.spec.name, ts.waiting),
                1,
            ));
        }
        if waiting_total >= st.tenants.max_queued_total {
            ts.rejected += 1;
            return Err(ApiError::busy("the server's queue is full; retry shortly", 2));
        }
        ts.waiting += 1;
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
        constraint: p.constraint,
        events: tx,
        arrived: Instant::now(),
    };
    let sent = st.engine.lock().unwrap_or_else(|e| e.into_inner()).send(Command::Submit(req));
    if sent.is_err() {
        let mut s = st.stats.lock().unwrap_or_else(|e| e.into_inner());
        let ts = s.tenant(&t.spec.name);
        ts.waiting = ts.waiting.saturating_sub(1);
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

enum Kind {
    Chat,
    Completion,
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
    if req.messages.is_empty() {
        return Err(ApiError::bad("messages must not be empty", Some("messages")));
    }
    let mut msgs = Vec::new();
    for m in &req.messages {
        if !["system", "user", "assistant", "developer"].contains(&m.role.as_str()) {
            return Err(ApiError::bad(format!("message role `{}` is not supported", m.role), Some("messages")));
        }
        let role = if m.role == "developer" { "system" } else { m.role.as_str() };
        msgs.push((role.to_string(), m.text()?));
    }
    let constraint = constraint_for(&st, &req.common).await?;
    let state = st.clone();
    let prepared = off_the_runtime(move || {
        let st = state;
        let tpl = st
            .model
            .chat_template
            .as_deref()
            .ok_or_else(|| ApiError::bad("this model has no chat template; use /v1/completions", None))?;
        let bad = |e: anyhow::Error| ApiError::bad(format!("{e:#}"), Some("messages"));
        let chat = render_chat(tpl, &msgs, true, &st.model.tokenizer).map_err(bad)?;
        let prompt = chat.tokens(&msgs, &st.model.tokenizer).map_err(bad)?;
        let shared_prefix = shared_prefix_len(&st, &chat.text, &prompt);
        Ok(Prepared { prompt, shared_prefix, constraint })
    })
    .await?;
    let rx = enqueue(&st, &t, &req.common, prepared)?;
    respond(st, Kind::Chat, &req.common, rx).await
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
    let text = match &req.prompt {
        Value::String(s) => Some(s.clone()),
        Value::Array(a) if a.len() == 1 && a[0].is_string() => Some(a[0].as_str().unwrap_or("").to_string()),
        _ => None,
    };
    let prompt = match (text, &req.prompt) {
        (Some(text), _) => {
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
    let constraint = constraint_for(&st, &req.common).await?;
    let rx = enqueue(&st, &t, &req.common, Prepared { prompt, shared_prefix: 0, constraint })?;
    respond(st, Kind::Completion, &req.common, rx).await
}

fn usage_json(u: &crate::engine::request::Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

async fn respond(
    st: Arc<AppState>,
    kind: Kind,
    c: &Common,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let id = format!(
        "{}-{}",
        if matches!(kind, Kind::Chat) { "chatcmpl" } else { "cmpl" },
        st.next_id.fetch_add(1, Ordering::Relaxed)
    );
    let model = st.model.name.clone();
    let created = now();
    let object = if matches!(kind, Kind::Chat) { "chat.completion" } else { "text_completion" };
    let grammar_param = if c.grammar.is_some() { "grammar" } else { "response_format" };
    if !c.stream {
        let mut text = String::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Text(t) => text.push_str(&t),
                Event::Error(e) => return Err(ApiError::internal(StatusCode::INTERNAL_SERVER_ERROR, e)),
                Event::GrammarFailed(e) => return Err(ApiError::bad(e, Some(grammar_param))),
                Event::Done { finish, usage } => {
                    let choice = if matches!(kind, Kind::Chat) {
                        json!({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish.label(), "logprobs": Value::Null})
                    } else {
                        json!({"index": 0, "text": text, "finish_reason": finish.label(), "logprobs": Value::Null})
                    };
                    return Ok(Json(json!({"id": id, "object": object, "created": created, "model": model, "choices": [choice], "usage": usage_json(&usage)})).into_response());
                }
            }
        }
        return Err(ApiError::internal(
            StatusCode::SERVICE_UNAVAILABLE,
            "the engine stopped before the request finished",
        ));
    }
    let chunk_object = if matches!(kind, Kind::Chat) { "chat.completion.chunk" } else { "text_completion" };
    let include_usage = c.include_usage();
    let chat = matches!(kind, Kind::Chat);
    let mut first = true;
    // A relay task turns engine events into SSE events. It watches the client side too, so a
    // disconnect drops the engine's channel at once and the engine frees the pages next step.
    let (sse_tx, sse_rx) = mpsc::unbounded_channel::<SseEvent>();
    tokio::spawn(async move {
        let chunk = |choice: Value, usage: Value| json!({"id": id, "object": chunk_object, "created": created, "model": model, "choices": [choice], "usage": usage});
        loop {
            let ev = tokio::select! {
                _ = sse_tx.closed() => return,
                ev = rx.recv() => match ev { Some(ev) => ev, None => return },
            };
            let events: Vec<SseEvent> = match ev {
                Event::Text(t) => {
                    let delta = if chat {
                        let d = if first { json!({"role": "assistant", "content": t}) } else { json!({"content": t}) };
                        json!({"index": 0, "delta": d, "finish_reason": Value::Null})
                    } else {
                        json!({"index": 0, "text": t, "finish_reason": Value::Null})
                    };
                    first = false;
                    vec![SseEvent::default().data(chunk(delta, Value::Null).to_string())]
                }
                Event::Error(e) => {
                    vec![SseEvent::default().data(json!({"error": {"message": e, "type": "server_error"}}).to_string())]
                }
                Event::GrammarFailed(e) => {
                    let error = json!({"message": e, "type": "invalid_request_error", "param": grammar_param});
                    vec![SseEvent::default().data(json!({ "error": error }).to_string())]
                }
                Event::Done { finish, usage } => {
                    let last = if chat {
                        json!({"index": 0, "delta": {}, "finish_reason": finish.label()})
                    } else {
                        json!({"index": 0, "text": "", "finish_reason": finish.label()})
                    };
                    let mut v = vec![SseEvent::default().data(chunk(last, Value::Null).to_string())];
                    if include_usage {
                        let u = json!({"id": id, "object": chunk_object, "created": created, "model": model, "choices": [], "usage": usage_json(&usage)});
                        v.push(SseEvent::default().data(u.to_string()));
                    }
                    v.push(SseEvent::default().data("[DONE]"));
                    v
                }
            };
            for e in events {
                if sse_tx.send(e).is_err() {
                    return;
                }
            }
        }
    });
    let flat = UnboundedReceiverStream::new(sse_rx).map(Ok::<_, Infallible>);
    Ok(Sse::new(flat).keep_alive(KeepAlive::default()).into_response())
}
