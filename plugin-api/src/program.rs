//! The model program: what the host compiles from a GGUF file and hands to a backend once.
//!
//! A program is a flat list of [`Op`]s over weight tensors ([`TensorId`], indices into
//! [`ModelProgram::tensors`]) and activation buffers ([`ActId`], rows × width matrices that
//! the backend allocates per step, one row per token of the step). New architectures are new
//! host-side programs; a backend only ever learns new ops.

use abi_stable::{
    std_types::{RString, RVec},
    StableAbi,
};

/// Index of a weight tensor in [`ModelProgram::tensors`].
pub type TensorId = u32;
/// Index of an activation buffer; widths are in [`ModelProgram::activation_widths`].
pub type ActId = u32;

/// A ggml tensor type id as stored in GGUF (`0` F32, `1` F16, `2` Q4_0, …, `30` BF16).
#[repr(transparent)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DType(pub u32);

/// One weight tensor: GGUF name, type, shape and the bytes the host memory-mapped.
///
/// `data` points into the host's memory map of the model file and stays valid until the
/// backend is dropped; a backend may read it in place (the CPU tier does) or upload it.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct TensorDesc {
    /// The GGUF tensor name, for error messages.
    pub name: RString,
    /// Storage type.
    pub dtype: DType,
    /// Dimensions, fastest-varying first (`dims[0]` is the row length), as GGUF stores them.
    pub dims: RVec<u64>,
    /// Start of the tensor's bytes.
    pub data: *const u8,
    /// Length of the tensor's bytes.
    pub len: usize,
}

// SAFETY: the pointer refers to a read-only memory map that the host keeps alive for as long
// as any backend holds the program; nothing writes through it.
unsafe impl Send for TensorDesc {}
unsafe impl Sync for TensorDesc {}

impl TensorDesc {
    /// The tensor's bytes.
    ///
    /// # Safety
    /// Valid while the host keeps the model mapped, which it does for the backend's lifetime.
    pub unsafe fn bytes(&self) -> &[u8] {
        std::slice::from_raw_parts(self.data, self.len)
    }
}

/// Which elements RoPE rotates together.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pairs (2i, 2i+1): ggml's `llama` layout.
    Adjacent,
    /// Pairs (i, i + d/2): the "neox" layout of qwen2/qwen3.
    Neox,
}

/// Which RoPE frequencies an op rotates with. Most models have one base; Gemma 3's
/// sliding-window layers have their own ([`Hparams::rope_base_local`]).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeFreqs {
    /// `rope_base`: every layer of most models, Gemma 3's full-context layers.
    Global,
    /// `rope_base_local`: sliding-window layers.
    Local,
}

/// How far back an attention op reads in each sequence.
#[repr(C, u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttentionSpan {
    /// Every position up to the query's own.
    Full,
    /// The last `keys` positions up to the query's own, itself included (a key at position
    /// `k` is read by a query at `p` when `p − keys < k ≤ p`): sliding-window layers.
    Window { keys: u32 },
}

impl AttentionSpan {
    /// The first position a query at `pos` reads.
    pub fn first_key(self, pos: u32) -> u32 {
        match self {
            AttentionSpan::Full => 0,
            AttentionSpan::Window { keys } => (pos + 1).saturating_sub(keys),
        }
    }
}

/// Shape facts every op may need.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct Hparams {
    /// Transformer blocks.
    pub n_layer: u32,
    /// Model width.
    pub n_embd: u32,
    /// Query heads.
    pub n_head: u32,
    /// Key/value heads (GQA when fewer than `n_head`).
    pub n_head_kv: u32,
    /// Width of one attention head.
    pub head_dim: u32,
    /// Vocabulary size (logit row width).
    pub n_vocab: u32,
    /// Longest context the model was trained for.
    pub n_ctx_train: u32,
    /// RMS norm epsilon.
    pub rms_eps: f32,
    /// RoPE frequency base.
    pub rope_base: f32,
    /// RoPE frequency base of sliding-window layers ([`RopeFreqs::Local`]); `rope_base` for
    /// models without them.
    pub rope_base_local: f32,
    /// Elements of each head that RoPE rotates.
    pub rope_dim: u32,
    /// Pairing used by RoPE.
    pub rope_style: RopeStyle,
    /// Multiplier of every global frequency: `1 / rope.scaling.factor` for linear RoPE
    /// scaling, 1 without.
    pub rope_freq_scale: f32,
    /// Divisors of the global frequencies, one per rotated pair (Llama 3.1's scaling, stored
    /// in its files as `rope_freqs.weight`); empty for none.
    pub rope_freq_factors: RVec<f32>,
    /// Gemma 2's soft cap on attention scores: each scaled score `s` becomes
    /// `cap · tanh(s / cap)` before the softmax; 0 for none.
    pub attn_logit_softcap: f32,
}

