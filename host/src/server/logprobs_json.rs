//! Token log-probabilities in OpenAI's two response shapes: chat's `logprobs.content` (a list
//! of `{token, logprob, bytes, top_logprobs}`) and the legacy completions' parallel lists
//! (`tokens`, `token_logprobs`, `top_logprobs`, `text_offset`), which evaluation harnesses
//! read with `echo` to score a prompt.

use crate::{engine::logprobs::TokenLogprob, model::tokenizer::Tokenizer};
use serde_json::{json, Map, Value};

/// A token's text (control tokens spelled out, bytes that are not whole UTF-8 characters
/// replaced) and its bytes.
fn piece(tokenizer: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tokenizer.token_bytes(id, true);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// Chat's `logprobs.content` entries for `tokens`.
pub fn chat_content(tokenizer: &Tokenizer, tokens: &[TokenLogprob]) -> Vec<Value> {
    let entry = |id: u32, logprob: f32| {
        let (token, bytes) = piece(tokenizer, id);
        json!({"token": token, "logprob": logprob, "bytes": bytes})
    };
    tokens
        .iter()
        .map(|t| {
            let mut e = entry(t.token, t.logprob);
            e["top_logprobs"] = t.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
            e
        })
        .collect()
}

/// Completions' `logprobs` object, built token by token; `text_offset` counts characters of
/// the choice's text, which starts at `offset`.
#[derive(Default)]
pub struct CompletionLogprobs {
    tokens: Vec<Value>,
    token_logprobs: Vec<Value>,
    top_logprobs: Vec<Value>,
    text_offset: Vec<usize>,
    offset: usize,
}

impl CompletionLogprobs {
    /// The same lists, the offsets of later tokens counted from `offset`.
    pub fn continued_at(mut self, offset: usize) -> CompletionLogprobs {
        self.offset = offset;
        self
    }

    /// A token without a log-probability (an echoed prompt's first token).
    pub fn push_unscored(&mut self, tokenizer: &Tokenizer, id: u32) {
        let (text, _) = piece(tokenizer, id);
        self.add(text, Value::Null, Value::Null);
    }

    /// Scored tokens.
    pub fn extend(&mut self, tokenizer: &Tokenizer, scored: &[TokenLogprob]) {
        for t in scored {
            let top: Map<String, Value> = t.top.iter().map(|&(id, lp)| (piece(tokenizer, id).0, json!(lp))).collect();
            self.add(piece(tokenizer, t.token).0, json!(t.logprob), Value::Object(top));
        }
    }

    fn add(&mut self, text: String, logprob: Value, top: Value) {
        self.text_offset.push(self.offset);
        self.offset += text.chars().count();
        self.tokens.push(Value::String(text));
        self.token_logprobs.push(logprob);
        self.top_logprobs.push(top);
    }

    /// The object for the tokens added since the last call; the offset carries on.
    pub fn take(&mut self) -> Value {
        json!({
            "tokens": std::mem::take(&mut self.tokens),
            "token_logprobs": std::mem::take(&mut self.token_logprobs),
            "top_logprobs": std::mem::take(&mut self.top_logprobs),
            "text_offset": std::mem::take(&mut self.text_offset),
        })
    }
}
