//! Architectures as host-side model programs, one file each, sharing the building blocks in
//! this module. A new architecture is a new program; backends only learn new ops.

mod gemma2;
mod gemma3;
mod llama;
mod moe;
mod phi3;
mod qwen2;
mod qwen3;
mod qwen3moe;
pub mod rope_scaling;

use super::gguf::{GgufFile, TensorInfo};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use zinc_plugin_api::{
    abi_stable::std_types::RVec, ActId, AttentionSpan, DType, Hparams, ModelProgram, Op, RopeFreqs, RopeStyle,
    TensorDesc, TensorId,
};

/// Architectures zinc can build programs for.
pub const SUPPORTED: &[&str] = &["llama", "qwen2", "qwen3", "qwen3moe", "gemma2", "gemma3", "phi3"];

/// Builds the program for a GGUF file's `general.architecture`.
pub fn build_program(f: &GgufFile) -> Result<ModelProgram> {
    let arch = f.get_str("general.architecture")?;
    match arch {
        "llama" => llama::build(f),
        "qwen2" => qwen2::build(f),
        "qwen3" => qwen3::build(f),
        "qwen3moe" => qwen3moe::build(f),
        "gemma2" => gemma2::build(f),
        "gemma3" => gemma3::build(f),
        "phi3" => phi3::build(f),
        other => bail!("{}: architecture `{other}` is not supported (zinc runs {})", f.path, SUPPORTED.join(", ")),
    }
}

/// What a program's builder starts from: the shape facts and the factor that the file's RoPE
/// scaling puts on the queries (YaRN's and LongRoPE's attention scale; 1 without scaling),
/// read together so that the scaling metadata is read and checked once.
pub struct ShapeFacts {
    /// Shape facts.
    pub hp: Hparams,
    /// Factor on the queries' rotated elements ([`rope_scaling::RopeScaling::query_scale`]).
    pub query_scale: f32,
}

/// Reads the shape facts under the architecture's metadata prefix.
pub fn read_hparams(f: &GgufFile, arch: &str, rope_style: RopeStyle) -> Result<ShapeFacts> {
    let key = |k: &str| format!("{arch}.{k}");
    let u = |k: &str| -> Result<u32> {
        let v = f.get_u64(&key(k))?;
        u32::try_from(v)
            .ok()
            .filter(|&v| v > 0 && v < (1 << 24))
            .with_context(|| format!("{}: {} = {v} is out of range", f.path, key(k)))
    };
    let opt = |k: &str| f.get(&key(k)).and_then(|v| v.as_u64()).map(|v| v as u32);
    let n_embd = u("embedding_length")?;
    let n_head = u("attention.head_count")?;
    let n_head_kv = opt("attention.head_count_kv").unwrap_or(n_head);
    let head_dim = opt("attention.key_length").unwrap_or(n_embd / n_head);
    let embd = f.tensor("token_embd.weight").with_context(|| format!("{}: token_embd.weight is missing", f.path))?;
    let n_vocab = embd.dims.get(1).copied().unwrap_or(0) as u32;
    let rope_base = f.get_f64(&key("rope.freq_base")).unwrap_or(10000.0) as f32;
    let rope_dim = opt("rope.dimension_count").unwrap_or(head_dim);
    let scaling = rope_scaling::read(f, arch, rope_dim, rope_base)?;
    let hp = Hparams {
        n_layer: u("block_count")?,
        n_embd,
        n_head,
        n_head_kv,
        head_dim,
        n_vocab,
        n_ctx_train: opt("context_length").unwrap_or(4096),
        rms_eps: f.get_f64(&key("attention.layer_norm_rms_epsilon")).unwrap_or(1e-5) as f32,
        rope_base,
        // One base for every layer unless the architecture says otherwise (gemma3).
        rope_base_local: rope_base,
        rope_dim,
        rope_style,
        rope_freq_scale: scaling.freq_scale,
        rope_freq_factors: scaling.freq_divisors.into(),
        attn_logit_softcap: 0.0,
    };
    if n_head_kv == 0
        || n_head % n_head_kv != 0
        || head_dim == 0
        || hp.rope_dim > head_dim
        || !hp.rope_dim.is_multiple_of(2)
    {
        bail!("{}: attention shape is inconsistent: {hp:?}", f.path);
    }
    let factors = hp.rope_freq_factors.len();
    if factors != 0 && factors as u32 != hp.rope_dim / 2 {
        bail!(
            "{}: the RoPE factors (rope_freqs or rope_factors_short) hold {factors}; RoPE rotates {} pairs ({}.rope.dimension_count / 2)",
            f.path,
            hp.rope_dim / 2,
            arch
        );
    }
    Ok(ShapeFacts { hp, query_scale: scaling.query_scale })
}

