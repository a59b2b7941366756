//! Tokenizers built from GGUF metadata: byte-level BPE (`tokenizer.ggml.model = gpt2`) with
//! the model's pre-tokenizer, and SentencePiece-style BPE by score (`llama`) with byte
//! fallback. Special tokens are matched literally when the caller allows it; decoding streams
//! whole UTF-8 characters.

mod bpe;
mod merge;
mod pretok;
mod spm;
mod stream;

pub use stream::StreamDecoder;

use super::gguf::{GgufFile, Value};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;

/// Token types as GGUF stores them (`tokenizer.ggml.token_type`).
pub mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

#[derive(Debug)]
enum Model {
    Bpe(bpe::Bpe),
    Spm(spm::Spm),
}

/// A tokenizer for one model.
#[derive(Debug)]
pub struct Tokenizer {
    model: Model,
    tokens: Vec<String>,
    types: Vec<i32>,
    /// Control and user-defined tokens, for literal matching.
    specials: Vec<Special>,
    /// Each special token's index by its bytes.
    special_index: HashMap<Box<[u8]>, usize>,
    /// For each first byte, the lengths of the special tokens that begin with it, longest
    /// first (Gemma has 6,321 beginning with `<` but only 14 lengths of them).
    special_lengths: Vec<Vec<usize>>,
    /// Beginning-of-sequence token.
    pub bos: Option<u32>,
    /// End-of-sequence token.
    pub eos: Option<u32>,
    /// Whether a BOS token is prepended to every prompt.
    pub add_bos: bool,
    /// Tokens that end generation (EOS, EOT, `<|im_end|>` and the like).
    pub stop_tokens: Vec<u32>,
}

/// A control or user-defined token, matched literally in text.
#[derive(Debug)]
struct Special {
    text: String,
    id: u32,
    /// Control tokens (`<|im_start|>`) are matched only where special tokens are parsed;
    /// user-defined ones (Gemma's runs of spaces and tabs) always, as llama.cpp does.
    control: bool,
    /// Whitespace right after the token is dropped (Phi-3's special tokens: see
    /// [`rstrips_specials`]).
    rstrip: bool,
}

/// Whether the file is a Phi-3 model, whose special tokens strip the whitespace after them
/// (`rstrip` in its Hugging Face tokenizer; GGUF has no field for it). llama.cpp decides this
/// by the model's name, as zinc does so that a Phi-3 prompt gets the same tokens: every special
/// token but `<unk>`, `<s>` and `<|endoftext|>`.
fn rstrips_specials(f: &GgufFile) -> bool {
    let name = f.get("general.name").and_then(Value::as_str).unwrap_or("").to_lowercase();
    name.contains("phi-3") || name.contains("phi3")
}

fn string_array(f: &GgufFile, key: &str) -> Result<Vec<String>> {
    let arr = f.get(key).and_then(Value::as_array).with_context(|| format!("{}: {key} is missing", f.path))?;
    arr.iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect::<Option<Vec<_>>>()
        .with_context(|| format!("{}: {key} holds a non-string", f.path))
}

