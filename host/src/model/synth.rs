//! Synthetic models: GGUF files of any supported architecture, shape and tensor type with
//! seeded random weights and a real tokenizer (copied from a donor file, by default the
//! default model). Tests and benchmarks use them for shapes no small download has.

use super::{
    gguf::{GgufFile, Value},
    gguf_write::GgufWriter,
    quant_mix::{MixContext, QuantMix, Role},
};
use anyhow::{bail, Context, Result};
use std::{
    io::{BufWriter, Write},
    path::Path,
};
use zinc_formats::{
    random::{random_blocks, Rng},
    GgmlType,
};

/// The shape of a synthetic model.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    /// `llama`, `qwen2`, `qwen3`, `qwen3moe`, `gemma2`, `gemma3` or `phi3`.
    pub arch: String,
    pub n_layer: u32,
    pub n_embd: u32,
    /// Dense FFN width (ignored by qwen3moe).
    pub n_ff: u32,
    pub n_head: u32,
    pub n_head_kv: u32,
    pub head_dim: u32,
    /// Experts (qwen3moe; llama with experts is Mixtral's layout).
    pub n_expert: u32,
    /// Experts used per token.
    pub n_expert_used: u32,
    /// Expert FFN width.
    pub expert_ff: u32,
    /// Trained context length to record.
    pub ctx: u32,
    /// Types of the matrices (norms stay f32, the MoE router f32).
    pub types: QuantMix,
    /// Whether the output matrix is tied to the embedding (no `output.weight`).
    pub tied_output: bool,
    /// Per-pair RoPE frequency divisors in `rope_freqs.weight`, as Llama 3.1 files carry them
    /// (random here, between 0.1 and 1.9, so that every pair's rotation depends on them).
    pub rope_freqs: bool,
    /// YaRN RoPE scaling in the metadata (`rope.scaling.type = yarn`, factor 4, trained on a
    /// quarter of the recorded context), as Qwen2.5 files set up for long contexts carry it.
    pub yarn: bool,
    /// LongRoPE as Phi-3's 128k variants carry it: short and long per-pair factors (random
    /// here, between 0.1 and 1.9), an original context of half the recorded one, and an
    /// attention factor.
    pub longrope: bool,
    /// RoPE on the first three quarters of each head only (`rope.dimension_count`), as Phi-4
    /// mini's partial rotary factor of 0.75 has it.
    pub partial_rotary: bool,
    /// Gemma's local attention: keys per sliding window, and every how many layers one is
    /// global (gemma3; gemma2 alternates).
    pub window: (u32, u32),
    /// Gemma 2's soft caps on attention scores and on logits.
    pub soft_caps: (f32, f32),
    /// Experts written one tensor each (`blk.N.ffn_gate.E.weight`), as llama.cpp's first
    /// Mixtral conversions wrote them, instead of stacked; the same values either way.
    pub split_experts: bool,
    /// Seed of every weight.
    pub seed: u64,
}

impl SynthSpec {
    /// Elements of each head that RoPE rotates.
    pub fn rope_dim(&self) -> u32 {
        if self.partial_rotary {
            self.head_dim * 3 / 4
        } else {
            self.head_dim
        }
    }
}

/// Every preset name [`preset`] knows: the benchmark shapes (real models' dimensions, the
/// default model's vocabulary) and the small test models.
pub const PRESETS: &[&str] = &[
    "smollm2",
    "llama-7b",
    "qwen2-7b",
    "gemma2-9b",
    "gemma3-4b",
    "phi3-mini",
    "qwen3-30b-a3b",
    "tiny-llama",
    "tiny-llama31",
    "tiny-qwen2",
    "tiny-qwen2-yarn",
    "tiny-phi3",
    "tiny-phi3-longrope",
    "tiny-phi4-mini",
    "tiny-qwen3",
    "tiny-qwen3moe",
    "tiny-mixtral-split",
    "tiny-mixtral",
    "tiny-gemma2",
    "tiny-gemma3",
];

