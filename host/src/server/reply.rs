//! Replies: the engine's events for one request turned into OpenAI's response, whole or as a
//! server-sent event stream, with tool calls found in the text where the request offered tools.

use super::{
    api::{ApiError, Common},
    tool_calls::{calls_json, ToolStream},
    AppState,
};
use crate::{
    engine::request::{Event, Finish, Usage},
    model::tools::{ToolCall, ToolSyntax},
};
use axum::{
    http::StatusCode,
    response::{
        sse::{Event as SseEvent, KeepAlive, Sse},
        IntoResponse, Response,
    },
    Json,
};
use serde_json::{json, Value};
use std::{
    convert::Infallible,
    sync::{atomic::Ordering, Arc},
    time::{SystemTime, UNIX_EPOCH},
};
use tokio::sync::mpsc;
use tokio_stream::{wrappers::UnboundedReceiverStream, StreamExt};

/// Which endpoint a reply is for.
pub enum Kind {
    /// Chat, with the syntax of tool calls to look for in the reply where the request offers
    /// tools.
    Chat { tools: Option<ToolSyntax> },
    /// Completions.
    Completion,
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn usage_json(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.prompt_tokens,
        "completion_tokens": u.completion_tokens,
        "total_tokens": u.prompt_tokens + u.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cached_tokens},
    })
}

/// OpenAI's `finish_reason`: `tool_calls` where a reply that stopped by itself made calls.
fn finish_label(finish: Finish, calls: &[ToolCall]) -> &'static str {
    if finish == Finish::Stop && !calls.is_empty() {
        "tool_calls"
    } else {
        finish.label()
    }
}

/// The response to a request whose events arrive on `rx`.
pub async fn respond(
    st: Arc<AppState>,
    kind: Kind,
    c: &Common,
    rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let chat = matches!(kind, Kind::Chat { .. });
    let tools = match kind {
        Kind::Chat { tools } => tools,
        Kind::Completion => None,
    };
    let reply = ReplyIds {
        id: format!("{}-{}", if chat { "chatcmpl" } else { "cmpl" }, st.next_id.fetch_add(1, Ordering::Relaxed)),
        model: st.model.name.clone(),
        created: now(),
        chat,
        grammar_param: if c.grammar.is_some() { "grammar" } else { "response_format" },
    };
    if c.stream {
        Ok(stream(reply, tools, c.include_usage(), rx))
    } else {
        whole(reply, tools, rx).await
    }
}

/// What every chunk of one reply repeats.
struct ReplyIds {
    id: String,
    model: String,
    created: u64,
    chat: bool,
    /// The field an output-grammar failure names.
    grammar_param: &'static str,
}

async fn whole(
    r: ReplyIds,
    tools: Option<ToolSyntax>,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Error(e) => return Err(ApiError::internal(StatusCode::INTERNAL_SERVER_ERROR, e)),
            Event::GrammarFailed(e) => return Err(ApiError::bad(e, Some(r.grammar_param))),
            Event::Done { finish, usage } => {
                let choice = if !r.chat {
                    json!({"index": 0, "text": text, "finish_reason": finish.label(), "logprobs": Value::Null})
                } else {
                    let parsed = tools.map(|s| s.parse(&text)).filter(|p| !p.calls.is_empty());
                    let message = match &parsed {
                        None => json!({"role": "assistant", "content": text}),
                        Some(p) => json!({"role": "assistant",
                            "content": if p.content.is_empty() { Value::Null } else { Value::from(p.content.clone()) },
                            "tool_calls": calls_json(&p.calls, &r.id)}),
                    };
                    let calls = parsed.map(|p| p.calls).unwrap_or_default();
                    json!({"index": 0, "message": message, "finish_reason": finish_label(finish, &calls), "logprobs": Value::Null})
                };
                let object = if r.chat { "chat.completion" } else { "text_completion" };
                return Ok(Json(json!({"id": r.id, "object": object, "created": r.created, "model": r.model,
                                      "choices": [choice], "usage": usage_json(&usage)}))
                .into_response());
            }
        }
    }
    Err(ApiError::internal(StatusCode::SERVICE_UNAVAILABLE, "the engine stopped before the request finished"))
}