/// One operation of the model program. Every activation operand has one row per token of
/// the step unless the op says otherwise.
#[repr(C, u8)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub enum Op {
    /// `out[r] = table[step.tokens[r]]` (dequantized).
    Embed { table: TensorId, out: ActId },
    /// `out[r] = x[r] / rms(x[r]) * weight`.
    RmsNorm { input: ActId, weight: TensorId, out: ActId },
    /// RMS norm applied to each head of width `head_dim` separately (qwen3's Q/K norms).
    HeadRmsNorm { buf: ActId, weight: TensorId, head_dim: u32 },
    /// `out[r] = weight · input[r]` (weight rows are output features).
    MatMul { input: ActId, weight: TensorId, out: ActId },
    /// Rotary position embedding in place, at `step.positions[r]`, over heads of `head_dim`,
    /// with the frequencies of `freqs`.
    Rope { buf: ActId, head_dim: u32, freqs: RopeFreqs },
    /// Writes this step's K and V rows into layer `layer`'s KV pages, then computes causal
    /// attention of `q` over each sequence's context (all of it, or a sliding window: `span`)
    /// through its page table (GQA).
    Attention { layer: u32, q: ActId, k: ActId, v: ActId, out: ActId, span: AttentionSpan },
    /// `out = silu(gate) * up`.
    SwiGlu { gate: ActId, up: ActId, out: ActId },
    /// `out = gelu(gate) * up`, GELU in its tanh form (Gemma's feed-forward).
    GeluGlu { gate: ActId, up: ActId, out: ActId },
    /// `buf *= factor` in place (Gemma's embeddings, scaled by √n_embd).
    Scale { buf: ActId, factor: f32 },
    /// The first `dims` elements of every head of `head_dim` elements times `factor`, in place:
    /// the attention factor that llama.cpp's RoPE puts on the rotated elements of Q and K
    /// only, as the square of it on Q (LongRoPE on Phi-4 mini's partly rotated heads).
    ScaleRotated { buf: ActId, head_dim: u32, dims: u32, factor: f32 },
    /// `buf = cap · tanh(buf / cap)` in place (Gemma 2's soft cap on its logits).
    SoftCap { buf: ActId, cap: f32 },
    /// `buf[r] += bias` in place for every row, `bias` a vector of the row's width (Qwen2's
    /// Q, K and V biases).
    AddBias { buf: ActId, bias: TensorId },
    /// `out = a + b`.
    Add { a: ActId, b: ActId, out: ActId },
    /// Mixture of experts: softmax router over `n_expert`, top `n_used`, weights renormalised
    /// to sum to 1, `out = Σ w_e · down_e(silu(gate_e · x) * up_e · x)`. Expert tensors are
    /// 3-D (experts × rows × columns).
    Moe {
        input: ActId,
        router: TensorId,
        gate_exps: TensorId,
        up_exps: TensorId,
        down_exps: TensorId,
        n_used: u32,
        out: ActId,
    },
    /// Keeps only the rows whose logits were asked for ([`crate::Step`]); later ops run on
    /// those rows alone.
    SelectLogitRows { input: ActId, out: ActId },
    /// Marks `input` as the step's logits (rows after `SelectLogitRows`, width `n_vocab`).
    Output { input: ActId },
}

/// Everything a backend needs to run a model: shapes, weights and the op list.
#[repr(C)]
#[derive(StableAbi, Debug, Clone)]
pub struct ModelProgram {
    /// GGUF `general.architecture`, for messages.
    pub arch: RString,
    /// Shape facts.
    pub hparams: Hparams,
    /// Weight tensors, borrowed from the host's memory map.
    pub tensors: RVec<TensorDesc>,
    /// Width (columns) of each activation buffer, indexed by [`ActId`].
    pub activation_widths: RVec<u32>,
    /// The ops, run in order for every step.
    pub ops: RVec<Op>,
}

impl TensorDesc {
    /// Elements per row (`dims[0]`).
    pub fn row_len(&self) -> usize {
        self.dims.first().copied().unwrap_or(0) as usize
    }

