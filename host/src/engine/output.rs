//! What becomes of each step's logits for one generation: the sampled token, the stop checks
//! (stop tokens, stop strings, `max_tokens`, the context's end) and the text streamed to the
//! client, with any tail that may still become a stop string held back. One type serves the
//! server's engine and `zinc run`, so both sample, stop and stream the same way.

use super::{
    constraint::Constraint,
    logprobs::{summary_logprob, token_logprob, TokenLogprob},
    request::Finish,
    sampler::{Sampler, SamplerConfig},
};
use crate::model::tokenizer::{StreamDecoder, Tokenizer};

/// The token facts the output stage needs, so that tests can stand in for a tokenizer.
pub trait TokenText {
    /// Whether `id` ends generation (end-of-sequence and end-of-turn tokens).
    fn is_stop(&self, id: u32) -> bool;
    /// The bytes `id` stands for in generated text.
    fn bytes(&self, id: u32) -> Vec<u8>;
}

impl TokenText for Tokenizer {
    fn is_stop(&self, id: u32) -> bool {
        Tokenizer::is_stop(self, id)
    }
    fn bytes(&self, id: u32) -> Vec<u8> {
        self.token_bytes(id, false)
    }
}

/// One row's logits as a step returned them: the whole row, or its summary
/// ([`zinc_plugin_api::LogitRows::LastTop`]).
#[derive(Debug, Clone, Copy)]
pub enum RowLogits<'a> {
    /// Every token's logit.
    Whole(&'a [f32]),
    /// The likeliest tokens (ids and logits, likeliest first) and the row's log-normaliser.
    Summary { ids: &'a [u32], logits: &'a [f32], norm: f32 },
}

/// What one step gave a generation.
#[derive(Debug, Default, PartialEq)]
pub struct Emitted {
    /// The token sampled, when it joins the text (a stop token does not).
    pub token: Option<u32>,
    /// Text to stream now (none while a possible stop string is held back).
    pub text: Option<String>,
    /// Why the generation ended, when it did.
    pub finish: Option<Finish>,
    /// Why the request's grammar failed, when that ended the generation.
    pub error: Option<String>,
    /// The token's log-probability under the model, when the generation reports them.
    pub logprob: Option<TokenLogprob>,
}

/// Limits of one generation.
#[derive(Debug, Clone, Default)]
pub struct OutputLimits {
    /// Stop strings: the text ends before the first one that appears.
    pub stop: Vec<String>,
    /// Tokens to generate at most.
    pub max_tokens: u32,
    /// Tokens the sequence may hold (prompt and output).
    pub max_context: u32,
    /// Generate past stop tokens (benchmarks).
    pub ignore_eos: bool,
    /// Report each token's log-probability with this many alternatives.
    pub logprobs: Option<u32>,
}

/// One generation's sampler, stop checks and streamed text.
pub struct OutputStage {
    sampler: Sampler,
    limits: OutputLimits,
    decoder: StreamDecoder,
    /// Text generated so far (stop strings included until cut).
    text: String,
    /// Bytes of `text` already streamed.
    emitted: usize,
    /// Where in `text` a stop string may still start: earlier starts were ruled out when the
    /// text was shorter, so each token searches only its tail (linear over a generation).
    stop_search_from: usize,
    generated: u32,
    /// The grammar the output must follow, if the request gave one.
    constraint: Option<Constraint>,
}

impl OutputStage {
    /// A stage for a generation sampled with `sampler` within `limits`.
    pub fn new(sampler: SamplerConfig, limits: OutputLimits) -> OutputStage {
        OutputStage {
            sampler: Sampler::new(sampler),
            limits,
            decoder: StreamDecoder::new(),
            text: String::new(),
            emitted: 0,
            stop_search_from: 0,
            generated: 0,
            constraint: None,
        }
    }

