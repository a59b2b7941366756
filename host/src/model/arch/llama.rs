//! `llama` (SmolLM2 and the llama family): pre-norm attention with adjacent-pair RoPE and a
//! dense SwiGLU feed-forward; files with `llama.expert_count` (Mixtral) route each token to
//! experts instead ([`super::moe`]), their width in `llama.feed_forward_length`.

use super::moe::{moe_transformer, Experts};
use super::{dense_transformer, AttentionKind};
use crate::model::gguf::GgufFile;
use anyhow::Result;
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the llama program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    let attn = AttentionKind::plain(false);
    match Experts::read(f, "llama", "feed_forward_length")? {
        Some(ex) => moe_transformer(f, "llama", RopeStyle::Adjacent, attn, ex),
        None => dense_transformer(f, "llama", RopeStyle::Adjacent, attn),
    }
}