    /// Rows: every dimension after the first, multiplied.
    pub fn rows(&self) -> usize {
        self.dims.iter().skip(1).product::<u64>() as usize
    }
}

impl Hparams {
    /// RoPE inverse frequencies `base^(-2i/rope_dim)` for `i < rope_dim / 2` of `freqs`'s base,
    /// the global ones scaled (`rope_freq_scale`, `rope_freq_factors`) as llama.cpp's
    /// `ggml_rope_ext` scales them, computed one way for every backend so that their
    /// rotations agree.
    pub fn rope_inv_freq(&self, freqs: RopeFreqs) -> Vec<f32> {
        let (base, scale, factors) = match freqs {
            RopeFreqs::Global => (self.rope_base, self.rope_freq_scale, &self.rope_freq_factors[..]),
            RopeFreqs::Local => (self.rope_base_local, 1.0, &[][..]),
        };
        (0..self.rope_dim / 2)
            .map(|i| {
                let f = base.powf(-2.0 * i as f32 / self.rope_dim as f32) * scale;
                f / factors.get(i as usize).copied().unwrap_or(1.0)
            })
            .collect()
    }
}

impl ModelProgram {
    /// Checks every op's operands against the program's tensors and activation widths, so a
    /// backend never indexes out of bounds on a malformed program. Tensor byte lengths are the
    /// backend's to check (it knows which types it supports).
    pub fn check_shapes(&self) -> Result<(), String> {
        let p = self;
        let width = |a: u32| -> Result<usize, String> {
            p.activation_widths
                .get(a as usize)
                .map(|&x| x as usize)
                .ok_or_else(|| format!("activation {a} out of range"))
        };
        let tensor = |t: u32| -> Result<&TensorDesc, String> {
            p.tensors.get(t as usize).ok_or_else(|| format!("tensor {t} out of range"))
        };
        let hp = &p.hparams;
        if hp.n_head == 0
            || hp.n_head_kv == 0
            || !hp.n_head.is_multiple_of(hp.n_head_kv)
            || hp.head_dim == 0
            || hp.rope_dim > hp.head_dim
        {
            return Err(format!("inconsistent attention shape {hp:?}"));
        }
        if !(hp.attn_logit_softcap.is_finite() && hp.attn_logit_softcap >= 0.0) {
            return Err(format!("attention soft cap of {}", hp.attn_logit_softcap));
        }
        for op in p.ops.iter() {
            match *op {
                Op::Embed { table, out } => {
                    if tensor(table)?.row_len() != width(out)? {
                        return Err(format!("embedding {} width differs from its output", tensor(table)?.name));
                    }
                }
                Op::RmsNorm { input, weight, out } => {
                    let n = tensor(weight)?.row_len() * tensor(weight)?.rows();
                    if n != width(input)? || width(input)? != width(out)? {
                        return Err(format!("norm {} does not match its input width", tensor(weight)?.name));
                    }
                }
                Op::AddBias { buf, bias } => {
                    let t = tensor(bias)?;
                    if t.row_len() * t.rows() != width(buf)? {
                        return Err(format!("bias {} does not match its activation's width", t.name));
                    }
                }
                Op::HeadRmsNorm { buf, weight, head_dim } => {
                    if head_dim == 0
                        || tensor(weight)?.row_len() != head_dim as usize
                        || width(buf)? % head_dim as usize != 0
                    {
                        return Err(format!("head norm {} does not match head width {head_dim}", tensor(weight)?.name));
                    }
                }
                Op::MatMul { input, weight, out } => {
                    let t = tensor(weight)?;
                    if t.row_len() != width(input)? || t.rows() != width(out)? {
                        return Err(format!(
                            "{} is {:?} but is applied to width {} giving width {}",
                            t.name,
                            t.dims,
                            width(input)?,
                            width(out)?
                        ));
                    }
                }
                Op::Rope { buf, head_dim, .. } => {
                    if head_dim == 0 || width(buf)? % head_dim as usize != 0 {
                        return Err("rope width is not a whole number of heads".into());
                    }
                }
                Op::Attention { layer, q, k, v, out, span } => {
                    if span == (AttentionSpan::Window { keys: 0 }) {
                        return Err(format!("attention of layer {layer} has an empty window"));
                    }
                    let kvd = (hp.n_head_kv * hp.head_dim) as usize;
                    let qd = (hp.n_head * hp.head_dim) as usize;
                    if layer >= hp.n_layer
                        || width(q)? != qd
                        || width(out)? != qd
                        || width(k)? != kvd
                        || width(v)? != kvd
                    {
                        return Err(format!("attention of layer {layer} has mismatched widths"));
                    }
                }
                Op::SwiGlu { gate, up, out } | Op::GeluGlu { gate, up, out } | Op::Add { a: gate, b: up, out } => {
                    if width(gate)? != width(up)? || width(up)? != width(out)? {
                        return Err("elementwise op over different widths".into());
                    }
                }
                Op::Moe { input, router, gate_exps, up_exps, down_exps, n_used, out } => {
                    let (r, g, u, d) = (tensor(router)?, tensor(gate_exps)?, tensor(up_exps)?, tensor(down_exps)?);
                    let n_exp = r.rows();
                    let ok = g.dims.len() == 3
                        && u.dims == g.dims
                        && d.dims.len() == 3
                        && r.row_len() == width(input)?
                        && g.row_len() == width(input)?
                        && g.dims[2] as usize == n_exp
                        && d.dims[2] as usize == n_exp
                        && d.row_len() == g.dims[1] as usize
                        && d.dims[1] as usize == width(out)?
                        && n_used >= 1
                        && n_used as usize <= n_exp;
                    if !ok {
                        return Err(format!("MoE tensors {} / {} have inconsistent shapes", g.name, d.name));
                    }
                }
                Op::Scale { buf, factor } => {
                    width(buf)?;
                    if !factor.is_finite() {
                        return Err(format!("scale by {factor}"));
                    }
                }
                Op::ScaleRotated { buf, head_dim, dims, factor } => {
                    // Backends may pack both widths into one 32-bit word.
                    if head_dim == 0 || head_dim >= 1 << 16 || dims > head_dim || width(buf)? % head_dim as usize != 0 {
                        return Err(format!("scale of {dims} of each {head_dim} elements of a head"));
                    }
                    if !factor.is_finite() {
                        return Err(format!("scale by {factor}"));
                    }
                }
                Op::SoftCap { buf, cap } => {
                    width(buf)?;
                    if !(cap.is_finite() && cap > 0.0) {
                        return Err(format!("soft cap of {cap}"));
                    }
                }
                Op::SelectLogitRows { input, out } => {
                    if width(input)? != width(out)? || input == out {
                        return Err("row selection must copy into another buffer of the same width".into());
                    }
                }
                Op::Output { input } => {
                    if width(input)? != hp.n_vocab as usize {
                        return Err("output width is not the vocabulary size".into());
                    }
                }
            }
        }
        Ok(())
    }
}

