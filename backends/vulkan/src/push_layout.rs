//! The push constants of every kernel, declared once: the fields each `layout(push_constant)`
//! block of `shaders/` declares, in order, for each [`KernelId`]. Recording checks every
//! dispatch's push constants against its kernel's layout (in debug builds, so every test run
//! does), and a test reads the shaders, keeps the lines the kernel's defines select, and
//! checks the block it finds against the layout, so a shader edit that moves a field fails a
//! test instead of reading the wrong value on a user's device.

use crate::catalogue::{ExpertEpilogue, KernelId, RowEpilogue, RowReduce};

/// A push-constant field's kind: what the builder ([`crate::kernels::Push`]) wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A 64-bit device address (a buffer reference or `uint64_t`).
    Addr,
    /// A 32-bit unsigned integer.
    U32,
    /// A 32-bit float.
    F32,
}

/// One field as the shader declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Its name in the shader's block.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
}

/// A kernel's push constants, in declaration order.
pub type Layout = &'static [Field];

const fn a(name: &'static str) -> Field {
    Field { name, kind: Kind::Addr }
}
const fn u(name: &'static str) -> Field {
    Field { name, kind: Kind::U32 }
}
const fn f(name: &'static str) -> Field {
    Field { name, kind: Kind::F32 }
}

const EMBED: Layout = &[a("table"), a("tokens"), a("out_"), u("width"), u("row_bytes")];
const RMS_NORM: Layout = &[a("x"), a("add"), a("weight"), a("out_"), a("xq"), a("xds"), u("width"), f("eps")];
const ROPE: Layout = &[a("x"), a("positions"), a("inv_freq"), u("width"), u("head_dim"), u("half_rot"), u("neox")];
const ELEMENTWISE: Layout = &[a("a"), a("b"), a("out_"), u("n"), u("op"), f("factor"), u("width")];
const GATHER_ROWS: Layout = &[a("x"), a("rows"), a("out_"), u("width")];
const LOGIT_SUMMARY: Layout = &[a("x"), a("out_"), u("n"), u("first"), u("k")];
const KV_STORE: Layout = &[
    a("k"),
    a("v"),
    a("kv"),
    a("positions"),
    a("row_pages"),
    a("page_tables"),
    u("kv_dim"),
    u("layer"),
    u("n_layer"),
    u("page_size"),
];
const ROPE_KV_STORE: Layout = &[
    a("q"),
    a("k"),
    a("v"),
    a("kv"),
    a("positions"),
    a("row_pages"),
    a("page_tables"),
    a("inv_freq"),
    a("q_norm"),
    a("k_norm"),
    u("n_head"),
    u("n_head_kv"),
    u("head_dim"),
    u("half_rot"),
    u("neox"),
    u("layer"),
    u("n_layer"),
    u("page_size"),
    f("eps"),
];
/// Attention's one-row and tiled kernels.
const ATTENTION: Layout = &[
    a("q"),
    a("kv"),
    a("out_"),
    a("positions"),
    a("row_pages"),
    a("page_tables"),
    a("xq"),
    a("xds"),
    a("partial"),
    u("n_head"),
    u("n_head_kv"),
    u("head_dim"),
    u("layer"),
    u("n_layer"),
    u("page_size"),
    f("scale"),
    u("n_rows"),
    u("skip_tiled"),
    u("splits"),
    u("window"),
    f("softcap"),
];
/// The one-row kernel with the decode prelude: counts packed two to a word (128 bytes).
const ATTENTION_PRELUDE: Layout = &[
    a("q"),
    a("kv"),
    a("out_"),
    a("positions"),
    a("xq_or_partial"),
    a("xds"),
    a("k_in"),
    a("v_in"),
    a("inv_freq"),
    a("q_norm"),
    a("k_norm"),
    u("row_pages_at"),
    u("page_tables_at"),
    u("heads"),
    u("dims"),
    u("layers"),
    u("page_size"),
    f("scale"),
    u("splits"),
    u("neox_window"),
    f("eps"),
];
const ATTENTION_MERGE: Layout = &[a("partial"), a("out_"), a("xq"), a("xds"), u("n_head"), u("head_dim"), u("splits")];
const QUANTIZE_Q8: Layout = &[a("x"), a("xq"), a("xds"), u("k")];
const SPLIT_SUM: Layout =
    &[a("partial"), a("out_"), a("out2"), a("out3"), u("n_out"), u("n_rows"), u("splits"), u("split1"), u("split2")];