    /// The same stage, its tokens limited to what `constraint` allows.
    pub fn constrained(mut self, constraint: Option<Constraint>) -> OutputStage {
        self.constraint = constraint;
        self
    }

    /// Whether the next step can be sampled without waiting: always, unless the output's
    /// grammar is still computing the mask for it.
    pub fn ready(&self) -> bool {
        self.constraint.as_ref().is_none_or(Constraint::ready)
    }

    /// Whether a summary of the row's `candidates` likeliest tokens (of `n_vocab`) gives the
    /// same token and log-probabilities as the whole row: no grammar (its mask needs every
    /// token), a sampler that ranks within the candidates, and no more alternatives asked.
    pub fn summary_suffices(&self, candidates: usize, n_vocab: usize) -> bool {
        self.constraint.is_none()
            && self.sampler.summary_suffices(candidates, n_vocab)
            && self.limits.logprobs.is_none_or(|top| top as usize <= candidates)
    }

    /// Host time spent on the grammar's masks since the last call.
    pub fn take_mask_time(&mut self) -> std::time::Duration {
        self.constraint.as_mut().map_or(std::time::Duration::ZERO, Constraint::take_mask_time)
    }

    /// Tokens generated so far.
    pub fn generated(&self) -> u32 {
        self.generated
    }

    /// Samples the next token from `logits`; `history` is the prompt followed by the tokens
    /// generated so far (its last `generated()` entries), and gains the new token unless it
    /// is a stop token.
    /// A summary is only passed where [`OutputStage::summary_suffices`].
    pub fn step(&mut self, vocab: &dyn TokenText, row: RowLogits, history: &mut Vec<u32>) -> Emitted {
        let prompt_len =
            history.len().checked_sub(self.generated as usize).expect("history holds the generated tokens");
        let tok = match row {
            RowLogits::Whole(logits) => {
                let masked;
                let logits = match &mut self.constraint {
                    None => logits,
                    Some(c) => match c.mask(logits) {
                        Ok(m) => {
                            masked = m;
                            &masked
                        }
                        Err(e) => return self.fail(e),
                    },
                };
                self.sampler.sample(logits, history, &history[prompt_len..])
            }
            RowLogits::Summary { ids, logits, .. } => self.sampler.sample_summary(ids, logits),
        };
        if vocab.is_stop(tok) && (!self.limits.ignore_eos || self.constraint.is_some()) {
            return Emitted { token: None, text: self.flush(), finish: Some(Finish::Stop), ..Default::default() };
        }
        if let Some(Err(e)) = self.constraint.as_mut().map(|c| c.accept(tok)) {
            return self.fail(e);
        }
        self.generated += 1;
        history.push(tok);
        let logprob = self.limits.logprobs.map(|top| match row {
            RowLogits::Whole(raw) => token_logprob(raw, tok, top as usize),
            RowLogits::Summary { ids, logits, norm } => summary_logprob(ids, logits, norm, tok, top as usize),
        });
        let piece = self.decoder.push(&vocab.bytes(tok));
        self.text.push_str(&piece);
        if let Some(text) = self.stop_string() {
            return Emitted { token: Some(tok), text, finish: Some(Finish::Stop), error: None, logprob };
        }
        if self.generated >= self.limits.max_tokens || history.len() as u32 >= self.limits.max_context {
            let text = self.flush();
            return Emitted { token: Some(tok), text, finish: Some(Finish::Length), error: None, logprob };
        }
        let safe = self.text.len() - longest_stop_prefix(&self.text, &self.limits.stop);
        let text = (safe > self.emitted).then(|| self.text[self.emitted..safe].to_string());
        self.emitted = safe.max(self.emitted);
        Emitted { token: Some(tok), text, finish: None, error: None, logprob }
    }

    /// Ends the generation on an error: what was generated so far is streamed first.
    fn fail(&mut self, error: String) -> Emitted {
        Emitted { token: None, text: self.flush(), finish: Some(Finish::Stop), error: Some(error), logprob: None }
    }

