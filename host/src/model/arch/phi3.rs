//! `phi3` (Phi-3 mini and medium): llama's blocks with the Q, K and V rows fused in one matrix
//! (`attn_qkv`) and the gate and up rows in another (`ffn_up`), read as row ranges of them
//! ([`super::ProgramBuilder::tensor_rows`]), and the "neox" RoPE pairing, as llama.cpp's
//! `phi3` graph reads the same files. Like llama.cpp, zinc attends over the whole context
//! where a file names a sliding window (`phi3.attention.sliding_window`). LongRoPE files
//! (`rope_factors_long` and `_short`: Phi-3's 128k variants, Phi-4 mini) are refused.

use super::{dense_transformer, AttentionKind};
use crate::model::gguf::GgufFile;
use anyhow::{bail, Result};
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the phi3 program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    if f.tensor("rope_factors_long.weight").is_some() || f.tensor("rope_factors_short.weight").is_some() {
        bail!(
            "{}: this phi3 file scales RoPE with LongRoPE factors (rope_factors_long / rope_factors_short, \
             as Phi-3's 128k variants and Phi-4 mini do), which zinc does not apply yet; a 4k variant runs",
            f.path
        );
    }
    dense_transformer(f, "phi3", RopeStyle::Neox, AttentionKind::plain(false))
}
