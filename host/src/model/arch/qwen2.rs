//! `qwen2` (Qwen2, Qwen2.5, DeepSeek-R1-Distill-Qwen): llama's blocks with biases on the Q, K
//! and V products and the "neox" RoPE pairing, as llama.cpp's `qwen2` graph reads the same
//! files.

use super::{dense_transformer, AttentionKind};
use crate::model::gguf::GgufFile;
use anyhow::Result;
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the qwen2 program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    dense_transformer(f, "qwen2", RopeStyle::Neox, AttentionKind { qkv_bias: true, ..AttentionKind::plain(false) })
}