/// Named shapes: the benchmark shapes and small test models.
pub fn preset(name: &str) -> Result<SynthSpec> {
    let t = |n: &str| QuantMix::Uniform(GgmlType::from_name(n).expect("built-in type"));
    let base = SynthSpec {
        arch: "llama".into(),
        n_layer: 30,
        n_embd: 576,
        n_ff: 1536,
        n_head: 9,
        n_head_kv: 3,
        head_dim: 64,
        n_expert: 0,
        n_expert_used: 0,
        expert_ff: 0,
        ctx: 8192,
        types: t("q4_1"),
        tied_output: true,
        rope_freqs: false,
        yarn: false,
        longrope: false,
        partial_rotary: false,
        window: (TEST_WINDOW, 0),
        soft_caps: TEST_CAPS,
        split_experts: false,
        seed: 1,
    };
    Ok(match name {
        "smollm2" => base,
        "llama-7b" => SynthSpec {
            n_layer: 32,
            n_embd: 4096,
            n_ff: 14336,
            n_head: 32,
            n_head_kv: 8,
            head_dim: 128,
            types: t("q4_0"),
            tied_output: false,
            ..base
        },
        // Qwen2.5-7B's dimensions (Q, K and V with biases).
        "qwen2-7b" => SynthSpec {
            arch: "qwen2".into(),
            n_layer: 28,
            n_embd: 3584,
            n_ff: 18944,
            n_head: 28,
            n_head_kv: 4,
            head_dim: 128,
            ctx: 32768,
            ..preset("llama-7b")?
        },
        // Gemma 2 9B's: heads of 256 (n_embd / n_head is 224), its soft caps and windows.
        "gemma2-9b" => SynthSpec {
            arch: "gemma2".into(),
            n_layer: 42,
            n_embd: 3584,
            n_ff: 14336,
            n_head: 16,
            n_head_kv: 8,
            head_dim: 256,
            tied_output: true,
            window: (4096, 2),
            soft_caps: (50.0, 30.0),
            ..preset("llama-7b")?
        },
        // Gemma 3 4B's: five sliding-window layers of 1,024 keys to one global, Q/K norms.
        "gemma3-4b" => SynthSpec {
            arch: "gemma3".into(),
            n_layer: 34,
            n_embd: 2560,
            n_ff: 10240,
            n_head: 8,
            n_head_kv: 4,
            head_dim: 256,
            tied_output: true,
            window: (1024, 6),
            ..preset("llama-7b")?
        },
        // Phi-3 mini's dimensions (3.8B: 32 layers of 3,072, 32 heads of 96).
        "phi3-mini" => SynthSpec {
            arch: "phi3".into(),
            n_layer: 32,
            n_embd: 3072,
            n_ff: 8192,
            n_head: 32,
            n_head_kv: 32,
            head_dim: 96,
            ctx: 4096,
            ..preset("llama-7b")?
        },
        "qwen3-30b-a3b" => SynthSpec {
            arch: "qwen3moe".into(),
            n_layer: 48,
            n_embd: 2048,
            n_ff: 0,
            n_head: 32,
            n_head_kv: 4,
            head_dim: 128,
            n_expert: 128,
            n_expert_used: 8,
            expert_ff: 768,
            ctx: 32768,
            types: t("q4_0"),
            tied_output: false,
            ..base
        },
        "tiny-llama" => SynthSpec {
            n_layer: 2,
            n_embd: 256,
            n_ff: 512,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            ctx: 2048,
            types: t("q8_0"),
            tied_output: false,
            ..base
        },
        "tiny-qwen3" => SynthSpec { arch: "qwen3".into(), n_layer: 3, ..preset("tiny-llama")? },
        "tiny-qwen2" => SynthSpec { arch: "qwen2".into(), n_layer: 3, ..preset("tiny-llama")? },
        // Phi-3's fused Q/K/V and gate/up matrices; all heads their own KV heads, as Phi-3 mini.
        "tiny-phi3" => SynthSpec { arch: "phi3".into(), n_layer: 3, n_head_kv: 4, ..preset("tiny-llama")? },
        "tiny-phi3-longrope" => SynthSpec { longrope: true, ..preset("tiny-phi3")? },
        // Phi-4 mini's RoPE: LongRoPE with its attention factor on partly rotated heads.
        "tiny-phi4-mini" => SynthSpec { partial_rotary: true, ..preset("tiny-phi3-longrope")? },
        "tiny-llama31" => SynthSpec { rope_freqs: true, ..preset("tiny-llama")? },
        "tiny-qwen2-yarn" => SynthSpec { yarn: true, ctx: 8192, ..preset("tiny-qwen2")? },
        // Gemma 3's layer kinds: three sliding-window layers of 16 keys, then one global.
        "tiny-gemma3" => SynthSpec {
            arch: "gemma3".into(),
            n_layer: 4,
            tied_output: true,
            window: (TEST_WINDOW, 4),
            ..preset("tiny-llama")?
        },
        // Gemma 2's: sliding-window and global layers alternating, soft caps that bite, and
        // heads narrower than n_embd / n_head as in 2B and 9B (whose queries still scale by
        // 1/√head_dim).
        "tiny-gemma2" => {
            SynthSpec { arch: "gemma2".into(), n_layer: 4, head_dim: 32, tied_output: true, ..preset("tiny-llama")? }
        }
        // Mixtral's layout: a llama file with experts.
        "tiny-mixtral" => SynthSpec { arch: "llama".into(), ..preset("tiny-qwen3moe")? },
        // The same file as the first Mixtral conversions laid it out: one tensor per expert.
        "tiny-mixtral-split" => SynthSpec { split_experts: true, ..preset("tiny-mixtral")? },
        "tiny-qwen3moe" => SynthSpec {
            arch: "qwen3moe".into(),
            n_layer: 3,
            n_embd: 256,
            n_ff: 0,
            n_head: 4,
            n_head_kv: 2,
            head_dim: 64,
            n_expert: 8,
            n_expert_used: 2,
            expert_ff: 256,
            ctx: 2048,
            types: t("q8_0"),
            tied_output: false,
            ..base
        },
        other => bail!("unknown preset `{other}` ({})", PRESETS.join(", ")),
    })
}

