//! Byte-level BPE (GPT-2 style): bytes mapped to printable characters, words merged pair by
//! pair in the order of the merge list.

use super::{index_tokens, pretok::PreTokenizer};
use anyhow::Result;
use std::{collections::HashMap, sync::Mutex};

/// GPT-2's reversible byte → character table: printable bytes map to themselves, the rest to
/// characters from U+0100 on.
pub fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        table[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            n += 1;
            char::from_u32(255 + n).unwrap()
        };
    }
    table
}

/// The BPE model.
#[derive(Debug)]
pub struct Bpe {
    ids: HashMap<String, u32>,
    /// (left id, right id) → (merge rank, merged id).
    ranks: HashMap<(u32, u32), (u32, u32)>,
    /// Token id of each byte's character.
    byte_ids: [Option<u32>; 256],
    pre: PreTokenizer,
    to_char: [char; 256],
    to_byte: HashMap<char, u8>,
    cache: Mutex<HashMap<String, Vec<u32>>>,
}

const CACHE_LIMIT: usize = 50_000;

impl Bpe {
    /// Builds the model from the vocabulary, the merge list (`"a b"` per entry) and the
    /// pre-tokenizer name.
    pub fn new(tokens: &[String], merges: &[String], pre: &str) -> Result<Bpe> {
        let ids = index_tokens(tokens);
        let ranks = merges
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                let (a, b) = m.split_once(' ')?;
                let merged = ids.get(&format!("{a}{b}"))?;
                Some(((*ids.get(a)?, *ids.get(b)?), (i as u32, *merged)))
            })
            .collect();
        let to_char = byte_chars();
        let to_byte = to_char.iter().enumerate().map(|(b, &c)| (c, b as u8)).collect();
        let byte_ids = std::array::from_fn(|b| ids.get(&to_char[b].to_string()).copied());
        Ok(Bpe {
            ids,
            ranks,
            byte_ids,
            pre: PreTokenizer::for_name(pre)?,
            to_char,
            to_byte,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The id of a vocabulary entry.
    pub fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text).copied()
    }

    /// Encodes plain text (no special tokens) onto `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) {
        for word in self.pre.split(text) {
            if let Some(ids) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(word) {
                out.extend_from_slice(ids);
                continue;
            }
            let ids = self.encode_word(word);
            out.extend_from_slice(&ids);
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if cache.len() >= CACHE_LIMIT {
                cache.clear();
            }
            cache.insert(word.to_string(), ids);
        }
    }

    /// Merges the lowest-ranked adjacent pair, leftmost first, until no pair has a merge
    /// ([`super::merge`]), or takes the word whole where the family does and the vocabulary
    /// has it. Bytes whose character is missing from the vocabulary are dropped (no such GGUF
    /// vocabulary is known; byte-level vocabularies hold all 256).
    fn encode_word(&self, word: &str) -> Vec<u32> {
        if self.pre.whole_words {
            let chars: String = word.bytes().map(|b| self.to_char[b as usize]).collect();
            if let Some(&id) = self.ids.get(&chars) {
                return vec![id];
            }
        }
        let parts: Vec<u32> = word.bytes().filter_map(|b| self.byte_ids[b as usize]).collect();
        super::merge::merge(parts, |&l, &r| self.ranks.get(&(l, r)).copied())
    }

    /// The bytes of a vocabulary entry.
    pub fn decode(&self, text: &str) -> Vec<u8> {
        let mut out = Vec::with_capacity(text.len());
        for c in text.chars() {
            match self.to_byte.get(&c) {
                Some(&b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out
    }
}