    /// Whether the text now holds a stop string; if so, the text to stream before the first
    /// one, and the text ends there.
    fn stop_string(&mut self) -> Option<Option<String>> {
        let from = self.stop_search_from;
        let found = self.limits.stop.iter().filter_map(|s| self.text[from..].find(s.as_str()).map(|i| from + i)).min();
        // Every stop string starting before `len − (longest − 1)` lies within the text seen.
        let longest = self.limits.stop.iter().map(String::len).max().unwrap_or(0);
        let mut next = self.text.len().saturating_sub(longest.saturating_sub(1));
        while !self.text.is_char_boundary(next) {
            next -= 1;
        }
        self.stop_search_from = next.max(from);
        let at = found?;
        let text = (at > self.emitted).then(|| self.text[self.emitted..at].to_string());
        self.emitted = at.max(self.emitted);
        Some(text)
    }

    /// Everything not streamed yet, including bytes the decoder still holds (as U+FFFD where
    /// they end mid-character), cut before a stop string that those bytes complete.
    fn flush(&mut self) -> Option<String> {
        let rest = self.decoder.finish();
        self.text.push_str(&rest);
        if let Some(text) = self.stop_string() {
            return text;
        }
        let text = (self.text.len() > self.emitted).then(|| self.text[self.emitted..].to_string());
        self.emitted = self.text.len();
        text
    }
}

