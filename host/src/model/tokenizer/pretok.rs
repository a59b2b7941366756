//! Pre-tokenizers: regex chains that split text into words before BPE, chosen by
//! `tokenizer.ggml.pre` as llama.cpp's `llama-vocab.cpp` does.

use anyhow::{bail, Result};
use fancy_regex::Regex;

const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A chain of splitting regexes, applied in order to every piece, and whether the family takes
/// a word the vocabulary holds whole.
#[derive(Debug)]
pub struct PreTokenizer {
    chain: Vec<Regex>,
    /// Llama 3's tokenizer emits a word that is itself a vocabulary entry as that token, without
    /// merging (llama.cpp's `ignore_merges`); a vocabulary can hold words its merges never build.
    pub whole_words: bool,
}

impl PreTokenizer {
    /// The pre-tokenizer for a `tokenizer.ggml.pre` value.
    pub fn for_name(pre: &str) -> Result<PreTokenizer> {
        let (exprs, whole_words): (&[&str], bool) = match pre {
            "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
                (&[r"\p{N}", GPT2], false)
            }
            "default" | "gpt-2" | "gpt2" | "mpt" | "olmo" | "jais" => (&[GPT2], false),
            "qwen2" | "qwen35" | "stablelm2" | "deepseek-r1-qwen" => (&[QWEN2], false),
            "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" => (&[LLAMA3], true),
            other => {
                bail!("pre-tokenizer `{other}` is not supported; zinc knows smollm, gpt2, qwen2 and llama3 families")
            }
        };
        let chain = exprs.iter().map(|e| Regex::new(e).expect("built-in regex compiles")).collect();
        Ok(PreTokenizer { chain, whole_words })
    }

    /// Splits `text` into words: each regex splits every current piece into its matches and
    /// the gaps between them, as llama.cpp's `unicode_regex_split` does.
    pub fn split<'a>(&self, text: &'a str) -> Vec<&'a str> {
        let mut pieces = vec![text];
        for re in &self.chain {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let mut last = 0;
                for m in re.find_iter(piece) {
                    let Ok(m) = m else { break };
                    if m.start() > last {
                        next.push(&piece[last..m.start()]);
                    }
                    if m.end() > m.start() {
                        next.push(m.as_str());
                    }
                    last = m.end();
                }
                if last < piece.len() {
                    next.push(&piece[last..]);
                }
            }
            pieces = next;
        }
        pieces
    }
}
