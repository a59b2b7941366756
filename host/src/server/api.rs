//! The OpenAI-compatible request bodies zinc accepts, and its error shape.

use crate::engine::{constraint::Grammar, logprobs::MAX_TOP_LOGPROBS};
use axum::{
    http::{header, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// An error in OpenAI's JSON shape, with its HTTP status.
#[derive(Debug)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// OpenAI `type`.
    pub kind: &'static str,
    /// What went wrong and what to do.
    pub message: String,
    /// The offending parameter, when there is one.
    pub param: Option<String>,
    /// Seconds to wait before retrying (429).
    pub retry_after: Option<u32>,
}

impl ApiError {
    /// 400 invalid_request_error.
    pub fn bad(message: impl Into<String>, param: Option<&str>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            kind: "invalid_request_error",
            message: message.into(),
            param: param.map(str::to_string),
            retry_after: None,
        }
    }
    /// 401.
    pub fn unauthorized() -> ApiError {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            kind: "authentication_error",
            message:
                "missing or unknown API key: send `Authorization: Bearer KEY` with a key listed in the tenants file"
                    .into(),
            param: None,
            retry_after: None,
        }
    }
    /// 429 with Retry-After.
    pub fn busy(message: impl Into<String>, retry_after: u32) -> ApiError {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            kind: "rate_limit_error",
            message: message.into(),
            param: None,
            retry_after: Some(retry_after),
        }
    }
    /// 413.
    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "invalid_request_error",
            message: format!("request body exceeds {limit} bytes"),
            param: None,
            retry_after: None,
        }
    }
    /// 500 / 503.
    pub fn internal(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, kind: "server_error", message: message.into(), param: None, retry_after: None }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body =
            json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": Value::Null}});
        let mut r = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after {
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        r
    }
}

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// Longest stop string a request may give, in bytes: each is checked against the stream's
/// tail on the engine thread that serves every tenant, so its cost must stay bounded.
pub const MAX_STOP_BYTES: usize = 256;

/// Sampling and length fields shared by both endpoints.
#[derive(Debug, Clone, Deserialize)]
pub struct Common {
    /// Most tokens to generate.
    #[serde(alias = "max_completion_tokens")]
    pub max_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub min_p: Option<f32>,
    pub seed: Option<u64>,
    pub stop: Option<Stop>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    #[serde(default)]
    pub stream: bool,
    pub stream_options: Option<Value>,
    /// Number of choices; only 1 is supported.
    pub n: Option<u32>,
    /// zinc extension: `interactive` or `batch` (only as urgent as the tenant's class).
    pub priority: Option<String>,
    /// Extension (as in vLLM and llama-server): keep generating past end-of-sequence tokens,
    /// for benchmarks that need fixed-length outputs.
    #[serde(default)]
    pub ignore_eos: bool,
    /// Model name; any value is accepted (one model per server).
    pub model: Option<String>,
    /// `{"type": "text" | "json_object" | "json_schema", ...}`: the output's shape, enforced
    /// by constrained decoding.
    pub response_format: Option<Value>,
    /// zinc extension: a grammar in llguidance's Lark dialect that the output must follow
    /// (llama-server's field of this name takes GBNF, which this one does not read).
    pub grammar: Option<String>,
    /// Chat: `true` reports each generated token's log-probability. Completions: the number
    /// of alternatives (0–20) to list with each token's log-probability.
    pub logprobs: Option<Value>,
    /// Chat: alternatives (0–20) listed with each token's log-probability.
    pub top_logprobs: Option<u32>,
    /// Completions: the reply's text starts with the prompt; with `logprobs`, its tokens are
    /// scored too (with `max_tokens: 0`, only they: how evaluation harnesses score text).
    pub echo: Option<bool>,
    /// Everything else, checked against what zinc refuses.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a request asks to be told of token log-probabilities.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogprobsAsk {
    /// Each generated token's log-probability, with this many alternatives.
    pub generated: Option<u32>,
    /// The prompt repeated before the completion (completions).
    pub echo: bool,
}