/// Assembles a program: tensors by name with checked shapes, activations, ops.
pub struct ProgramBuilder<'f> {
    file: &'f GgufFile,
    /// Shape facts.
    pub hp: Hparams,
    /// Factor on the queries before RoPE (YaRN's and LongRoPE's scaling of attention scores
    /// where RoPE rotates whole heads, Gemma 2's query scale; 1 otherwise).
    query_scale: f32,
    /// Factor on the rotated elements of the queries alone: YaRN's and LongRoPE's where RoPE
    /// rotates part of each head (Phi-4 mini); 1 otherwise.
    rotated_scale: f32,
    tensors: Vec<TensorDesc>,
    by_name: HashMap<String, TensorId>,
    widths: Vec<u32>,
    ops: Vec<Op>,
}

impl<'f> ProgramBuilder<'f> {
    /// A builder over `file` with the shape facts and query scale that [`read_hparams`] read.
    pub fn new(file: &'f GgufFile, facts: ShapeFacts) -> Self {
        let ShapeFacts { hp, query_scale: scale } = facts;
        // llama.cpp's RoPE scales the rotated elements of Q and K; where those are the whole
        // head, a scale of every query element is the same and keeps the fused paths.
        let (query_scale, rotated_scale) = if hp.rope_dim == hp.head_dim { (scale, 1.0) } else { (1.0, scale) };
        ProgramBuilder {
            file,
            hp,
            query_scale,
            rotated_scale,
            tensors: Vec::new(),
            by_name: HashMap::new(),
            widths: Vec::new(),
            ops: Vec::new(),
        }
    }

    fn info(&self, name: &str) -> Result<&'f TensorInfo> {
        self.file.tensor(name).with_context(|| format!("{}: tensor {name} is missing", self.file.path))
    }

    /// A weight tensor whose dims must equal `dims`.
    pub fn tensor(&mut self, name: &str, dims: &[u64]) -> Result<TensorId> {
        if let Some(&id) = self.by_name.get(name) {
            return Ok(id);
        }
        let t = self.info(name)?;
        if t.dims != dims {
            bail!("{}: tensor {name} has shape {:?}, expected {dims:?}", self.file.path, t.dims);
        }
        let bytes = self.file.bytes(t);
        let id = self.tensors.len() as TensorId;
        self.tensors.push(TensorDesc {
            name: name.into(),
            dtype: DType(t.dtype.id()),
            dims: t.dims.iter().copied().collect(),
            data: bytes.as_ptr(),
            len: bytes.len(),
        });
        self.by_name.insert(name.to_string(), id);
        Ok(id)
    }

    /// Rows `rows` of a weight tensor whose dims must equal `[row_len, n_rows]`, as a weight of
    /// its own: one part of a fused matrix (Phi-3's `attn_qkv` holds Q, K and V, its `ffn_up`
    /// the gate and the up rows). Rows are stored one after the other, each whole blocks, so
    /// the part is a byte range of the tensor.
    pub fn tensor_rows(
        &mut self,
        name: &str,
        [row_len, n_rows]: [u64; 2],
        rows: std::ops::Range<u64>,
    ) -> Result<TensorId> {
        let part = format!("{name}[{}..{}]", rows.start, rows.end);
        if let Some(&id) = self.by_name.get(&part) {
            return Ok(id);
        }
        let t = self.info(name)?;
        if t.dims != [row_len, n_rows] {
            bail!("{}: tensor {name} has shape {:?}, expected {:?}", self.file.path, t.dims, [row_len, n_rows]);
        }
        let bytes = self.file.bytes(t);
        let row_bytes = bytes.len() / n_rows as usize;
        let range = rows.start as usize * row_bytes..rows.end as usize * row_bytes;
        let id = self.tensors.len() as TensorId;
        self.tensors.push(TensorDesc {
            name: part.as_str().into(),
            dtype: DType(t.dtype.id()),
            dims: RVec::from(vec![row_len, rows.end - rows.start]),
            data: bytes[range.clone()].as_ptr(),
            len: range.len(),
        });
        self.by_name.insert(part, id);
        Ok(id)
    }

    /// True when the file has a tensor of this name.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor(name).is_some()
    }

    /// A new activation buffer of `width` columns.
    pub fn act(&mut self, width: u32) -> ActId {
        self.widths.push(width);
        (self.widths.len() - 1) as ActId
    }

    /// Appends an op.
    pub fn op(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// The finished program.
    pub fn finish(self, arch: &str) -> ModelProgram {
        ModelProgram {
            arch: arch.into(),
            hparams: self.hp,
            tensors: RVec::from(self.tensors),
            activation_widths: RVec::from(self.widths),
            ops: RVec::from(self.ops),
        }
    }
}

