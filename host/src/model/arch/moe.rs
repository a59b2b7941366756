//! Decoders whose feed-forward is a mixture of experts: qwen3moe files, and llama files with
//! experts (Mixtral). Both route the same way: softmax over every expert's router logit, the
//! top k, their weights renormalised to sum to one, and no shared expert.

use super::{attention_block, embed, output, read_hparams, Acts, AttentionKind, ProgramBuilder};
use crate::model::gguf::GgufFile;
use anyhow::{bail, Result};
use zinc_plugin_api::{ModelProgram, Op, RopeStyle};

/// A layer's experts: how many there are, how many each token uses, and their feed-forward
/// width.
#[derive(Debug, Clone, Copy)]
pub struct Experts {
    /// Experts per layer.
    pub n_expert: u64,
    /// Experts each token is routed to.
    pub n_used: u64,
    /// Each expert's feed-forward width.
    pub ff: u64,
}

impl Experts {
    /// Reads `{arch}.expert_count` and `{arch}.expert_used_count`, the width from `ff_key`;
    /// `None` where the file has no experts, an error where the routing is not valid.
    pub fn read(f: &GgufFile, arch: &str, ff_key: &str) -> Result<Option<Experts>> {
        let key = |k: &str| format!("{arch}.{k}");
        let n_expert = f.get(&key("expert_count")).and_then(|v| v.as_u64()).unwrap_or(0);
        if n_expert == 0 {
            return Ok(None);
        }
        let n_used = f.get_u64(&key("expert_used_count"))?;
        let ff = f.get_u64(&key(ff_key))?;
        if n_used == 0 || n_used > n_expert || n_expert > 1024 || ff == 0 {
            bail!("{}: {n_used} of {n_expert} experts of width {ff} is not a valid routing", f.path);
        }
        Ok(Some(Experts { n_expert, n_used, ff }))
    }
}

/// Embedding, `n_layer` × (attention, routed feed-forward), output.
pub fn moe_transformer(
    f: &GgufFile,
    arch: &str,
    rope: RopeStyle,
    attn: AttentionKind,
    ex: Experts,
) -> Result<ModelProgram> {
    let mut b = ProgramBuilder::new(f, read_hparams(f, arch, rope)?);
    let hp = b.hp.clone();
    let a = Acts::new(&mut b);
    let e = hp.n_embd as u64;
    embed(&mut b, &a)?;
    for layer in 0..hp.n_layer {
        attention_block(&mut b, &a, layer, attn, None)?;
        let p = |n: &str| format!("blk.{layer}.{n}.weight");
        let norm = b.tensor(&p("ffn_norm"), &[e])?;
        let router = b.tensor(&p("ffn_gate_inp"), &[e, ex.n_expert])?;
        let gate = b.tensor(&p("ffn_gate_exps"), &[e, ex.ff, ex.n_expert])?;
        let up = b.tensor(&p("ffn_up_exps"), &[e, ex.ff, ex.n_expert])?;
        let down = b.tensor(&p("ffn_down_exps"), &[ex.ff, e, ex.n_expert])?;
        b.op(Op::RmsNorm { input: a.x, weight: norm, out: a.xn });
        b.op(Op::Moe {
            input: a.xn,
            router,
            gate_exps: gate,
            up_exps: up,
            down_exps: down,
            n_used: ex.n_used as u32,
            out: a.o,
        });
        b.op(Op::Add { a: a.x, b: a.o, out: a.x });
    }
    output(&mut b, &a, None)?;
    Ok(b.finish(arch))
}