#[derive(Clone)]
struct TensorPlan {
    name: String,
    dims: Vec<u64>,
    dtype: GgmlType,
    /// Magnitude of the values.
    scale: f32,
    /// Norm weights: values around 1 rather than around 0.
    around_one: bool,
    /// Which of the file's tensors in the stacked layout seeds the values (its place there),
    /// so that a file with experts split holds the same weights as the stacked one.
    seed_index: usize,
    /// For one expert's tensor of a split layout: that expert and how many the stacked tensor
    /// holds; its values are that expert's part of the stacked tensor's.
    expert: Option<(u64, u64)>,
}

/// Mixtral's first GGUF layout: each stacked expert tensor (`blk.N.ffn_gate_exps.weight`)
/// written as one tensor per expert (`blk.N.ffn_gate.E.weight`), with the same values.
fn split_experts(plans: Vec<TensorPlan>) -> Vec<TensorPlan> {
    let mut out = Vec::new();
    for p in plans {
        let Some(kind) = p.name.strip_suffix("_exps.weight").map(str::to_string) else {
            out.push(p);
            continue;
        };
        for e in 0..p.dims[2] {
            out.push(TensorPlan {
                name: format!("{kind}.{e}.weight"),
                dims: p.dims[..2].to_vec(),
                expert: Some((e, p.dims[2])),
                ..p.clone()
            });
        }
    }
    out
}