/// Shape facts of a small model of `n_layer` layers (one 64-wide head), for tests.
#[cfg(test)]
pub(crate) fn test_hparams(n_layer: u32) -> Hparams {
    Hparams {
        n_layer,
        n_embd: 64,
        n_head: 1,
        n_head_kv: 1,
        head_dim: 64,
        n_vocab: 8,
        n_ctx_train: 64,
        rms_eps: 1e-6,
        rope_base: 10_000.0,
        rope_base_local: 10_000.0,
        rope_dim: 64,
        rope_style: RopeStyle::Neox,
        rope_freq_scale: 1.0,
        rope_freq_factors: RVec::new(),
        attn_logit_softcap: 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program of one `ScaleRotated` op over an activation of `width`.
    fn scale_rotated(width: u32, head_dim: u32, dims: u32, factor: f32) -> ModelProgram {
        let hparams = test_hparams(1);
        ModelProgram {
            arch: "test".into(),
            hparams,
            tensors: RVec::new(),
            activation_widths: vec![width].into(),
            ops: vec![Op::ScaleRotated { buf: 0, head_dim, dims, factor }].into(),
        }
    }

    /// Heads that do not divide the activation, more scaled elements than a head has, heads too
    /// wide for the 16 bits a backend may pack them into, and a non-finite factor are refused.
    #[test]
    fn a_scale_of_rotated_elements_is_checked_against_its_heads() {
        assert_eq!(scale_rotated(256, 64, 48, 1.4).check_shapes(), Ok(()));
        for bad in [
            scale_rotated(256, 60, 48, 1.4),
            scale_rotated(256, 64, 65, 1.4),
            scale_rotated(256, 0, 0, 1.4),
            scale_rotated(1 << 17, 1 << 16, 48, 1.4),
            scale_rotated(256, 64, 48, f32::NAN),
        ] {
            assert!(bad.check_shapes().is_err(), "{:?}", bad.ops[0]);
        }
    }
}