/// Length of the longest suffix of `text` that is a proper prefix of a stop string: text that
/// may still turn out to be a stop string, held back from the stream.
fn longest_stop_prefix(text: &str, stops: &[String]) -> usize {
    let mut best = 0;
    for s in stops {
        for (i, _) in s.char_indices().skip(1) {
            if text.ends_with(&s[..i]) {
                best = best.max(i);
            }
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A vocabulary of single characters: token `i` is byte `i`; token 0 is the stop token.
    struct Bytes;
    impl TokenText for Bytes {
        fn is_stop(&self, id: u32) -> bool {
            id == 0
        }
        fn bytes(&self, id: u32) -> Vec<u8> {
            vec![id as u8]
        }
    }

    /// Greedy logits that pick `tok`.
    fn pick(tok: u32) -> Vec<f32> {
        let mut l = vec![0f32; 256];
        l[tok as usize] = 10.0;
        l
    }

    fn greedy(stop: &[&str], max_tokens: u32, max_context: u32) -> OutputStage {
        let sampler = SamplerConfig { temperature: 0.0, ..Default::default() };
        let stop = stop.iter().map(|s| s.to_string()).collect();
        OutputStage::new(sampler, OutputLimits { stop, max_tokens, max_context, ..Default::default() })
    }

    /// Feeds `text` one byte per step after a one-token prompt; returns what was streamed,
    /// how it ended and the history.
    fn run(stage: &mut OutputStage, text: &str) -> (String, Option<Finish>, Vec<u32>) {
        let mut history = vec![b'p' as u32];
        let (streamed, finish) = run_on(stage, &mut history, text);
        (streamed, finish, history)
    }

    fn run_on(stage: &mut OutputStage, history: &mut Vec<u32>, text: &str) -> (String, Option<Finish>) {
        let mut streamed = String::new();
        for b in text.bytes() {
            let e = stage.step(&Bytes, RowLogits::Whole(&pick(b as u32)), history);
            streamed.push_str(e.text.as_deref().unwrap_or(""));
            if e.finish.is_some() {
                return (streamed, e.finish);
            }
        }
        (streamed, None)
    }

    #[test]
    fn stop_strings_end_the_text_before_them_and_partial_ones_are_held_back() {
        let mut s = greedy(&["END"], 100, 1000);
        let mut history = vec![1];
        let e = s.step(&Bytes, RowLogits::Whole(&pick(b'a' as u32)), &mut history);
        assert_eq!(e.text.as_deref(), Some("a"));
        let e = s.step(&Bytes, RowLogits::Whole(&pick(b'E' as u32)), &mut history);
        assert_eq!(e.text, None, "a possible stop string is held back");
        let (streamed, finish) = run_on(&mut s, &mut history, "NDx");
        assert_eq!((streamed.as_str(), finish), ("", Some(Finish::Stop)));
        let (streamed, finish, _) = run(&mut greedy(&["END"], 100, 1000), "abENx ENDy");
        assert_eq!((streamed.as_str(), finish), ("abENx ", Some(Finish::Stop)));
    }

    #[test]
    fn a_held_back_tail_is_streamed_when_a_stop_token_or_the_length_ends_the_text() {
        let (streamed, finish, history) = run(&mut greedy(&["END"], 100, 1000), "abE\0");
        assert_eq!((streamed.as_str(), finish), ("abE", Some(Finish::Stop)));
        assert_eq!(history.len(), 4, "the stop token does not join the history");
        let (streamed, finish, _) = run(&mut greedy(&["END"], 3, 1000), "abEND");
        assert_eq!((streamed.as_str(), finish), ("abE", Some(Finish::Length)));
    }

    #[test]
    fn the_context_ends_a_generation_as_its_length() {
        let (streamed, finish, history) = run(&mut greedy(&[], 100, 4), "abcdef");
        assert_eq!((streamed.as_str(), finish), ("abc", Some(Finish::Length)));
        assert_eq!(history.len(), 4);
    }

    #[test]
    fn ignore_eos_generates_past_stop_tokens() {
        let mut s = greedy(&[], 3, 1000);
        s.limits.ignore_eos = true;
        let (_, finish, history) = run(&mut s, "\0\0\0");
        assert_eq!(finish, Some(Finish::Length));
        assert_eq!(history, vec![b'p' as u32, 0, 0, 0]);
    }

    #[test]
    fn multi_byte_characters_stream_whole() {
        let mut s = greedy(&[], 100, 1000);
        let mut history = vec![1];
        let bytes = "é".as_bytes();
        assert_eq!(s.step(&Bytes, RowLogits::Whole(&pick(bytes[0] as u32)), &mut history).text, None);
        assert_eq!(s.step(&Bytes, RowLogits::Whole(&pick(bytes[1] as u32)), &mut history).text.as_deref(), Some("é"));
    }

    #[test]
    fn a_stop_string_spanning_many_tokens_and_characters_is_found() {
        let stop = "«end of the text»";
        let mut s = greedy(&[stop], 1000, 10_000);
        let text = format!("{}{stop}tail", "é and more ".repeat(40));
        let (streamed, finish, _) = run(&mut s, &text);
        assert_eq!(finish, Some(Finish::Stop));
        assert_eq!(streamed, "é and more ".repeat(40));
    }

    /// Found by the output_stage fuzz target: bytes the decoder held at the end become U+FFFD,
    /// which a stop string may hold.
    #[test]
    fn the_text_released_at_the_end_is_cut_at_a_stop_string_too() {
        let mut s = greedy(&["\u{FFFD}"], 3, 1000);
        let mut history = vec![1];
        let mut streamed = String::new();
        for b in [b'a', b'b', 0xC3] {
            let e = s.step(&Bytes, RowLogits::Whole(&pick(b as u32)), &mut history);
            streamed.push_str(e.text.as_deref().unwrap_or(""));
        }
        assert_eq!(streamed, "ab");
    }

    #[test]
    fn stop_prefixes_are_held_back() {
        let stops = vec!["END".to_string(), "\n\n".to_string()];
        assert_eq!(longest_stop_prefix("hello E", &stops), 1);
        assert_eq!(longest_stop_prefix("hello EN", &stops), 2);
        assert_eq!(longest_stop_prefix("hello\n", &stops), 1);
        assert_eq!(longest_stop_prefix("hello", &stops), 0);
    }
}