/// Activation buffers shared by the transformer blocks of every architecture.
pub struct Acts {
    /// The residual stream.
    pub x: ActId,
    /// Normalised input of a sub-block.
    pub xn: ActId,
    pub q: ActId,
    pub k: ActId,
    pub v: ActId,
    pub attn: ActId,
    /// Output of a sub-block before the residual add.
    pub o: ActId,
}

impl Acts {
    /// Allocates the buffers for `hp`.
    pub fn new(b: &mut ProgramBuilder) -> Acts {
        let hp = b.hp.clone();
        let (qd, kvd) = (hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim);
        Acts {
            x: b.act(hp.n_embd),
            xn: b.act(hp.n_embd),
            q: b.act(qd),
            k: b.act(kvd),
            v: b.act(kvd),
            attn: b.act(qd),
            o: b.act(hp.n_embd),
        }
    }
}

/// Token embedding into the residual stream.
pub fn embed(b: &mut ProgramBuilder, a: &Acts) -> Result<()> {
    let hp = b.hp.clone();
    let t = b.tensor("token_embd.weight", &[hp.n_embd as u64, hp.n_vocab as u64])?;
    b.op(Op::Embed { table: t, out: a.x });
    Ok(())
}

/// How one layer's attention differs between architectures.
#[derive(Debug, Clone, Copy)]
pub struct AttentionKind {
    /// A per-head RMS norm on Q and K before RoPE (qwen3, gemma3).
    pub qk_norm: bool,
    /// The RoPE frequencies of this layer.
    pub freqs: RopeFreqs,
    /// The whole context, or a sliding window.
    pub span: AttentionSpan,
    /// Biases added to the Q, K and V products (qwen2).
    pub qkv_bias: bool,
}

impl AttentionKind {
    /// llama's attention (with qwen3's Q/K norms when `qk_norm`).
    pub fn plain(qk_norm: bool) -> AttentionKind {
        AttentionKind { qk_norm, freqs: RopeFreqs::Global, span: AttentionSpan::Full, qkv_bias: false }
    }
}

