//! `qwen3moe`: qwen3 attention with a mixture-of-experts feed-forward (softmax over all
//! experts, top k, weights renormalised, no shared expert).

use super::{attention_block, embed, output, read_hparams, Acts, AttentionKind, ProgramBuilder};
use crate::model::gguf::GgufFile;
use anyhow::{bail, Result};
use zinc_plugin_api::{ModelProgram, Op, RopeStyle};

/// Builds the qwen3moe program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    let hp = read_hparams(f, "qwen3moe", RopeStyle::Neox)?;
    let n_expert = f.get_u64("qwen3moe.expert_count")?;
    let n_used = f.get_u64("qwen3moe.expert_used_count")?;
    let ff = f.get_u64("qwen3moe.expert_feed_forward_length")?;
    if n_used == 0 || n_used > n_expert || n_expert > 1024 {
        bail!("{}: {n_used} of {n_expert} experts is not a valid routing", f.path);
    }
    let mut b = ProgramBuilder::new(f, hp.clone());
    let a = Acts::new(&mut b);
    let e = hp.n_embd as u64;
    embed(&mut b, &a)?;
    for layer in 0..hp.n_layer {
        attention_block(&mut b, &a, layer, AttentionKind::plain(true), None)?;
        let p = |n: &str| format!("blk.{layer}.{n}.weight");
        let norm = b.tensor(&p("ffn_norm"), &[e])?;
        let router = b.tensor(&p("ffn_gate_inp"), &[e, n_expert])?;
        let gate = b.tensor(&p("ffn_gate_exps"), &[e, ff, n_expert])?;
        let up = b.tensor(&p("ffn_up_exps"), &[e, ff, n_expert])?;
        let down = b.tensor(&p("ffn_down_exps"), &[ff, e, n_expert])?;
        b.op(Op::RmsNorm { input: a.x, weight: norm, out: a.xn });
        b.op(Op::Moe {
            input: a.xn,
            router,
            gate_exps: gate,
            up_exps: up,
            down_exps: down,
            n_used: n_used as u32,
            out: a.o,
        });
        b.op(Op::Add { a: a.x, b: a.o, out: a.x });
    }
    output(&mut b, &a)?;
    Ok(b.finish("qwen3moe"))
}