impl Tokenizer {
    /// Builds the tokenizer a GGUF file describes.
    pub fn from_gguf(f: &GgufFile) -> Result<Tokenizer> {
        let kind = f.get_str("tokenizer.ggml.model")?;
        let tokens = string_array(f, "tokenizer.ggml.tokens")?;
        if tokens.is_empty() || tokens.len() > u32::MAX as usize / 2 {
            bail!("{}: vocabulary has {} tokens", f.path, tokens.len());
        }
        let types: Vec<i32> = match f.get("tokenizer.ggml.token_type").and_then(Value::as_array) {
            Some(a) if a.len() == tokens.len() => a
                .iter()
                .map(|v| match v {
                    Value::I32(x) => *x,
                    other => other.as_u64().map_or(token_type::NORMAL, |x| x as i32),
                })
                .collect(),
            Some(a) => bail!("{}: token_type has {} entries for {} tokens", f.path, a.len(), tokens.len()),
            None => vec![token_type::NORMAL; tokens.len()],
        };
        let id = |key: &str| -> Result<Option<u32>> {
            match f.get(key).and_then(Value::as_u64) {
                None => Ok(None),
                Some(v) if (v as usize) < tokens.len() => Ok(Some(v as u32)),
                Some(v) => bail!("{}: {key} = {v} is outside the {}-token vocabulary", f.path, tokens.len()),
            }
        };
        let bos = id("tokenizer.ggml.bos_token_id")?;
        let eos = id("tokenizer.ggml.eos_token_id")?;
        let eot = id("tokenizer.ggml.eot_token_id")?;
        let model = match kind {
            "gpt2" => {
                let merges = string_array(f, "tokenizer.ggml.merges")?;
                let pre = f.get("tokenizer.ggml.pre").and_then(Value::as_str).unwrap_or("default");
                Model::Bpe(bpe::Bpe::new(&tokens, &merges, pre).with_context(|| f.path.to_string())?)
            }
            "llama" => {
                let scores: Vec<f32> = match f.get("tokenizer.ggml.scores").and_then(Value::as_array) {
                    Some(a) if a.len() == tokens.len() => a.iter().map(|v| v.as_f64().unwrap_or(0.0) as f32).collect(),
                    _ => bail!("{}: SentencePiece vocabulary needs tokenizer.ggml.scores per token", f.path),
                };
                let add_space = f.get("tokenizer.ggml.add_space_prefix").is_none_or(|v| v.as_u64() == Some(1));
                Model::Spm(spm::Spm::new(&tokens, scores, &types, add_space))
            }
            other => bail!("{}: tokenizer model `{other}` is not supported (gpt2 and llama are)", f.path),
        };
        let add_bos =
            f.get("tokenizer.ggml.add_bos_token").map_or(matches!(model, Model::Spm(_)), |v| v.as_u64() == Some(1));
        let phi3 = rstrips_specials(f);
        let mut specials: Vec<Special> = tokens
            .iter()
            .zip(&types)
            .enumerate()
            .filter(|(_, (t, ty))| !t.is_empty() && (**ty == token_type::CONTROL || **ty == token_type::USER_DEFINED))
            .map(|(i, (t, ty))| Special {
                text: t.clone(),
                id: i as u32,
                control: *ty == token_type::CONTROL,
                rstrip: phi3 && !["<unk>", "<s>", "<|endoftext|>"].contains(&t.as_str()),
            })
            .collect();
        // The first of duplicate texts wins.
        specials.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then(a.id.cmp(&b.id)));
        let mut stop_tokens: Vec<u32> = [eos, eot].into_iter().flatten().collect();
        for name in ["<|im_end|>", "<|eot_id|>", "<|endoftext|>", "<end_of_turn>", "<|end|>"] {
            if let Some(s) = specials.iter().find(|s| s.text == name) {
                if !stop_tokens.contains(&s.id) {
                    stop_tokens.push(s.id);
                }
            }
        }
        let mut special_index = HashMap::new();
        let mut special_lengths = vec![Vec::new(); 256];
        for (i, s) in specials.iter().enumerate() {
            special_index.entry(s.text.as_bytes().into()).or_insert(i);
            let lengths: &mut Vec<usize> = &mut special_lengths[s.text.as_bytes()[0] as usize];
            if !lengths.contains(&s.text.len()) {
                lengths.push(s.text.len());
            }
        }
        Ok(Tokenizer { model, tokens, types, specials, special_index, special_lengths, bos, eos, add_bos, stop_tokens })
    }

    /// The most bytes of text one token can stand for: a text longer than `n` times this cannot
    /// fit in `n` tokens, which the server checks before tokenizing a prompt (a chat template
    /// can render megabytes).
    pub fn max_token_bytes(&self) -> usize {
        (0..self.tokens.len() as u32).map(|id| self.token_bytes(id, true).len()).max().unwrap_or(1).max(1)
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The token's text as stored in the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// A token id by its exact vocabulary text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.specials.iter().find(|s| s.text == text).map(|s| s.id).or_else(|| match &self.model {
            Model::Bpe(b) => b.id(text),
            Model::Spm(s) => s.id(text),
        })
    }

    /// Encodes text. With `parse_special`, control tokens written in the text
    /// (`<|im_start|>`) become their ids; otherwise they are ordinary text. User-defined
    /// tokens become their ids either way, as in llama.cpp. Adds BOS when the model asks for
    /// it and `add_bos` is true.
    pub fn encode(&self, text: &str, add_bos: bool, parse_special: bool) -> Vec<u32> {
        if parse_special {
            self.encode_protected(text, add_bos, &[])
        } else {
            self.encode_parts(text, add_bos, |rest: &str| self.find_special(rest, |_, s| !s.control))
        }
    }

    /// Encodes text with control and user-defined tokens parsed, except control tokens that
    /// overlap a `protected` byte range: client text inside a rendered prompt cannot forge
    /// the template's turns, whatever it spells, while the template's own tokens around it
    /// are parsed.
    pub fn encode_protected(&self, text: &str, add_bos: bool, protected: &[std::ops::Range<usize>]) -> Vec<u32> {
        let base = text.as_ptr() as usize;
        self.encode_parts(text, add_bos, |rest: &str| {
            let offset = rest.as_ptr() as usize - base;
            self.find_special(rest, |at, s| {
                let (start, end) = (offset + at, offset + at + s.text.len());
                !s.control || !protected.iter().any(|r| start < r.end && r.start < end)
            })
        })
    }

    /// The first control token that `text` spells, if any.
    pub fn control_token_in<'t>(&self, text: &'t str) -> Option<&'t str> {
        self.find_special(text, |_, s| s.control).map(|(at, s)| &text[at..at + s.text.len()])
    }

    /// Encodes `text`, taking special tokens where `next_special(rest)` finds them (their
    /// offset in `rest`), and dropping the whitespace after those that strip it.
    fn encode_parts<'t>(
        &'t self,
        text: &str,
        add_bos: bool,
        next_special: impl Fn(&str) -> Option<(usize, &'t Special)>,
    ) -> Vec<u32> {
        let mut out = Vec::new();
        if add_bos && self.add_bos {
            out.extend(self.bos);
        }
        let mut rest = text;
        let mut first = true;
        while !rest.is_empty() {
            let next = next_special(rest);
            let (plain, special) = match next {
                Some((at, s)) => (&rest[..at], Some((at, s))),
                None => (rest, None),
            };
            if !plain.is_empty() {
                match &self.model {
                    Model::Bpe(b) => b.encode(plain, &mut out),
                    Model::Spm(s) => s.encode(plain, first, &mut out),
                }
            }
            first = false;
            match special {
                Some((at, s)) => {
                    out.push(s.id);
                    rest = &rest[at + s.text.len()..];
                    if s.rstrip {
                        // C's isspace, as llama.cpp strips.
                        rest = rest.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
                    }
                }
                None => break,
            }
        }
        out
    }

    /// The first special token written in `text` that `accept(offset, token)` takes, the
    /// longest one where several start at the same place, and its byte offset. One pass
    /// over the text with one lookup per length of the tokens that begin with the byte at
    /// hand, so that encoding stays linear in the text's length, however many special tokens
    /// the vocabulary has.
    fn find_special(&self, text: &str, accept: impl Fn(usize, &Special) -> bool) -> Option<(usize, &Special)> {
        let bytes = text.as_bytes();
        for (at, &b) in bytes.iter().enumerate() {
            // A match starts at a character boundary, since a token's first byte is never a
            // UTF-8 continuation byte.
            for &len in &self.special_lengths[b as usize] {
                let Some(candidate) = bytes.get(at..at + len) else { continue };
                if let Some(s) = self.special_index.get(candidate).map(|&i| &self.specials[i]) {
                    if accept(at, s) {
                        return Some((at, s));
                    }
                }
            }
        }
        None
    }

    /// The bytes a token stands for. Control tokens render as nothing unless `special`.
    pub fn token_bytes(&self, id: u32, special: bool) -> Vec<u8> {
        let Some(text) = self.tokens.get(id as usize) else { return Vec::new() };
        match self.types[id as usize] {
            token_type::CONTROL | token_type::UNUSED | token_type::UNKNOWN if !special => Vec::new(),
            token_type::CONTROL | token_type::USER_DEFINED => text.as_bytes().to_vec(),
            _ => match &self.model {
                Model::Bpe(b) => b.decode(text),
                Model::Spm(s) => s.decode(text),
            },
        }
    }

    /// Decodes a whole sequence (lossy for invalid UTF-8).
    pub fn decode(&self, ids: &[u32], special: bool) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&i| self.token_bytes(i, special)).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// True for control tokens (and unused or unknown ones): markup such as `<|im_start|>`
    /// that generated text never spells out.
    pub fn is_control(&self, id: u32) -> bool {
        matches!(self.types.get(id as usize), Some(&(token_type::CONTROL | token_type::UNUSED | token_type::UNKNOWN)))
    }

    /// True when `id` ends generation.
    pub fn is_stop(&self, id: u32) -> bool {
        self.stop_tokens.contains(&id)
    }
}

#[cfg(test)]
mod tests;

/// Builds a token → id map, keeping the first id of duplicated texts.
pub(crate) fn index_tokens(tokens: &[String]) -> HashMap<String, u32> {
    let mut m = HashMap::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        m.entry(t.clone()).or_insert(i as u32);
    }
    m
}