impl LogprobsAsk {
    /// Whether, and with how many alternatives, the prompt's tokens are scored: an echoed
    /// prompt of a request that asked for log-probabilities.
    pub fn prompt(&self) -> Option<u32> {
        self.generated.filter(|_| self.echo)
    }
}

/// A chat message.
#[derive(Debug, Clone, Deserialize)]
pub struct Message {
    pub role: String,
    /// Null for an assistant message that only called tools.
    pub content: Option<Content>,
    /// An assistant message's calls (`[{id, type: "function", function: {name, arguments}}]`).
    pub tool_calls: Option<Vec<Value>>,
    /// A `tool` message's answer to this call.
    pub tool_call_id: Option<String>,
}

/// Message content: a string or text parts.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Part>),
}

/// A content part.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: Option<String>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// Functions the model may call (`[{type: "function", function: {name, description,
    /// parameters}}]`).
    pub tools: Option<Vec<Value>>,
    /// `auto`, `none`, `required` or `{type: "function", function: {name}}`.
    pub tool_choice: Option<Value>,
    /// Whether one reply may hold several calls (default true).
    pub parallel_tool_calls: Option<bool>,
    #[serde(flatten)]
    pub common: Common,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub prompt: Value,
    #[serde(flatten)]
    pub common: Common,
}

/// Fields zinc accepts and ignores (they change nothing it computes). Others that would change
/// the answer (`logit_bias`, `echo`, `suffix`, `best_of`, …) are refused unless they are set to
/// what changes nothing.
const IGNORED: &[&str] = &["user", "metadata", "store", "service_tier"];