/// Pre-norm self-attention with the variations of [`AttentionKind`], and its residual;
/// `post_norm`: the buffer of its output normed by `post_attention_norm` (gemma) before the
/// add.
pub fn attention_block(
    b: &mut ProgramBuilder,
    a: &Acts,
    layer: u32,
    kind: AttentionKind,
    post_norm: Option<ActId>,
) -> Result<()> {
    let hp = b.hp.clone();
    let (e, qd, kvd, hd) =
        (hp.n_embd as u64, (hp.n_head * hp.head_dim) as u64, (hp.n_head_kv * hp.head_dim) as u64, hp.head_dim);
    let p = |n: &str| format!("blk.{layer}.{n}.weight");
    let norm = b.tensor(&p("attn_norm"), &[e])?;
    let (wq, wk, wv) = if b.has(&p("attn_qkv")) {
        // Q, K and V rows in one matrix (phi3).
        let (fused, dims) = (p("attn_qkv"), [e, qd + 2 * kvd]);
        (
            b.tensor_rows(&fused, dims, 0..qd)?,
            b.tensor_rows(&fused, dims, qd..qd + kvd)?,
            b.tensor_rows(&fused, dims, qd + kvd..qd + 2 * kvd)?,
        )
    } else {
        (b.tensor(&p("attn_q"), &[e, qd])?, b.tensor(&p("attn_k"), &[e, kvd])?, b.tensor(&p("attn_v"), &[e, kvd])?)
    };
    let wo = b.tensor(&p("attn_output"), &[qd, e])?;
    b.op(Op::RmsNorm { input: a.x, weight: norm, out: a.xn });
    b.op(Op::MatMul { input: a.xn, weight: wq, out: a.q });
    b.op(Op::MatMul { input: a.xn, weight: wk, out: a.k });
    b.op(Op::MatMul { input: a.xn, weight: wv, out: a.v });
    if kind.qkv_bias {
        let bias = |n: &str| format!("blk.{layer}.{n}.bias");
        for (name, buf, width) in [("attn_q", a.q, qd), ("attn_k", a.k, kvd), ("attn_v", a.v, kvd)] {
            let t = b.tensor(&bias(name), &[width])?;
            b.op(Op::AddBias { buf, bias: t });
        }
    }
    if kind.qk_norm {
        let qn = b.tensor(&p("attn_q_norm"), &[hd as u64])?;
        let kn = b.tensor(&p("attn_k_norm"), &[hd as u64])?;
        b.op(Op::HeadRmsNorm { buf: a.q, weight: qn, head_dim: hd });
        b.op(Op::HeadRmsNorm { buf: a.k, weight: kn, head_dim: hd });
    }
    if b.query_scale != 1.0 && kind.freqs == RopeFreqs::Global {
        // Before the rotations, so that they and the attention still meet as the backends'
        // fused attention prelude expects; a scale commutes with a rotation.
        b.op(Op::Scale { buf: a.q, factor: b.query_scale });
    }
    if b.rotated_scale != 1.0 && kind.freqs == RopeFreqs::Global {
        b.op(Op::ScaleRotated { buf: a.q, head_dim: hd, dims: b.hp.rope_dim, factor: b.rotated_scale });
    }
    b.op(Op::Rope { buf: a.q, head_dim: hd, freqs: kind.freqs });
    b.op(Op::Rope { buf: a.k, head_dim: hd, freqs: kind.freqs });
    b.op(Op::Attention { layer, q: a.q, k: a.k, v: a.v, out: a.attn, span: kind.span });
    b.op(Op::MatMul { input: a.attn, weight: wo, out: a.o });
    residual(b, a, post_norm.map(|o2| (p("post_attention_norm"), o2)))
}

/// `x += o`, or `x += rms_norm(o)` by the named norm tensor, through the given buffer (gemma).
fn residual(b: &mut ProgramBuilder, a: &Acts, post_norm: Option<(String, ActId)>) -> Result<()> {
    match post_norm {
        Some((name, o2)) => {
            let norm = b.tensor(&name, &[b.hp.n_embd as u64])?;
            b.op(Op::RmsNorm { input: a.o, weight: norm, out: o2 });
            b.op(Op::Add { a: a.x, b: o2, out: a.x });
        }
        None => b.op(Op::Add { a: a.x, b: a.o, out: a.x }),
    }
    Ok(())
}

/// The gated feed-forward's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FfnGate {
    /// SiLU (llama, qwen).
    Silu,
    /// GELU, tanh form (gemma).
    Gelu,
}