const Q8_TO_HALF: Layout = &[a("xq"), a("xds"), a("out_"), u("n_blocks")];
const SWIGLU_Q8: Layout = &[a("gate"), a("up"), a("out_"), a("xq"), a("xds"), u("n_blocks")];
const MOE_GROUP: Layout = &[a("ids"), a("group"), u("n_slots"), u("n_expert")];
const MOE_ROUTE: Layout = &[a("logits"), a("ids"), a("weights"), u("n_expert"), u("n_used"), u("n_rows")];
const MOE_COMBINE: Layout = &[a("y"), a("weights"), a("out_"), u("width"), u("n_used")];
/// The tiled products' head: weights, activations, output, expert ids and the shape.
const TILED: Layout = &[
    a("w"),
    a("x"),
    a("xq"),
    a("out_"),
    a("ids"),
    u("k"),
    u("n_out"),
    u("n_rows"),
    u("row_bytes"),
    u("expert_bytes"),
    u("mode"),
    u("n_used"),
];
/// The tiled head, then up to three products side by side.
const COOPMAT: Layout = &[
    a("w"),
    a("x"),
    a("xh"),
    a("out_"),
    a("ids"),
    u("k"),
    u("n_out"),
    u("n_rows"),
    u("row_bytes"),
    u("expert_bytes"),
    u("mode"),
    u("n_used"),
    a("w2"),
    a("w3"),
    a("out2"),
    a("out3"),
    u("split1"),
    u("split2"),
];
/// The row kernels' (shaders/matmul/matmul_push.glsl): products side by side, a folded norm,
/// a residual add.
const ROW: Layout = &[
    a("w"),
    a("x"),
    a("xq"),
    a("out_"),
    a("ids"),
    u("k"),
    u("n_out"),
    u("n_rows"),
    u("row_bytes"),
    u("expert_bytes"),
    u("mode"),
    u("n_used"),
    a("w2"),
    a("w3"),
    a("out2"),
    a("out3"),
    u("split1"),
    u("split2"),
    a("norm_w"),
    f("eps"),
    u("accumulate"),
];
/// The row kernel with the RoPE / KV-store epilogue.
const ROW_ROPE_KV: Layout = &[
    a("w"),
    a("x"),
    a("xq"),
    a("out_"),
    a("positions"),
    a("inv_freq"),
    a("kv"),
    a("row_pages"),
    a("page_tables"),
    a("w2"),
    a("w3"),
    u("k"),
    u("n_out"),
    u("n_rows"),
    u("row_bytes"),
    u("head_rot"),
    u("layer"),
    u("n_layer"),
    u("page_size"),
    u("split1"),
    u("split2"),
];
/// The same with the norm folded in (the staged-row kernel): the norm's weights in the 8-bit
/// row's place, `eps` in the row count's.
const ROW_ROPE_KV_NORMED: Layout = &[
    a("w"),
    a("x"),
    a("norm_w"),
    a("out_"),
    a("positions"),
    a("inv_freq"),
    a("kv"),
    a("row_pages"),
    a("page_tables"),
    a("w2"),
    a("w3"),
    u("k"),
    u("n_out"),
    f("eps"),
    u("row_bytes"),
    u("head_rot"),
    u("layer"),
    u("n_layer"),
    u("page_size"),
    u("split1"),
    u("split2"),
];
/// The experts' down products with their weighted sum.
const EXPERT_COMBINE: Layout = &[
    a("w"),
    a("x"),
    a("xq"),
    a("out_"),
    a("ids"),
    a("slot_w"),
    u("k"),
    u("n_out"),
    u("n_rows"),
    u("row_bytes"),
    u("expert_bytes"),
    u("n_used"),
    u("accumulate"),
];
/// The experts' gate and up products with SwiGLU (and the router's top-k).
const EXPERT_SWIGLU: Layout = &[
    a("w"),
    a("x"),
    a("xq"),
    a("out_q"),
    a("ids"),
    u("k"),
    u("n_out"),
    u("n_rows"),
    u("row_bytes"),
    u("expert_bytes"),
    u("n_used"),
    a("w2"),
    a("out_ds"),
    a("logits"),
    a("slot_w"),
    u("n_expert"),
];

impl KernelId {
    /// The push constants this kernel declares.
    pub fn push_layout(self) -> Layout {
        use KernelId::*;
        match self {
            RmsNorm { .. } => RMS_NORM,
            Rope => ROPE,
            Elementwise => ELEMENTWISE,
            GatherRows => GATHER_ROWS,
            LogitSummary => LOGIT_SUMMARY,
            KvStore => KV_STORE,
            RopeKvStore => ROPE_KV_STORE,
            Attention { prelude: true, .. } => ATTENTION_PRELUDE,
            Attention { prelude: false, .. } | AttentionTiled { .. } => ATTENTION,
            AttentionMerge => ATTENTION_MERGE,
            QuantizeQ8 => QUANTIZE_Q8,
            Q8ToHalf => Q8_TO_HALF,
            SwigluQ8 => SWIGLU_Q8,
            MoeGroup => MOE_GROUP,
            MoeRoute => MOE_ROUTE,
            MoeCombine => MOE_COMBINE,
            Embed(_) => EMBED,
            MatmulFloatTiled { .. } | MatmulQ8Tiled { .. } => TILED,
            MatmulCoopmat { .. } => COOPMAT,
            SplitSum => SPLIT_SUM,
            Matmul { .. } => ROW,
            MatmulQ8 { reduce: RowReduce::SharedX, epilogue: RowEpilogue::RopeKv, .. } => ROW_ROPE_KV_NORMED,
            MatmulQ8 { epilogue: RowEpilogue::RopeKv, .. } => ROW_ROPE_KV,
            MatmulQ8 { .. } => ROW,
            MatvecQ8 { epilogue: ExpertEpilogue::Plain, .. } => ROW,
            MatvecQ8 { epilogue: ExpertEpilogue::Combine, .. } => EXPERT_COMBINE,
            MatvecQ8 { epilogue: ExpertEpilogue::Swiglu, .. } => EXPERT_SWIGLU,
        }
    }
}

/// Why pushed constants do not fit a layout: the first field that differs, or a field the
/// kernel declares and the push lacks. Extra fields after the declared ones are allowed (the
/// plain products pass the row kernels' whole layout to every product kernel, and the tiled
/// ones read only its head).
pub fn mismatch(layout: Layout, pushed: &[Kind]) -> Option<String> {
    for (i, field) in layout.iter().enumerate() {
        match pushed.get(i) {
            Some(&k) if k == field.kind => {}
            Some(&k) => return Some(format!("field {i} `{}` is {:?}, pushed {k:?}", field.name, field.kind)),
            None => return Some(format!("field {i} `{}` ({:?}) not pushed", field.name, field.kind)),
        }
    }
    None
}

#[cfg(test)]
mod tests;
