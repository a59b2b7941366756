//! Constrained decoding: a grammar — a JSON schema, "any JSON object", or a Lark grammar — that
//! the `llguidance` crate turns into the set of tokens allowed at each step. The output stage
//! masks the logits with it before sampling and feeds it every token it keeps, so whatever a
//! constrained stream generates parses under its grammar.
//!
//! Grammars are compiled on the HTTP side (a blocking task per request, bounded by
//! llguidance's limits), so a slow or refused schema costs its own request only; each
//! generation's masks are computed ahead on a thread of its own, bounded per token by the same
//! limits, and a stream whose mask is late sits out steps rather than holding up the others.

use crate::model::tokenizer::Tokenizer;
use anyhow::{Context, Result};
use llguidance::{
    api::{ParserLimits, TopLevelGrammar},
    toktrie::{ApproximateTokEnv, SimpleVob, TokRxInfo, TokTrie},
    Matcher, ParserFactory,
};
use serde_json::{json, Value};
use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Condvar, Mutex,
    },
    time::{Duration, Instant},
};

/// What a request asks its output to follow.
#[derive(Debug, Clone, PartialEq)]
pub enum Grammar {
    /// Any JSON object (`response_format: {"type": "json_object"}`).
    JsonObject,
    /// A JSON schema (`response_format: {"type": "json_schema", ...}`).
    JsonSchema(Value),
    /// A grammar in llguidance's Lark dialect (zinc's `grammar` extension field).
    Lark(String),
}

/// How JSON is laid out when a schema does not say (`x-guidance`): one line with a space after
/// each separator. Flexible whitespace lets a small model pad its answer with newlines until
/// `max_tokens` runs out; compact JSON is still valid JSON for every client.
fn json_layout() -> Value {
    json!({"whitespace_flexible": false, "item_separator": ", ", "key_separator": ": "})
}

impl Grammar {
    fn to_llguidance(&self) -> TopLevelGrammar {
        match self {
            Grammar::JsonObject => {
                TopLevelGrammar::from_json_schema(json!({"type": "object", "x-guidance": json_layout()}))
            }
            Grammar::JsonSchema(schema) => {
                let mut schema = schema.clone();
                if let Some(o) = schema.as_object_mut() {
                    o.entry("x-guidance").or_insert_with(json_layout);
                }
                TopLevelGrammar::from_json_schema(schema)
            }
            Grammar::Lark(text) => TopLevelGrammar::from_lark(text.clone()),
        }
    }
}

/// Compiles grammars for one model's vocabulary. Built once per model (its token trie holds
/// every token's bytes) and shared by every request.
pub struct GrammarCompiler {
    factory: ParserFactory,
}

/// Limits on one grammar: its size, the work to build its lexer, and the work per token
/// (llguidance's fuel, about 14k units a millisecond). A grammar over them is refused at
/// compile time or fails its stream with a message, and never stalls the engine.
fn limits() -> ParserLimits {
    ParserLimits {
        max_grammar_size: 200_000,
        initial_lexer_fuel: 1_000_000,
        step_lexer_fuel: 200_000,
        step_max_items: 50_000,
        max_lexer_states: 100_000,
        verbose_errors: false,
        ..ParserLimits::default()
    }
}

impl GrammarCompiler {
    /// The compiler for `tok`'s vocabulary: each token's text bytes, control tokens marked as
    /// special (a grammar never produces them), and the tokenizer's stop tokens as the way a
    /// finished grammar ends the text.
    pub fn new(tok: &Tokenizer) -> Result<GrammarCompiler> {
        let n = tok.vocab_size();
        let words: Vec<Vec<u8>> = (0..n as u32)
            .map(|id| {
                if tok.is_control(id) {
                    let mut w = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                    w.extend_from_slice(tok.token_text(id).unwrap_or("").as_bytes());
                    w
                } else {
                    tok.token_bytes(id, false)
                }
            })
            .collect();
        let stops = &tok.stop_tokens;
        let eos = tok.eos.or_else(|| stops.first().copied()).context("the model names no end-of-sequence token")?;
        let info = TokRxInfo::new(n as u32, eos);
        let mut trie = TokTrie::from(&info, &words);
        if !stops.is_empty() {
            trie = trie.with_eos_tokens(stops);
        }
        let env: llguidance::toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| anyhow::anyhow!("building the grammar tables for this vocabulary: {e}"))?;
        factory.quiet();
        *factory.limits_mut() = limits();
        Ok(GrammarCompiler { factory })
    }

    /// Compiles `grammar` for one generation; the error says what llguidance refused.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, String> {
        let g = grammar.to_llguidance();
        let parser = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.factory.create_parser(g)))
            .map_err(|_| "the grammar compiler failed on this grammar".to_string())?
            .map_err(|e| format!("{e}"))?;
        let mut matcher = Matcher::new(Ok(parser));
        // The first mask, here on the requester's side: a grammar that is over the per-token
        // limits from its first token (thousands of alternatives) is refused now, not as a
        // failure of the stream.
        let first = matcher.compute_mask().map_err(|e| e.to_string())?;
        if let Some(e) = matcher.get_error() {
            return Err(e);
        }
        Ok(Constraint::new(matcher, first))
    }
}

