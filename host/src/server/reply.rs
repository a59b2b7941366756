//! Replies: the engine's events for one request turned into OpenAI's response, whole or as a
//! server-sent event stream, with tool calls found in the text where the request offered tools.

use super::{
    api::{ApiError, Common, LogprobsAsk},
    logprobs_json::{chat_content, CompletionLogprobs},
    tool_calls::{calls_json, ToolStream},
    AppState,
};
use crate::{
    engine::{
        logprobs::TokenLogprob,
        request::{Event, Finish, Usage},
    },
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
use tokio_stream::{wrappers::ReceiverStream, StreamExt};

/// Server-sent events a streamed reply may have queued for its connection beyond what the
/// socket holds.
const STREAM_QUEUE: usize = 64;

/// Which endpoint a reply is for.
pub enum Kind {
    /// Chat, with the syntax of tool calls to look for in the reply where the request offers
    /// tools.
    Chat { tools: Option<ToolSyntax> },
    /// Completions, with the prompt to repeat before the completion where `echo` asked.
    Completion { echo: Option<Echo> },
}

/// An echoed prompt.
pub struct Echo {
    /// Its text (the request's, or its token ids' text).
    pub text: String,
    /// Its first token, which has no log-probability.
    pub first_token: u32,
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
    ask: LogprobsAsk,
    rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let chat = matches!(kind, Kind::Chat { .. });
    let (tools, echo) = match kind {
        Kind::Chat { tools } => (tools, None),
        Kind::Completion { echo } => (None, echo),
    };
    let reply = ReplyIds {
        id: format!("{}-{}", if chat { "chatcmpl" } else { "cmpl" }, st.next_id.fetch_add(1, Ordering::Relaxed)),
        model: st.model.name.clone(),
        created: now(),
        chat,
        grammar_param: if c.grammar.is_some() { "grammar" } else { "response_format" },
    };
    let logprobs = ask.generated.is_some();
    if c.stream {
        Ok(stream(st, reply, tools, c.include_usage(), logprobs, rx))
    } else {
        whole(&st, reply, tools, echo, logprobs, rx).await
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
    st: &AppState,
    r: ReplyIds,
    tools: Option<ToolSyntax>,
    echo: Option<Echo>,
    logprobs: bool,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Result<Response, ApiError> {
    let mut text = String::new();
    let (mut generated, mut prompt) = (Vec::new(), Vec::new());
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Text(t) => text.push_str(&t),
            Event::Logprobs(v) => generated.extend(v),
            Event::PromptLogprobs(v) => prompt.extend(v),
            Event::Error(e) => return Err(ApiError::internal(StatusCode::INTERNAL_SERVER_ERROR, e)),
            Event::GrammarFailed(e) => return Err(ApiError::bad(e, Some(r.grammar_param))),
            Event::Done { finish, usage } => {
                let tok = &st.model.tokenizer;
                let choice = if !r.chat {
                    let mut lp = CompletionLogprobs::default();
                    if let Some(e) = &echo {
                        lp.push_unscored(tok, e.first_token);
                        lp.extend(tok, &prompt);
                        // The completion's offsets follow the echoed text as sent.
                        lp = lp.continued_at(e.text.chars().count());
                        text.insert_str(0, &e.text);
                    }
                    lp.extend(tok, &generated);
                    let lp = if logprobs { lp.take() } else { Value::Null };
                    json!({"index": 0, "text": text, "finish_reason": finish.label(), "logprobs": lp})
                } else {
                    let parsed = tools.map(|s| s.parse(&text)).filter(|p| !p.calls.is_empty());
                    let message = match &parsed {
                        None => json!({"role": "assistant", "content": text}),
                        Some(p) => json!({"role": "assistant",
                            "content": if p.content.is_empty() { Value::Null } else { Value::from(p.content.clone()) },
                            "tool_calls": calls_json(&p.calls, &r.id)}),
                    };
                    let calls = parsed.map(|p| p.calls).unwrap_or_default();
                    let lp = logprobs.then(|| chat_logprobs(st, &generated));
                    json!({"index": 0, "message": message, "finish_reason": finish_label(finish, &calls), "logprobs": lp})
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

/// Chat's `logprobs` object for `tokens`.
fn chat_logprobs(st: &AppState, tokens: &[TokenLogprob]) -> Value {
    json!({"content": chat_content(&st.model.tokenizer, tokens), "refusal": Value::Null})
}

/// The stream's chunks for one engine event.
struct Chunker {
    st: Arc<AppState>,
    r: ReplyIds,
    include_usage: bool,
    /// Whether the request asked for log-probabilities.
    logprobs: bool,
    /// Log-probabilities of tokens whose text has not gone out yet (held back as a possible
    /// stop string, or as a tool call): they go with the next chunk that carries text.
    pending: Vec<TokenLogprob>,
    /// Completions' lists, for their text offsets across chunks.
    completion: CompletionLogprobs,
    /// Whether the assistant role has been sent (chat sends it with the first delta).
    first: bool,
    /// Where the request offered tools: prose streams at once, calls at the end.
    tools: Option<ToolStream>,
}

impl Chunker {
    /// The `logprobs` of a choice that carries the pending tokens' text.
    fn take_logprobs(&mut self) -> Value {
        if !self.logprobs {
            return Value::Null;
        }
        let pending = std::mem::take(&mut self.pending);
        if self.r.chat {
            chat_logprobs(&self.st, &pending)
        } else {
            self.completion.extend(&self.st.model.tokenizer, &pending);
            self.completion.take()
        }
    }

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
        let logprobs = self.take_logprobs();
        self.chunk(json!({"index": 0, "delta": delta, "finish_reason": Value::Null, "logprobs": logprobs}), Value::Null)
    }

    fn text(&mut self, t: String) -> Vec<SseEvent> {
        if !self.r.chat {
            let logprobs = self.take_logprobs();
            let choice = json!({"index": 0, "text": t, "finish_reason": Value::Null, "logprobs": logprobs});
            return vec![self.chunk(choice, Value::Null)];
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
        let logprobs = if self.pending.is_empty() { Value::Null } else { self.take_logprobs() };
        let last = if self.r.chat {
            json!({"index": 0, "delta": {}, "finish_reason": finish_label(finish, &calls), "logprobs": logprobs})
        } else {
            json!({"index": 0, "text": "", "finish_reason": finish.label(), "logprobs": logprobs})
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
            Event::Logprobs(v) => {
                self.pending.extend(v);
                Vec::new()
            }
            // Echo (the only way to ask for these) is refused with stream.
            Event::PromptLogprobs(_) => Vec::new(),
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
    st: Arc<AppState>,
    r: ReplyIds,
    tools: Option<ToolSyntax>,
    include_usage: bool,
    logprobs: bool,
    mut rx: mpsc::UnboundedReceiver<Event>,
) -> Response {
    let mut chunker = Chunker {
        st,
        r,
        include_usage,
        logprobs,
        pending: Vec::new(),
        completion: CompletionLogprobs::default(),
        first: true,
        tools: tools.map(ToolStream::new),
    };
    // A relay task turns engine events into SSE events. It watches the client side too, so a
    // disconnect drops the engine's channel at once and the engine frees the pages next step.
    // Its queue to the connection is bounded: a client that stops reading fills the socket's
    // buffers, then this queue, and once a send has waited `stream_stall` the relay gives up,
    // which cancels the request like a disconnect (instead of generating, and holding pages,
    // for a reader that is not there).
    let (sse_tx, sse_rx) = mpsc::channel::<SseEvent>(STREAM_QUEUE);
    let stall = chunker.st.stream_stall;
    tokio::spawn(async move {
        loop {
            let ev = tokio::select! {
                _ = sse_tx.closed() => return,
                ev = rx.recv() => match ev { Some(ev) => ev, None => return },
            };
            for e in chunker.events(ev) {
                match tokio::time::timeout(stall, sse_tx.send(e)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return,
                    Err(_) => {
                        tracing::info!("a streamed reply sat unread for {stall:?}; its request is cancelled");
                        chunker.st.stats.lock().unwrap_or_else(|e| e.into_inner()).streams_stalled += 1;
                        return;
                    }
                }
            }
        }
    });
    let flat = ReceiverStream::new(sse_rx).map(Ok::<_, Infallible>);
    Sse::new(flat).keep_alive(KeepAlive::default()).into_response()
}
