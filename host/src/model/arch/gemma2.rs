//! `gemma2` (Gemma 2): Gemma 3's blocks without its Q/K norms, with soft caps instead.
//! Embeddings scaled by √n_embd; RMS norms after attention and after the feed-forward as well
//! as before (the file's norm weights already carry Gemma's `1 + w`); a GELU-gated
//! feed-forward; output tied to the embeddings. Attention scores are soft-capped
//! (`attn_logit_softcapping`: `cap · tanh(s / cap)` after scaling) and so are the logits
//! (`final_logit_softcapping`). Every other layer, starting with the first, attends over a
//! sliding window (`attention.sliding_window` keys); all share one RoPE base. Queries are
//! scaled by 1/√head_dim, except in the 27B model (1/√(n_embd / n_head)). Layout and
//! constants as llama.cpp's `gemma2` graph reads the same files.

use super::{
    attention_block, dense_ffn_block, embed, output, read_hparams, Acts, AttentionKind, FfnGate, ProgramBuilder,
};
use crate::model::gguf::GgufFile;
use anyhow::{bail, Result};
use zinc_plugin_api::{AttentionSpan, ModelProgram, Op, RopeFreqs, RopeStyle};

/// Layers per repeat of the window pattern: the last of each attends over the whole context.
const WINDOW_PATTERN: u32 = 2;
/// Layers of Gemma 2 27B, whose queries are scaled by 1/√(n_embd / n_head).
const LAYERS_27B: u32 = 46;
/// The sliding window when the file does not name it (Gemma 2's, as llama.cpp assumes).
const WINDOW: u32 = 4096;
/// Soft caps when the file does not name them (Gemma 2's published values).
const ATTN_CAP: f32 = 50.0;
const FINAL_CAP: f32 = 30.0;

/// Builds the gemma2 program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    let arch = "gemma2";
    let key = |k: &str| format!("{arch}.{k}");
    let mut facts = read_hparams(f, arch, RopeStyle::Neox)?;
    let hp = &mut facts.hp;
    let cap = |k: &str, default: f32| -> Result<f32> {
        let v = f.get_f64(&key(k)).map_or(default, |v| v as f32);
        if !(v.is_finite() && v > 0.0) {
            bail!("{}: {} = {v}; a soft cap must be positive", f.path, key(k));
        }
        Ok(v)
    };
    hp.attn_logit_softcap = cap("attn_logit_softcapping", ATTN_CAP)?;
    let final_cap = cap("final_logit_softcapping", FINAL_CAP)?;
    let window = f.get(&key("attention.sliding_window")).and_then(|v| v.as_u64()).unwrap_or(WINDOW as u64) as u32;
    if window == 0 {
        bail!("{}: {} is zero; Gemma 2 needs its sliding window", f.path, key("attention.sliding_window"));
    }
    let n_ff = f.get_u64(&key("feed_forward_length"))? as u32;
    let mut b = ProgramBuilder::new(f, facts);
    let hp = b.hp.clone();
    // The kernels scale scores by 1/√head_dim, as Gemma 2 2B and 9B want (their
    // `query_pre_attn_scalar` is the head width, though n_embd / n_head is not); 27B's, the
    // one model of 46 layers, is n_embd / n_head, as llama.cpp decides it.
    if hp.n_layer == LAYERS_27B {
        b.query_scale *= (hp.head_dim as f32 / (hp.n_embd / hp.n_head) as f32).sqrt();
    }
    let a = Acts::new(&mut b);
    let (ff, ff2, normed) = (b.act(n_ff), b.act(n_ff), b.act(hp.n_embd));
    embed(&mut b, &a)?;
    b.op(Op::Scale { buf: a.x, factor: (hp.n_embd as f32).sqrt() });
    for layer in 0..hp.n_layer {
        let global = layer % WINDOW_PATTERN == WINDOW_PATTERN - 1;
        let kind = AttentionKind {
            qk_norm: false,
            freqs: RopeFreqs::Global,
            span: if global { AttentionSpan::Full } else { AttentionSpan::Window { keys: window } },
            qkv_bias: false,
        };
        attention_block(&mut b, &a, layer, kind, Some(normed))?;
        dense_ffn_block(&mut b, &a, layer, (ff, ff2), FfnGate::Gelu, Some(normed))?;
    }
    output(&mut b, &a, Some(final_cap))?;
    Ok(b.finish(arch))
}