fn plan(spec: &SynthSpec, n_vocab: u64) -> Result<Vec<TensorPlan>> {
    let f32t = GgmlType::F32;
    let (e, qd, kvd) =
        (spec.n_embd as u64, (spec.n_head * spec.head_dim) as u64, (spec.n_head_kv * spec.head_dim) as u64);
    let mut v = Vec::new();
    let cx = MixContext { n_layer: spec.n_layer, n_gqa: spec.n_head / spec.n_head_kv.max(1), n_expert: spec.n_expert };
    // The type a matrix of `role` gets in the mix.
    let typed = |role: Role, layer: u32, row_len: u64| spec.types.type_for(role, layer, row_len, cx);
    let mut mat = |name: String, dims: Vec<u64>, dtype: GgmlType| -> Result<()> {
        if !dims[0].is_multiple_of(dtype.block_elements() as u64) {
            bail!("{name}: rows of {} elements are not whole {} blocks of {}", dims[0], dtype, dtype.block_elements());
        }
        let scale = 1.0 / (dims[0] as f32).sqrt();
        v.push(TensorPlan { name, dims, dtype, scale, around_one: false, seed_index: 0, expert: None });
        Ok(())
    };
    let embd = typed(Role::Embedding { tied: spec.tied_output }, 0, e);
    mat("token_embd.weight".into(), vec![e, n_vocab], embd)?;
    let moe = spec.n_expert > 0;
    // Q, K and V biases (qwen2), after the matrices.
    let mut biases = Vec::new();
    for l in 0..spec.n_layer {
        let p = |n: &str| format!("blk.{l}.{n}.weight");
        let attn = if spec.arch == "phi3" {
            // Phi-3's Q, K and V rows in one matrix, which llama.cpp's quantizer types as V.
            vec![("attn_qkv", Role::AttnV, vec![e, qd + 2 * kvd]), ("attn_output", Role::AttnOutput, vec![qd, e])]
        } else {
            vec![
                ("attn_q", Role::AttnQ, vec![e, qd]),
                ("attn_k", Role::AttnK, vec![e, kvd]),
                ("attn_v", Role::AttnV, vec![e, kvd]),
                ("attn_output", Role::AttnOutput, vec![qd, e]),
            ]
        };
        for (name, role, dims) in attn {
            let ty = typed(role, l, dims[0]);
            mat(p(name), dims, ty)?;
        }
        if spec.arch == "qwen2" {
            for (name, n) in [("attn_q", qd), ("attn_k", kvd), ("attn_v", kvd)] {
                let name = format!("blk.{l}.{name}.bias");
                biases.push(TensorPlan {
                    name,
                    dims: vec![n],
                    dtype: f32t,
                    scale: 0.5,
                    around_one: false,
                    seed_index: 0,
                    expert: None,
                });
            }
        }
        let (up, down) = (Role::FfnGateUp, Role::FfnDown);
        let ffn = if moe {
            let (x, f) = (spec.n_expert as u64, spec.expert_ff as u64);
            mat(p("ffn_gate_inp"), vec![e, x], f32t)?;
            vec![
                ("ffn_gate_exps", up, vec![e, f, x]),
                ("ffn_up_exps", up, vec![e, f, x]),
                ("ffn_down_exps", down, vec![f, e, x]),
            ]
        } else if spec.arch == "phi3" {
            // Phi-3's gate rows, then its up rows, in one matrix.
            let f = spec.n_ff as u64;
            vec![("ffn_up", up, vec![e, 2 * f]), ("ffn_down", down, vec![f, e])]
        } else {
            let f = spec.n_ff as u64;
            vec![("ffn_gate", up, vec![e, f]), ("ffn_up", up, vec![e, f]), ("ffn_down", down, vec![f, e])]
        };
        for (name, role, dims) in ffn {
            let ty = typed(role, l, dims[0]);
            mat(p(name), dims, ty)?;
        }
    }
    if !spec.tied_output {
        let ty = typed(Role::Output, 0, e);
        mat("output.weight".into(), vec![e, n_vocab], ty)?;
        // Larger output weights give logits the spread of a trained model's (a few units of
        // standard deviation), so greedy choices are not a sea of near-ties.
        v.last_mut().expect("just pushed").scale *= 8.0;
    }
    v.extend(biases);
    let norm = |name: String, n: u64| TensorPlan {
        name,
        dims: vec![n],
        dtype: f32t,
        scale: 0.1,
        around_one: true,
        seed_index: 0,
        expert: None,
    };
    for l in 0..spec.n_layer {
        v.push(norm(format!("blk.{l}.attn_norm.weight"), e));
        v.push(norm(format!("blk.{l}.ffn_norm.weight"), e));
        if spec.arch.starts_with("gemma") {
            v.push(norm(format!("blk.{l}.post_attention_norm.weight"), e));
            v.push(norm(format!("blk.{l}.post_ffw_norm.weight"), e));
        }
        if !["llama", "qwen2", "gemma2", "phi3"].contains(&spec.arch.as_str()) {
            v.push(norm(format!("blk.{l}.attn_q_norm.weight"), spec.head_dim as u64));
            v.push(norm(format!("blk.{l}.attn_k_norm.weight"), spec.head_dim as u64));
        }
    }
    v.push(norm("output_norm.weight".into(), e));
    let factors = |name: &str| TensorPlan {
        name: name.into(),
        dims: vec![spec.rope_dim() as u64 / 2],
        dtype: f32t,
        scale: 0.9,
        around_one: true,
        seed_index: 0,
        expert: None,
    };
    if spec.rope_freqs {
        v.push(factors("rope_freqs.weight"));
    }
    if spec.longrope {
        v.push(factors("rope_factors_long.weight"));
        v.push(factors("rope_factors_short.weight"));
    }
    for (i, p) in v.iter_mut().enumerate() {
        p.seed_index = i;
    }
    Ok(if spec.split_experts { split_experts(v) } else { v })
}

