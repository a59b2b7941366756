//! `gemma3` (Gemma 3, text): llama's blocks with Gemma's changes. Embeddings scaled by
//! √n_embd; per-head Q/K norms; RMS norms after attention and after the feed-forward as well
//! as before (the file's norm weights already carry Gemma's `1 + w`); a GELU-gated
//! feed-forward; output tied to the embeddings. Five of every six layers attend over a sliding
//! window (`attention.sliding_window` keys) with their own RoPE base; every sixth layer
//! attends over the whole context with `rope.freq_base`. Layout and constants as llama.cpp's
//! `gemma3` graph reads the same files.

use super::{
    attention_block, dense_ffn_block, embed, output, read_hparams, Acts, AttentionKind, FfnGate, ProgramBuilder,
};
use crate::model::gguf::GgufFile;
use anyhow::{bail, Result};
use zinc_plugin_api::{AttentionSpan, ModelProgram, Op, RopeFreqs, RopeStyle};

/// The RoPE base of sliding-window layers when the file does not name one (Gemma 3's
/// `rope_local_base_freq`).
const LOCAL_ROPE_BASE: f32 = 10_000.0;
/// Layers per repeat of the pattern when the file does not say: the last of each attends over
/// the whole context.
const WINDOW_PATTERN: u32 = 6;

/// Builds the gemma3 program.
pub fn build(f: &GgufFile) -> Result<ModelProgram> {
    let arch = "gemma3";
    let key = |k: &str| format!("{arch}.{k}");
    let mut facts = read_hparams(f, arch, RopeStyle::Neox)?;
    let hp = &mut facts.hp;
    hp.rope_base_local = f.get_f64(&key("rope.freq_base_swa")).map_or(LOCAL_ROPE_BASE, |v| v as f32);
    if let Some(kind) = f.get(&key("rope.scaling.type")).and_then(|v| v.as_str()).filter(|&k| k != "none") {
        bail!(
            "{}: {} = {kind} (RoPE scaling of Gemma 3's larger models) is not supported yet",
            f.path,
            key("rope.scaling.type")
        );
    }
    if hp.n_layer == 62 {
        // 27B scales queries by 1/√(n_embd / n_head), not 1/√head_dim.
        bail!("{}: Gemma 3 27B's attention scale is not supported yet", f.path);
    }
    let window = f.get(&key("attention.sliding_window")).and_then(|v| v.as_u64()).unwrap_or(0) as u32;
    if window == 0 {
        bail!("{}: {} is missing or zero; Gemma 3 needs its sliding window", f.path, key("attention.sliding_window"));
    }
    let pattern =
        f.get(&key("attention.sliding_window_pattern")).and_then(|v| v.as_u64()).unwrap_or(WINDOW_PATTERN as u64)
            as u32;
    let n_ff = f.get_u64(&key("feed_forward_length"))? as u32;
    let mut b = ProgramBuilder::new(f, facts);
    let hp = b.hp.clone();
    let a = Acts::new(&mut b);
    let (ff, ff2, normed) = (b.act(n_ff), b.act(n_ff), b.act(hp.n_embd));
    embed(&mut b, &a)?;
    b.op(Op::Scale { buf: a.x, factor: (hp.n_embd as f32).sqrt() });
    for layer in 0..hp.n_layer {
        let global = pattern == 0 || layer % pattern == pattern - 1;
        let kind = AttentionKind {
            qk_norm: true,
            freqs: if global { RopeFreqs::Global } else { RopeFreqs::Local },
            span: if global { AttentionSpan::Full } else { AttentionSpan::Window { keys: window } },
            qkv_bias: false,
        };
        attention_block(&mut b, &a, layer, kind, Some(normed))?;
        dense_ffn_block(&mut b, &a, layer, (ff, ff2), FfnGate::Gelu, Some(normed))?;
    }
    output(&mut b, &a, None)?;
    Ok(b.finish(arch))
}
