//! `llama` (SmolLM2 and the llama family): pre-norm attention with adjacent-pair RoPE and a
//! dense SwiGLU feed-forward.

use super::{dense_transformer, AttentionKind};
use crate::model::gguf::GgufFile;
use anyhow::Result;
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the llama program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    dense_transformer(f, "llama", RopeStyle::Adjacent, AttentionKind::plain(false))
}
