//! `qwen3` (dense): like llama, plus a per-head RMS norm on Q and K before RoPE, and the
//! "neox" RoPE pairing.

use super::{dense_transformer, AttentionKind};
use crate::model::gguf::GgufFile;
use anyhow::Result;
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the qwen3 program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    dense_transformer(f, "qwen3", RopeStyle::Neox, AttentionKind::plain(true))
}
