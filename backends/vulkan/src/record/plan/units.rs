//! The fused attention units the plan finds in a program: the shapes of ops that become one
//! unit of dispatches (see [`Prelude`] and [`QkvRope`]).

use super::PlanFacts;
use crate::catalogue::q8_activations;
use zinc_plugin_api::{AttentionSpan, Hparams, Op, RopeFreqs, RopeStyle};

/// The ops `[HeadRmsNorm q, HeadRmsNorm k,] Rope q, Rope k, Attention` as one unit.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::record) struct Prelude {
    /// Per-head norm weights of Q and K (qwen3), or none.
    pub(in crate::record) norms: Option<(u32, u32)>,
    pub(in crate::record) q: u32,
    pub(in crate::record) k: u32,
    pub(in crate::record) v: u32,
    pub(in crate::record) out: u32,
    pub(in crate::record) layer: u32,
    /// RoPE's frequencies (both rotations take the same).
    pub(in crate::record) freqs: RopeFreqs,
    /// The keys each query reads.
    pub(in crate::record) span: AttentionSpan,
    /// Ops the unit spans.
    pub(in crate::record) len: usize,
}

impl Prelude {
    /// The unit starting at `ops[0]`, when the ops have exactly that shape for `hp`'s heads
    /// (`width` gives an activation's row width).
    pub(in crate::record) fn find(ops: &[Op], hp: &Hparams, width: &dyn Fn(u32) -> u32) -> Option<Prelude> {
        let head_dim = hp.head_dim;
        let (norms, rest) = match ops {
            [Op::HeadRmsNorm { buf: q, weight: wq, head_dim: hq }, Op::HeadRmsNorm { buf: k, weight: wk, head_dim: hk }, rest @ ..]
                if *hq == head_dim && *hk == head_dim =>
            {
                (Some((*q, *wq, *k, *wk)), rest)
            }
            _ => (None, ops),
        };
        let [Op::Rope { buf: rq, head_dim: dq, freqs }, Op::Rope { buf: rk, head_dim: dk, freqs: fk }, Op::Attention { layer, q, k, v, out, span }, ..] =
            rest
        else {
            return None;
        };
        let ropes_match = rq == q && rk == k && *dq == head_dim && *dk == head_dim && q != k && k != v && freqs == fk;
        let kv_dim = hp.n_head_kv * head_dim;
        let widths_match = width(*q) == hp.n_head * head_dim && width(*k) == kv_dim && width(*v) == kv_dim;
        let norms_match = norms.is_none_or(|(nq, _, nk, _)| nq == *q && nk == *k);
        (ropes_match && norms_match && widths_match && hp.rope_dim <= head_dim).then(|| Prelude {
            norms: norms.map(|(_, wq, _, wk)| (wq, wk)),
            q: *q,
            k: *k,
            v: *v,
            out: *out,
            layer: *layer,
            freqs: *freqs,
            span: *span,
            len: ops.len() - rest.len() + 3,
        })
    }
}

/// `MatMul q, MatMul k, MatMul v` of one input, then `Rope q, Rope k, Attention`: in steps
/// small enough for the row kernels, with llama's pairing (2i, 2i+1) and 8-bit weights, the
/// rotations and the KV store become the products' epilogue (a workgroup's two features are
/// one pair) and the layer loses the separate RoPE / KV-store stage. K and V then reach the KV
/// pages only and their activations are left unwritten: in this shape nothing but the
/// attention reads them, and it reads the pages.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::record) struct QkvRope {
    pub(in crate::record) input: u32,
    /// Weights of Q, K, V.
    pub(in crate::record) weights: [u32; 3],
    /// Activations Q, K, V.
    pub(in crate::record) acts: [u32; 3],
    pub(in crate::record) out: u32,
    pub(in crate::record) layer: u32,
    pub(in crate::record) freqs: RopeFreqs,
    pub(in crate::record) span: AttentionSpan,
}

impl QkvRope {
    /// Ops spanned: three products and Prelude's three.
    pub(in crate::record) const LEN: usize = 6;

    /// The unit starting at `ops[0]`, when a step of `rows` rows can take it.
    pub(in crate::record) fn find(
        ops: &[Op],
        hp: &Hparams,
        width: &dyn Fn(u32) -> u32,
        facts: &PlanFacts,
        rows: u32,
    ) -> Option<QkvRope> {
        let [Op::MatMul { input, weight: wq, out: q }, Op::MatMul { input: ik, weight: wk, out: k }, Op::MatMul { input: iv, weight: wv, out: v }, rest @ ..] =
            ops
        else {
            return None;
        };
        // The rest is Prelude's shape without Q/K norms, on these products' outputs.
        let tail = Prelude::find(rest, hp, width).filter(|u| u.norms.is_none() && (u.q, u.k, u.v) == (*q, *k, *v))?;
        let kernel_ok = input == ik
            && input == iv
            && q != v
            && hp.rope_style == RopeStyle::Adjacent
            && rows < crate::record::q8_tiled_min_rows(facts.caps)
            && [wq, wk, wv].iter().all(|&&w| q8_activations(facts.tensor(w).dtype));
        kernel_ok.then_some(QkvRope {
            input: *input,
            weights: [*wq, *wk, *wv],
            acts: [*q, *k, *v],
            out: tail.out,
            layer: tail.layer,
            freqs: tail.freqs,
            span: tail.span,
        })
    }
}