/// Pre-norm dense gated feed-forward and its residual (post-normed through `o2` when
/// `post_norm`: gemma's `post_ffw_norm`).
pub fn dense_ffn_block(
    b: &mut ProgramBuilder,
    a: &Acts,
    layer: u32,
    (ff, ff2): (ActId, ActId),
    gate_fn: FfnGate,
    post_norm: Option<ActId>,
) -> Result<()> {
    let hp = b.hp.clone();
    let e = hp.n_embd as u64;
    let n_ff = b.widths_of(ff) as u64;
    let p = |n: &str| format!("blk.{layer}.{n}.weight");
    let norm = b.tensor(&p("ffn_norm"), &[e])?;
    let (gate, up) = if b.has(&p("ffn_gate")) {
        (b.tensor(&p("ffn_gate"), &[e, n_ff])?, b.tensor(&p("ffn_up"), &[e, n_ff])?)
    } else {
        // The gate rows, then the up rows, in one matrix (phi3).
        let dims = [e, 2 * n_ff];
        (b.tensor_rows(&p("ffn_up"), dims, 0..n_ff)?, b.tensor_rows(&p("ffn_up"), dims, n_ff..2 * n_ff)?)
    };
    let down = b.tensor(&p("ffn_down"), &[n_ff, e])?;
    b.op(Op::RmsNorm { input: a.x, weight: norm, out: a.xn });
    b.op(Op::MatMul { input: a.xn, weight: gate, out: ff });
    b.op(Op::MatMul { input: a.xn, weight: up, out: ff2 });
    b.op(match gate_fn {
        FfnGate::Silu => Op::SwiGlu { gate: ff, up: ff2, out: ff },
        FfnGate::Gelu => Op::GeluGlu { gate: ff, up: ff2, out: ff },
    });
    b.op(Op::MatMul { input: ff, weight: down, out: a.o });
    residual(b, a, post_norm.map(|o2| (p("post_ffw_norm"), o2)))
}

/// Final norm and logits, on the rows whose logits were asked for, soft-capped when
/// `logit_cap` says so (Gemma 2). The output matrix falls back to the token embedding when
/// the file ties them (SmolLM2).
pub fn output(b: &mut ProgramBuilder, a: &Acts, logit_cap: Option<f32>) -> Result<()> {
    let hp = b.hp.clone();
    let (e, v) = (hp.n_embd as u64, hp.n_vocab as u64);
    let norm = b.tensor("output_norm.weight", &[e])?;
    let out_w = if b.has("output.weight") {
        b.tensor("output.weight", &[e, v])?
    } else {
        b.tensor("token_embd.weight", &[e, v])?
    };
    let sel = b.act(hp.n_embd);
    let seln = b.act(hp.n_embd);
    let logits = b.act(hp.n_vocab);
    b.op(Op::SelectLogitRows { input: a.x, out: sel });
    b.op(Op::RmsNorm { input: sel, weight: norm, out: seln });
    b.op(Op::MatMul { input: seln, weight: out_w, out: logits });
    if let Some(cap) = logit_cap {
        b.op(Op::SoftCap { buf: logits, cap });
    }
    b.op(Op::Output { input: logits });
    Ok(())
}

/// A dense decoder-only transformer: embedding, `n_layer` × (attention, SwiGLU FFN), output.
/// llama and qwen3 differ only in RoPE pairing and qwen3's per-head Q/K norms.
pub fn dense_transformer(f: &GgufFile, arch: &str, rope: RopeStyle, attn: AttentionKind) -> Result<ModelProgram> {
    let facts = read_hparams(f, arch, rope)?;
    let n_ff = f.get_u64(&format!("{arch}.feed_forward_length"))? as u32;
    let mut b = ProgramBuilder::new(f, facts);
    let hp = b.hp.clone();
    let a = Acts::new(&mut b);
    let (ff, ff2) = (b.act(n_ff), b.act(n_ff));
    embed(&mut b, &a)?;
    for layer in 0..hp.n_layer {
        attention_block(&mut b, &a, layer, attn, None)?;
        dense_ffn_block(&mut b, &a, layer, (ff, ff2), FfnGate::Silu, None)?;
    }
    output(&mut b, &a, None)?;
    Ok(b.finish(arch))
}

impl ProgramBuilder<'_> {
    /// Width of an activation allocated earlier.
    pub fn widths_of(&self, a: ActId) -> u32 {
        self.widths[a as usize]
    }
}
