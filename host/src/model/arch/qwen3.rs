//! `qwen3` (dense): like llama, plus a per-head RMS norm on Q and K before RoPE, and the
//! "neox" RoPE pairing.

use super::{attention_block, dense_ffn_block, embed, output, read_hparams, Acts, ProgramBuilder};
use crate::model::gguf::GgufFile;
use anyhow::Result;
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the qwen3 program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    let hp = read_hparams(f, "qwen3", RopeStyle::Neox)?;
    let n_ff = f.get_u64("qwen3.feed_forward_length")? as u32;
    let mut b = ProgramBuilder::new(f, hp.clone());
    let a = Acts::new(&mut b);
    let (ff, ff2) = (b.act(n_ff), b.act(n_ff));
    embed(&mut b, &a)?;
    for layer in 0..hp.n_layer {
        attention_block(&mut b, &a, layer, true)?;
        dense_ffn_block(&mut b, &a, layer, ff, ff2)?;
    }
    output(&mut b, &a)?;
    Ok(b.finish("qwen3"))
}