/// `general.name` of a synthetic file. Phi-3's is spelled so that the name-keyed tokenizer rule
/// of llama.cpp and zinc (special tokens strip the whitespace after them) does not apply: the
/// rule names tokens (`</s>`) that the donor's vocabulary may not have, and llama.cpp then
/// refuses the file. The rule is checked on its own (`pre_tokenizers_match_llama_cpp`).
fn synthetic_name(arch: &str, seed: u64) -> String {
    let shown = if arch == "phi3" { "phi three" } else { arch };
    format!("zinc synth {shown} seed {seed}")
}

/// Keys of a small test model's sliding windows (tiny-gemma2, tiny-gemma3): short, so that a
/// test's prompts reach past them.
const TEST_WINDOW: u32 = 16;
/// A small test model's soft caps on attention scores and on logits: low enough that they
/// change this random model's scores and logits (Gemma 2's own are 50 and 30).
const TEST_CAPS: (f32, f32) = (0.5, 6.0);

/// Writes a GGUF file that holds only `donor`'s tokenizer (its `tokenizer.*` keys, no
/// tensors): what `--tokenizer` reads, at a fraction of a model's size, for carrying to a
/// machine that makes its synthetic models there.
pub fn write_tokenizer_only(donor: &Path, out: &Path) -> Result<()> {
    let donor_file = GgufFile::open(donor).with_context(|| format!("cannot read {}", donor.display()))?;
    if donor_file.get("tokenizer.ggml.tokens").and_then(Value::as_array).is_none_or(|a| a.is_empty()) {
        bail!("{}: the donor has no tokenizer", donor.display());
    }
    let mut w = GgufWriter::new();
    w.meta("general.name", Value::String("zinc synth tokenizer".into()));
    for (key, v) in donor_file.metadata.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.meta(key, v.clone());
    }
    let file = std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut sink = BufWriter::new(file);
    w.write_to(&mut sink).and_then(|_| sink.flush()).with_context(|| format!("writing {}", out.display()))
}

