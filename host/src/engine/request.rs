//! What flows into the engine (requests) and out of it (events), and per-request usage.

use super::{constraint::Constraint, kv::PromptPages, logprobs::TokenLogprob, sampler::SamplerConfig};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

/// Priority classes, most urgent first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Band {
    /// Someone is waiting on the answer (editor, chat page).
    Interactive = 0,
    /// Throughput work (indexers, summarisers).
    Batch = 1,
}

impl Band {
    /// Parses `interactive` or `batch`.
    pub fn parse(s: &str) -> Option<Band> {
        match s {
            "interactive" => Some(Band::Interactive),
            "batch" => Some(Band::Batch),
            _ => None,
        }
    }
    /// The label used in configuration, metrics and errors.
    pub fn label(self) -> &'static str {
        match self {
            Band::Interactive => "interactive",
            Band::Batch => "batch",
        }
    }
}

/// Why generation ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// A stop token or stop string.
    Stop,
    /// `max_tokens` or the context ran out.
    Length,
    /// The client went away or the server is shutting down.
    Cancelled,
}

impl Finish {
    /// OpenAI's spelling.
    pub fn label(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
            Finish::Cancelled => "cancelled",
        }
    }
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Generated tokens.
    pub completion_tokens: u32,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u32,
}

/// Events sent back to the request's HTTP handler.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// New text (whole UTF-8 characters; may be empty while a stop string is pending).
    Text(String),
    /// Log-probabilities of generated tokens (requests that asked for them), sent before
    /// the text those tokens add.
    Logprobs(Vec<TokenLogprob>),
    /// Log-probabilities of prompt tokens from the second on, in order (requests that asked
    /// for their prompt scored), sent as prompt chunks are computed.
    PromptLogprobs(Vec<TokenLogprob>),
    /// The request ended.
    Done { finish: Finish, usage: Usage },
    /// The request failed inside the engine.
    Error(String),
    /// The request's output grammar failed part-way (over llguidance's per-token limits, say):
    /// the client's grammar is at fault, not the server.
    GrammarFailed(String),
}

/// A request as the server hands it to the engine.
#[derive(Debug)]
pub struct Request {
    /// Unique id.
    pub id: u64,
    /// Tenant index.
    pub tenant: u32,
    /// Priority class.
    pub band: Band,
    /// Prompt tokens.
    pub prompt: Vec<u32>,
    /// Tokens of a declared shared prefix at the start of `prompt` (0 if none).
    pub shared_prefix: usize,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// Sampling settings.
    pub sampler: SamplerConfig,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Keep generating past end-of-sequence tokens.
    pub ignore_eos: bool,
    /// Report each generated token's log-probability with this many alternatives.
    pub logprobs: Option<u32>,
    /// Score the prompt: each prompt token's log-probability (from the second token on)
    /// with this many alternatives. Such a request computes its whole prompt (no prefix
    /// cache), and with `max_tokens` 0 it ends when the prompt is scored.
    pub prompt_logprobs: Option<u32>,
    /// The grammar the output must follow (compiled on the HTTP side); the engine moves it
    /// into the request's output stage when the request is admitted.
    pub constraint: Option<Constraint>,
    /// Where events go; a closed channel means the client disconnected.
    pub events: UnboundedSender<Event>,
    /// When the server accepted it.
    pub arrived: Instant,
}

impl Request {
    /// Its prompt as the prefix cache keys it.
    pub fn prompt_pages(&self) -> PromptPages<'_> {
        PromptPages { tokens: &self.prompt, tenant: self.tenant, shared_prefix: self.shared_prefix }
    }
}