impl Common {
    /// Refuses fields that would change the answer in ways zinc does not implement.
    pub fn check(&self) -> Result<(), ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad("only n = 1 is supported", Some("n")));
        }
        for (k, v) in &self.extra {
            if IGNORED.contains(&k.as_str()) {
                continue;
            }
            let harmless = v.is_null()
                || v == &Value::Bool(false)
                || v.as_array().is_some_and(|a| a.is_empty())
                || v.as_object().is_some_and(|o| o.is_empty())
                || v.as_str() == Some("")
                || (k == "best_of" && v.as_u64() == Some(1));
            if !harmless {
                return Err(ApiError::bad(format!("`{k}` is not supported by zinc"), Some(k)));
            }
        }
        if let Some(t) = self.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(ApiError::bad("temperature must be between 0 and 2", Some("temperature")));
            }
        }
        if let Some(p) = self.top_p {
            if !(p > 0.0 && p <= 1.0) {
                return Err(ApiError::bad("top_p must be in (0, 1]", Some("top_p")));
            }
        }
        if let Some(p) = self.min_p {
            if !(0.0..=1.0).contains(&p) {
                return Err(ApiError::bad("min_p must be in [0, 1]", Some("min_p")));
            }
        }
        for (name, v) in [("presence_penalty", self.presence_penalty), ("frequency_penalty", self.frequency_penalty)] {
            if v.is_some_and(|v| !(-2.0..=2.0).contains(&v)) {
                return Err(ApiError::bad(format!("{name} must be between -2 and 2"), Some(name)));
            }
        }
        if self.repetition_penalty.is_some_and(|v| !(v > 0.0 && v.is_finite())) {
            return Err(ApiError::bad("repetition_penalty must be a positive number", Some("repetition_penalty")));
        }
        if self.max_tokens == Some(0) && self.echo != Some(true) {
            return Err(ApiError::bad(
                "max_tokens must be at least 1 (0 only with echo, to score a prompt)",
                Some("max_tokens"),
            ));
        }
        let stop = self.stop_list();
        if stop.len() > 4 || stop.iter().any(|s| s.is_empty() || s.len() > MAX_STOP_BYTES) {
            return Err(ApiError::bad(
                format!("stop takes up to 4 non-empty strings of at most {MAX_STOP_BYTES} bytes each"),
                Some("stop"),
            ));
        }
        self.output_grammar()?;
        Ok(())
    }

    /// The grammar `response_format` or `grammar` asks the output to follow, if any.
    pub fn output_grammar(&self) -> Result<Option<Grammar>, ApiError> {
        let bad = |m: &str| ApiError::bad(m, Some("response_format"));
        let format = match &self.response_format {
            None | Some(Value::Null) => None,
            Some(f) => match f.get("type").and_then(Value::as_str) {
                Some("text") => None,
                Some("json_object") => Some(Grammar::JsonObject),
                Some("json_schema") => {
                    let spec = f.get("json_schema").ok_or_else(|| {
                        bad("response_format of type json_schema needs a `json_schema` object with a `schema`")
                    })?;
                    let schema = spec
                        .get("schema")
                        .filter(|s| s.is_object() || s.is_boolean())
                        .ok_or_else(|| bad("`response_format.json_schema.schema` must be a JSON schema object"))?;
                    Some(Grammar::JsonSchema(schema.clone()))
                }
                _ => return Err(bad("response_format.type must be text, json_object or json_schema")),
            },
        };
        match (format, &self.grammar) {
            (Some(_), Some(_)) => {
                Err(ApiError::bad("give either response_format or grammar, not both", Some("grammar")))
            }
            (None, Some(g)) if g.trim().is_empty() => Err(ApiError::bad("grammar is empty", Some("grammar"))),
            (None, Some(g)) => Ok(Some(Grammar::Lark(g.clone()))),
            (format, None) => Ok(format),
        }
    }

    /// What the request asks of log-probabilities, in the shape of the endpoint (`chat` or
    /// completions).
    pub fn logprobs_ask(&self, chat: bool) -> Result<LogprobsAsk, ApiError> {
        let range = |n: u64, param: &str| {
            u32::try_from(n)
                .ok()
                .filter(|&n| n <= MAX_TOP_LOGPROBS)
                .ok_or_else(|| ApiError::bad(format!("{param} must be between 0 and {MAX_TOP_LOGPROBS}"), Some(param)))
        };
        let echo = self.echo == Some(true);
        if echo && (chat || self.stream) {
            let why = if chat { "echo is a completions field" } else { "echo is supported without stream" };
            return Err(ApiError::bad(why, Some("echo")));
        }
        let generated = if chat {
            let on = match &self.logprobs {
                None | Some(Value::Null) | Some(Value::Bool(false)) => false,
                Some(Value::Bool(true)) => true,
                Some(_) => return Err(ApiError::bad("logprobs must be true or false", Some("logprobs"))),
            };
            match (on, self.top_logprobs) {
                (false, Some(n)) if n > 0 => {
                    return Err(ApiError::bad("top_logprobs needs logprobs: true", Some("top_logprobs")))
                }
                (false, _) => None,
                (true, n) => Some(range(n.unwrap_or(0) as u64, "top_logprobs")?),
            }
        } else {
            if self.top_logprobs.is_some_and(|n| n > 0) {
                return Err(ApiError::bad(
                    "top_logprobs is a chat field; completions take logprobs: N",
                    Some("top_logprobs"),
                ));
            }
            match &self.logprobs {
                None | Some(Value::Null) => None,
                Some(v) => Some(range(
                    v.as_u64().ok_or_else(|| {
                        ApiError::bad("logprobs must be a number of alternatives, 0 to 20", Some("logprobs"))
                    })?,
                    "logprobs",
                )?),
            }
        };
        Ok(LogprobsAsk { generated, echo })
    }

    /// The stop strings.
    pub fn stop_list(&self) -> Vec<String> {
        match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        }
    }

    /// Whether the final stream chunk should carry usage.
    pub fn include_usage(&self) -> bool {
        self.stream_options.as_ref().and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false)
    }
}

impl Message {
    /// The text of the message (empty where its content is null).
    pub fn text(&self) -> Result<String, ApiError> {
        match &self.content {
            None => Ok(String::new()),
            Some(Content::Text(s)) => Ok(s.clone()),
            Some(Content::Parts(parts)) => {
                let mut out = String::new();
                for p in parts {
                    if p.kind != "text" {
                        return Err(ApiError::bad(
                            format!("content parts of type `{}` are not supported", p.kind),
                            Some("messages"),
                        ));
                    }
                    out.push_str(p.text.as_deref().unwrap_or(""));
                }
                Ok(out)
            }
        }
    }
}