/// Writes a synthetic model to `out`, copying the tokenizer from `donor`. `progress` is
/// called with (bytes written, total bytes).
pub fn write_synthetic(spec: &SynthSpec, donor: &Path, out: &Path, mut progress: impl FnMut(u64, u64)) -> Result<()> {
    const ARCHS: &[&str] = &["llama", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3"];
    if !ARCHS.contains(&spec.arch.as_str()) {
        bail!("synth: architecture `{}` is not supported ({})", spec.arch, ARCHS.join(", "));
    }
    if spec.arch == "qwen3moe" && spec.n_expert == 0 {
        bail!("synth: qwen3moe needs experts");
    }
    if spec.n_expert > 0 && (spec.n_expert_used == 0 || spec.n_expert_used > spec.n_expert) {
        bail!("synth: {} of {} experts used per token; it must be 1 to all of them", spec.n_expert_used, spec.n_expert);
    }
    if spec.n_expert > 0 && !["qwen3moe", "llama"].contains(&spec.arch.as_str()) {
        bail!("synth: experts are written for qwen3moe and llama (Mixtral's layout) only");
    }
    if spec.n_head == 0 || spec.n_head_kv == 0 || !spec.n_head.is_multiple_of(spec.n_head_kv) {
        bail!("synth: {} heads cannot share {} KV heads", spec.n_head, spec.n_head_kv);
    }
    let donor_file = GgufFile::open(donor)
        .with_context(|| "synth copies its tokenizer from a donor model; pass --tokenizer FILE")?;
    let tokens = donor_file.get("tokenizer.ggml.tokens").and_then(Value::as_array).map_or(0, |a| a.len());
    if tokens == 0 {
        bail!("{}: the donor has no tokenizer", donor.display());
    }
    let mut w = GgufWriter::new();
    let a = spec.arch.as_str();
    let k = |s: &str| format!("{a}.{s}");
    w.meta("general.architecture", Value::String(a.into()))
        .meta("general.name", Value::String(synthetic_name(a, spec.seed)))
        .meta(&k("block_count"), Value::U32(spec.n_layer))
        .meta(&k("context_length"), Value::U32(spec.ctx))
        .meta(&k("embedding_length"), Value::U32(spec.n_embd))
        .meta(&k("attention.head_count"), Value::U32(spec.n_head))
        .meta(&k("attention.head_count_kv"), Value::U32(spec.n_head_kv))
        .meta(&k("attention.key_length"), Value::U32(spec.head_dim))
        .meta(&k("attention.value_length"), Value::U32(spec.head_dim))
        .meta(&k("attention.layer_norm_rms_epsilon"), Value::F32(1e-6))
        .meta(&k("rope.freq_base"), Value::F32(if a == "llama" { 100000.0 } else { 1_000_000.0 }))
        .meta(&k("rope.dimension_count"), Value::U32(spec.rope_dim()))
        .meta(&k("vocab_size"), Value::U32(tokens as u32));
    if spec.n_expert > 0 {
        // llama files with experts (Mixtral) give the experts' width as the FFN's.
        w.meta(&k("expert_count"), Value::U32(spec.n_expert))
            .meta(&k("expert_used_count"), Value::U32(spec.n_expert_used));
        if a == "qwen3moe" {
            w.meta(&k("expert_feed_forward_length"), Value::U32(spec.expert_ff));
        }
        w.meta(&k("feed_forward_length"), Value::U32(spec.expert_ff));
    } else {
        w.meta(&k("feed_forward_length"), Value::U32(spec.n_ff));
    }
    if spec.yarn {
        w.meta(&k("rope.scaling.type"), Value::String("yarn".into()))
            .meta(&k("rope.scaling.factor"), Value::F32(4.0))
            .meta(&k("rope.scaling.original_context_length"), Value::U32(spec.ctx / 4));
    }
    if spec.longrope {
        w.meta(&k("rope.scaling.original_context_length"), Value::U32(spec.ctx / 2))
            .meta(&k("rope.scaling.attn_factor"), Value::F32(1.19));
    }
    if a == "gemma2" {
        w.meta(&k("attention.sliding_window"), Value::U32(spec.window.0))
            .meta(&k("attn_logit_softcapping"), Value::F32(spec.soft_caps.0))
            .meta(&k("final_logit_softcapping"), Value::F32(spec.soft_caps.1));
    }
    if a == "gemma3" {
        w.meta(&k("attention.sliding_window"), Value::U32(spec.window.0))
            .meta(&k("attention.sliding_window_pattern"), Value::U32(spec.window.1))
            .meta(&k("rope.freq_base_swa"), Value::F32(10_000.0));
    }
    for (key, v) in donor_file.metadata.iter().filter(|(k, _)| k.starts_with("tokenizer.")) {
        w.meta(key, v.clone());
    }
    let plans = plan(spec, tokens as u64)?;
    let total: u64 = plans.iter().map(|p| p.dtype.bytes_for(p.dims.iter().product()).unwrap_or(0)).sum();
    for p in &plans {
        w.tensor_spec(&p.name, &p.dims, p.dtype);
    }
    let file = std::fs::File::create(out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut sink = BufWriter::with_capacity(1 << 20, file);
    let mut written = 0u64;
    w.write_streaming(&mut sink, |i, _, buf| {
        let p = &plans[i];
        let mut rng = Rng::new(spec.seed.wrapping_mul(1_000_003).wrapping_add(p.seed_index as u64));
        if let Some((e, n)) = p.expert {
            // The whole stacked tensor's values (they are drawn as one), then this expert's part.
            let mut stacked = vec![0u8; buf.len() * n as usize];
            fill_random(p, &mut stacked, &mut rng);
            buf.copy_from_slice(&stacked[buf.len() * e as usize..buf.len() * (e as usize + 1)]);
        } else {
            fill_random(p, buf, &mut rng);
        }
        written += buf.len() as u64;
        progress(written, total);
    })?;
    sink.flush()?;
    Ok(())
}

/// Fills `buf` with `p`'s values from `rng`.
fn fill_random(p: &TensorPlan, buf: &mut [u8], rng: &mut Rng) {
    if p.around_one {
        for c in buf.chunks_exact_mut(4) {
            c.copy_from_slice(&(1.0 + rng.sym(p.scale)).to_le_bytes());
        }
        return;
    }
    let blocks = buf.len() / p.dtype.block_bytes();
    // Generate in slices so a multi-GB tensor never needs a second buffer of its size.
    let per = (1 << 20) / p.dtype.block_bytes().max(1) + 1;
    let mut at = 0;
    while at < blocks {
        let n = per.min(blocks - at);
        let chunk = random_blocks(p.dtype, n, p.scale, rng);
        buf[at * p.dtype.block_bytes()..(at + n) * p.dtype.block_bytes()].copy_from_slice(&chunk);
        at += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokenizer_only_file_is_small_and_serves_as_synths_donor() {
        let donor = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/SmolLM2-135M-Instruct.Q4_1.gguf");
        assert!(donor.exists(), "{} is missing: run `bash scripts/fetch-model.sh`", donor.display());
        let dir = std::env::temp_dir().join(format!("zinc-tokenizer-only-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tok = dir.join("tokenizer.gguf");
        write_tokenizer_only(&donor, &tok).unwrap();
        let (small, full) = (std::fs::metadata(&tok).unwrap().len(), std::fs::metadata(&donor).unwrap().len());
        assert!(small * 20 < full, "{small} bytes against the model's {full}");
        let keys = |f: &GgufFile| {
            let mut k: Vec<String> = f.metadata.keys().filter(|k| k.starts_with("tokenizer.")).cloned().collect();
            k.sort();
            k
        };
        let (t, d) = (GgufFile::open(&tok).unwrap(), GgufFile::open(&donor).unwrap());
        assert_eq!(keys(&t), keys(&d));
        assert!(t.tensors.is_empty());
        // A model made from it has the donor's vocabulary.
        let model = dir.join("tiny.gguf");
        write_synthetic(&preset("tiny-llama").unwrap(), &tok, &model, |_, _| {}).unwrap();
        let tokens = |f: &GgufFile| f.get("tokenizer.ggml.tokens").and_then(Value::as_array).map(|a| a.len());
        assert_eq!(tokens(&GgufFile::open(&model).unwrap()), tokens(&d));
        // A file without a tokenizer is refused, naming it.
        let bare = dir.join("bare.gguf");
        let mut w = GgufWriter::new();
        w.meta("general.name", Value::String("no tokenizer".into()));
        std::fs::write(&bare, w.to_bytes()).unwrap();
        let err = write_tokenizer_only(&bare, &dir.join("x.gguf")).unwrap_err().to_string();
        assert!(err.contains("has no tokenizer"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
