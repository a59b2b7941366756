//! `phi3` (Phi-3 mini and medium): llama's blocks with the Q, K and V rows fused in one matrix
//! (`attn_qkv`) and the gate and up rows in another (`ffn_up`), read as row ranges of them
//! ([`super::ProgramBuilder::tensor_rows`]), and the "neox" RoPE pairing, as llama.cpp's
//! `phi3` graph reads the same files. Like llama.cpp, zinc attends over the whole context
//! where a file names a sliding window (`phi3.attention.sliding_window`). LongRoPE files
//! (Phi-3's 128k variants) run within their original context ([`super::rope_scaling`]).

use super::{dense_transformer, AttentionKind};
use crate::model::gguf::GgufFile;
use anyhow::Result;
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the phi3 program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    dense_transformer(f, "phi3", RopeStyle::Neox, AttentionKind::plain(false))
}