/// One generation's grammar state: which tokens may come next. The mask for the next token
/// is computed ahead, on a thread of the constraint's own, while the device runs the step
/// that produces the logits it will be applied to; the engine asks [`Constraint::ready`]
/// before sampling and lets a stream whose mask is late sit out steps instead of waiting.
pub struct Constraint {
    shared: Arc<Shared>,
}

/// The constraint's state and its thread's wake-up.
struct Shared {
    slot: Mutex<Slot>,
    wake: Condvar,
    /// The engine dropped the constraint: the thread ends (an atomic, so that dropping never
    /// waits for a mask being computed).
    closed: AtomicBool,
}

/// What the engine and the mask thread share.
struct Slot {
    matcher: Matcher,
    next: NextMask,
    /// Time spent computing masks not yet reported ([`Constraint::take_mask_time`]).
    mask_time: Duration,
}

/// The mask for the next token.
enum NextMask {
    /// Asked for; the thread is computing it (or about to).
    Wanted,
    /// Computed: the allowed tokens, or why the grammar failed.
    Ready(Result<SimpleVob, String>),
    /// Taken by a sample; the next one is asked for once a token is accepted.
    Taken,
}

fn compute(matcher: &mut Matcher) -> Result<SimpleVob, String> {
    matcher.compute_mask_or_eos().map_err(|e| format!("the output grammar failed: {e}"))
}

impl Constraint {
    fn new(matcher: Matcher, first: SimpleVob) -> Constraint {
        let slot = Slot { matcher, next: NextMask::Ready(Ok(first)), mask_time: Duration::ZERO };
        let shared = Arc::new(Shared { slot: Mutex::new(slot), wake: Condvar::new(), closed: AtomicBool::new(false) });
        let worker = shared.clone();
        let spawned = std::thread::Builder::new().name("zinc-grammar".into()).spawn(move || {
            let w = &*worker;
            let mut slot = w.slot.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                while !w.closed.load(Ordering::Acquire) && !matches!(slot.next, NextMask::Wanted) {
                    // A timeout, so that a drop whose wake-up came between the check and the
                    // wait still ends the thread.
                    slot = w.wake.wait_timeout(slot, Duration::from_millis(50)).unwrap_or_else(|e| e.into_inner()).0;
                }
                if w.closed.load(Ordering::Acquire) {
                    return;
                }
                // Computed with the lock held: the engine only ever try-locks before sampling,
                // so it never waits for this.
                let started = Instant::now();
                let mask = compute(&mut slot.matcher);
                slot.mask_time += started.elapsed();
                slot.next = NextMask::Ready(mask);
            }
        });
        if let Err(e) = spawned {
            // No thread: masks are computed on the engine's thread instead (`mask` does it).
            tracing::warn!("no thread for a grammar's masks ({e}); computing them in the step");
        }
        Constraint { shared }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.shared.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the next token's mask is computed (sampling would not wait).
    pub fn ready(&self) -> bool {
        match self.shared.slot.try_lock() {
            Ok(slot) => matches!(slot.next, NextMask::Ready(_)),
            Err(std::sync::TryLockError::Poisoned(p)) => matches!(p.into_inner().next, NextMask::Ready(_)),
            Err(std::sync::TryLockError::WouldBlock) => false,
        }
    }

    /// `logits` with every token the grammar forbids at this point set to −∞ (waiting for the
    /// mask if it is not ready). Once the grammar is complete only the stop tokens remain.
    pub fn mask(&mut self, logits: &[f32]) -> Result<Vec<f32>, String> {
        let allowed = {
            let mut slot = self.slot();
            match std::mem::replace(&mut slot.next, NextMask::Taken) {
                NextMask::Ready(m) => m,
                NextMask::Wanted | NextMask::Taken => compute(&mut slot.matcher),
            }
        }?;
        let mut out = logits.to_vec();
        let mut any = false;
        for (i, l) in out.iter_mut().enumerate() {
            if i < allowed.len() && allowed.is_allowed(i as u32) {
                any |= !l.is_nan() && *l != f32::NEG_INFINITY;
            } else {
                *l = f32::NEG_INFINITY;
            }
        }
        if !any {
            return Err("the output grammar allows no token here".into());
        }
        Ok(out)
    }