/// The stream's chunks for one engine event.
struct Chunker {
    r: ReplyIds,
    include_usage: bool,
    /// Whether the assistant role has been sent (chat sends it with the first delta).
    first: bool,
    /// Where the request offered tools: prose streams at once, calls at the end.
    tools: Option<ToolStream>,
}

impl Chunker {
    fn chunk(&self, choice: Value, usage: Value) -> SseEvent {
        let object = if self.r.chat { "chat.completion.chunk" } else { "text_completion" };
        let c = json!({"id": self.r.id, "object": object, "created": self.r.created, "model": self.r.model,
                       "choices": [choice], "usage": usage});
        SseEvent::default().data(c.to_string())
    }

    fn delta(&mut self, mut delta: Value) -> SseEvent {
        if self.first {
            delta["role"] = json!("assistant");
            self.first = false;
        }
        self.chunk(json!({"index": 0, "delta": delta, "finish_reason": Value::Null}), Value::Null)
    }

    fn text(&mut self, t: String) -> Vec<SseEvent> {
        if !self.r.chat {
            return vec![self.chunk(json!({"index": 0, "text": t, "finish_reason": Value::Null}), Value::Null)];
        }
        let content = match &mut self.tools {
            Some(s) => s.push(&t),
            None => Some(t),
        };
        content.map(|t| self.delta(json!({"content": t}))).into_iter().collect()
    }

    fn done(&mut self, finish: Finish, usage: Usage) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut calls = Vec::new();
        if let Some(s) = self.tools.take() {
            let (rest, found) = s.finish();
            if let Some(t) = rest {
                out.push(self.delta(json!({"content": t})));
            }
            for (i, call) in calls_json(&found, &self.r.id).into_iter().enumerate() {
                let mut call = call;
                call["index"] = json!(i);
                out.push(self.delta(json!({"tool_calls": [call]})));
            }
            calls = found;
        }
        let last = if self.r.chat {
            json!({"index": 0, "delta": {}, "finish_reason": finish_label(finish, &calls)})
        } else {
            json!({"index": 0, "text": "", "finish_reason": finish.label()})
        };
        out.push(self.chunk(last, Value::Null));
        if self.include_usage {
            let object = if self.r.chat { "chat.completion.chunk" } else { "text_completion" };
            let u = json!({"id": self.r.id, "object": object, "created": self.r.created, "model": self.r.model,
                           "choices": [], "usage": usage_json(&usage)});
            out.push(SseEvent::default().data(u.to_string()));
        }
        out.push(SseEvent::default().data("[DONE]"));
        out
    }

    fn events(&mut self, ev: Event) -> Vec<SseEvent> {
        match ev {
            Event::Text(t) => self.text(t),
            Event::Error(e) => {
                vec![SseEvent::default().data(json!({"error": {"message": e, "type": "server_error"}}).to_string())]
            }
            Event::GrammarFailed(e) => {
                let error = json!({"message": e, "type": "invalid_request_error", "param": self.r.grammar_param});
                vec![SseEvent::default().data(json!({ "error": error }).to_string())]
            }
            Event::Done { finish, usage } => self.done(finish, usage),
        }
    }
}

fn stream(
    r: ReplyIds,
    tools: Option<ToolSyntax>,
    include_usage: bool,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Response {
    let mut chunker = Chunker { r, include_usage, first: true, tools: tools.map(ToolStream::new) };
    // A relay task turns engine events into SSE events. It watches the client side too, so a
    // disconnect drops the engine's channel at once and the engine frees the pages next step.
    let (sse_tx, sse_rx) = mpsc::unbounded_channel::<SseEvent>();
    tokio::spawn(async move {
        loop {
            let ev = tokio::select! {
                _ = sse_tx.closed() => return,
                ev = rx.recv() => match ev { Some(ev) => ev, None => return },
            };
            for e in chunker.events(ev) {
                if sse_tx.send(e).is_err() {
                    return;
                }
            }
        }
    });
    let flat = UnboundedReceiverStream::new(sse_rx).map(Ok::<_, Infallible>);
    Sse::new(flat).keep_alive(KeepAlive::default()).into_response()
}
