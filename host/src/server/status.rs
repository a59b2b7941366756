//! `GET /` (the built-in page) and `GET /v1/status` (the numbers it draws).
//!
//! The page is one HTML file with its script and styles inline, embedded in the binary, so it
//! works offline and names no other host. It chats through `/v1/chat/completions` like any
//! client, and polls `/v1/status` for the live view of the shared runtime.
//!
//! `/v1/status` never holds prompts or outputs. Its aggregate figures (requests, KV pages,
//! prefix cache, tokens, latency sums) cover the whole server; its per-tenant rows cover every
//! tenant for the operators' key (or an open server) and only the caller's own tenant for a
//! tenant's key.

use super::{api::ApiError, routes::bearer, AppState};
use axum::{
    extract::State,
    http::{header, HeaderMap},
    response::{Html, IntoResponse, Response},
    Json,
};
use serde_json::{json, Value};
use std::sync::Arc;

/// The page: chat and live runtime view.
const PAGE: &str = include_str!("page.html");

/// `GET /`.
pub async fn page() -> Response {
    ([(header::CACHE_CONTROL, "no-store")], Html(PAGE)).into_response()
}

/// `GET /v1/status`.
pub async fn status(State(st): State<Arc<AppState>>, headers: HeaderMap) -> Result<Response, ApiError> {
    let key = bearer(&headers);
    let all_tenants = st.tenants.is_admin(key);
    let own = if all_tenants { None } else { Some(st.tenants.authenticate(key).ok_or_else(ApiError::unauthorized)?) };
    let s = st.stats_snapshot();
    let mut names: Vec<&String> = s.tenants.keys().filter(|n| own.is_none_or(|t| &t.spec.name == *n)).collect();
    names.sort();
    let tenants: Vec<Value> = names
        .iter()
        .map(|n| {
            let t = &s.tenants[*n];
            json!({
                "name": n, "running": t.running, "waiting": t.waiting, "kv_pages": t.pages,
                "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens,
                "cached_prompt_tokens": t.cached_tokens, "requests": t.requests, "rejected": t.rejected,
            })
        })
        .collect();
    let (prompt, completion) =
        s.tenants.values().fold((0u64, 0u64), |(p, c), t| (p + t.prompt_tokens, c + t.completion_tokens));
    let hist = |h: &crate::engine::stats::Histogram| json!({"count": h.count, "sum_s": h.sum});
    Ok(Json(json!({
        "model": st.model.name,
        "backend": s.backend_name,
        "device": s.device_name,
        "scope": if all_tenants { "all" } else { "tenant" },
        "tenant": own.map(|t| t.spec.name.clone()),
        "tenants_file": !st.tenants.open,
        "requests": {"running": s.running(), "waiting": s.waiting()},
        "kv_pages": {
            "total": s.kv_pages_total,
            "used": s.kv_pages_used,
            "cached": s.kv_pages_cached,
            "free": s.kv_pages_total.saturating_sub(s.kv_pages_used + s.kv_pages_cached),
            "page_tokens": st.page_size,
        },
        "kv_window_pages": {"total": s.kv_window_pages_total, "used": s.kv_window_pages_used},
        "prefix_cache": {"queries": s.prefix_queries, "hits": s.prefix_hits},
        // Prompt and completion tokens of finished requests; tokens generated so far, finished
        // or not, are every stream's first token plus each later one (one latency sample each).
        "tokens": {"prompt": prompt, "completion": completion, "generated": s.ttft.count + s.itl.count},
        "latency": {"time_to_first_token": hist(&s.ttft), "inter_token": hist(&s.itl)},
        "steps": s.steps,
        "preemptions": s.preemptions,
        "failovers": s.failovers,
        "tenants": tenants,
    }))
    .into_response())
}