    /// Advances the grammar past `token`, which the last mask allowed, and has the next mask
    /// computed ahead.
    pub fn accept(&mut self, token: u32) -> Result<(), String> {
        let mut slot = self.slot();
        slot.matcher.consume_token(token).map_err(|e| format!("the output grammar failed: {e}"))?;
        slot.next = NextMask::Wanted;
        drop(slot);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Host time spent on this grammar's masks since the last call, for the tenant's share.
    pub fn take_mask_time(&mut self) -> Duration {
        match self.shared.slot.try_lock() {
            Ok(mut slot) => std::mem::take(&mut slot.mask_time),
            Err(_) => Duration::ZERO,
        }
    }
}

impl Drop for Constraint {
    fn drop(&mut self) {
        // Never waits: a thread busy on a mask sees the flag when it is done, an idle one at
        // its wake-up or its wait's timeout.
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint").field("ready", &self.ready()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::loaded::default_model_for_tests;

    /// Greedy decoding over hand-made logits: each step prefers `distractor` (prose the
    /// grammar must forbid) above all, then the token that continues `wanted` longest.
    fn drive(c: &mut Constraint, tok: &Tokenizer, wanted: &str, distractor: &str, steps: usize) -> String {
        let mut out = Vec::new();
        for _ in 0..steps {
            let rest = wanted.as_bytes().get(out.len()..).unwrap_or(&[]);
            let logits: Vec<f32> = (0..tok.vocab_size() as u32)
                .map(|id| {
                    let b = tok.token_bytes(id, false);
                    if b == distractor.as_bytes() {
                        100.0
                    } else if !b.is_empty() && rest.starts_with(&b) {
                        b.len() as f32
                    } else {
                        0.0
                    }
                })
                .collect();
            let masked = c.mask(&logits).unwrap();
            let t = crate::engine::sampler::argmax(&masked);
            if tok.is_stop(t) {
                break;
            }
            c.accept(t).unwrap();
            out.extend(tok.token_bytes(t, false));
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_schema_forces_its_shape_and_ends_with_a_stop_token() {
        let model = default_model_for_tests();
        let g = GrammarCompiler::new(&model.tokenizer).unwrap();
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
            "additionalProperties": false});
        let mut c = g.compile(&Grammar::JsonSchema(schema)).unwrap();
        // Without the mask, a newline would win every step (compact JSON has none, not even in
        // strings); the text ends by a stop token once
        // the object is closed, within the step budget.
        let text = drive(&mut c, &model.tokenizer, "{\"n\": 12}", "\n", 40);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"n": 12}), "{text}");
        let mut any = g.compile(&Grammar::JsonObject).unwrap();
        let text = drive(&mut any, &model.tokenizer, "{\"a\": [1, 2]}", "\n", 40);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), json!({"a": [1, 2]}), "{text}");
    }

    #[test]
    fn the_next_mask_is_computed_ahead_after_each_token() {
        let model = default_model_for_tests();
        let g = GrammarCompiler::new(&model.tokenizer).unwrap();
        let mut c = g.compile(&Grammar::JsonObject).unwrap();
        assert!(c.ready(), "the first mask comes from the compile");
        let logits = vec![0f32; model.tokenizer.vocab_size()];
        let allowed = c.mask(&logits).unwrap();
        let brace = (0..allowed.len()).find(|&i| allowed[i].is_finite()).unwrap() as u32;
        c.accept(brace).unwrap();
        // The thread computes the next mask; the engine would sample once `ready` says so.
        let t0 = Instant::now();
        while !c.ready() {
            assert!(t0.elapsed() < Duration::from_secs(10), "the mask thread never delivered");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(c.take_mask_time() > Duration::ZERO);
        assert!(c.mask(&logits).is_ok());
    }

    #[test]
    fn lark_grammars_and_refusals() {
        let model = default_model_for_tests();
        let g = GrammarCompiler::new(&model.tokenizer).unwrap();
        let mut c = g.compile(&Grammar::Lark("start: \"yes\" | \"no\"".into())).unwrap();
        assert_eq!(drive(&mut c, &model.tokenizer, "nope", "\n", 10), "no");
        assert!(g.compile(&Grammar::Lark("start: undefined_rule".into())).is_err());
        let e = g.compile(&Grammar::JsonSchema(json!({"type": "object", "$ref": "https://example.invalid/x.json"})));
        assert!(e.is_err());
    }
}
