//! `qwen3moe`: qwen3 attention with a mixture-of-experts feed-forward ([`super::moe`]).

use super::moe::{moe_transformer, Experts};
use super::AttentionKind;
use crate::model::gguf::GgufFile;
use anyhow::{Context, Result};
use zinc_plugin_api::{ModelProgram, RopeStyle};

/// Builds the qwen3moe program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    let ex = Experts::read(f, "qwen3moe", "expert_feed_forward_length")?
        .with_context(|| format!("{}: qwen3moe.expert_count is missing or zero", f.path))?;
    moe_transformer(f, "qwen3moe", RopeStyle::Neox, AttentionKind::plain(true), ex)
}
