//! SentencePiece-style BPE as llama-family GGUF files describe it: pieces merged by highest
//! score, spaces written as `▁`, unknown pieces spelled out as `<0xXX>` byte tokens.

use super::{index_tokens, token_type};
use std::collections::HashMap;

/// The SentencePiece model.
#[derive(Debug)]
pub struct Spm {
    ids: HashMap<String, u32>,
    scores: Vec<f32>,
    byte_tokens: [Option<u32>; 256],
    unk: Option<u32>,
    add_space_prefix: bool,
}

impl Spm {
    /// Builds the model from the vocabulary, scores and token types.
    pub fn new(tokens: &[String], scores: Vec<f32>, types: &[i32], add_space_prefix: bool) -> Spm {
        let ids = index_tokens(tokens);
        let byte_tokens = std::array::from_fn(|b| ids.get(&format!("<0x{b:02X}>")).copied());
        let unk = types.iter().position(|&t| t == token_type::UNKNOWN).map(|i| i as u32);
        Spm { ids, scores, byte_tokens, unk, add_space_prefix }
    }

    /// The id of a vocabulary entry.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Encodes plain text onto `out`; `at_start` says whether this is the text's beginning
    /// (where the space prefix goes).
    pub fn encode(&self, text: &str, at_start: bool, out: &mut Vec<u32>) {
        let mut s = String::with_capacity(text.len() + 3);
        if at_start && self.add_space_prefix {
            s.push('▁');
        }
        s.push_str(&text.replace(' ', "▁"));
        // Symbols as byte ranges of `s`, merged pairwise by best score, leftmost among equals.
        let syms: Vec<(usize, usize)> = s.char_indices().map(|(i, c)| (i, i + c.len_utf8())).collect();
        let syms = super::merge::merge(syms, |&(a, _), &(_, b)| {
            let id = *self.ids.get(&s[a..b])?;
            Some((HigherFirst(self.scores[id as usize]), (a, b)))
        });
        for (a, b) in syms {
            let piece = &s[a..b];
            match self.ids.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for byte in piece.bytes() {
                        if let Some(id) = self.byte_tokens[byte as usize].or(self.unk) {
                            out.push(id)
                        }
                    }
                }
            }
        }
    }

    /// The bytes of a vocabulary entry.
    pub fn decode(&self, text: &str) -> Vec<u8> {
        if let Some(hex) = text.strip_prefix("<0x").and_then(|t| t.strip_suffix('>')) {
            if let Ok(b) = u8::from_str_radix(hex, 16) {
                return vec![b];
            }
        }
        text.replace('▁', " ").into_bytes()
    }
}

/// A score ordered so that higher scores come first.
#[derive(PartialEq)]
struct HigherFirst(f32);

impl Eq for HigherFirst {}

impl PartialOrd for HigherFirst {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HigherFirst {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0)
    }
}
