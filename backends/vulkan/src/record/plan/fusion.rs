//! The fusion rules of the plan, one function each: when a norm folds into the products after
//! it, which products share one dispatch, when a SwiGLU or a residual add becomes a product's
//! epilogue, and which path an MoE block takes (and so whether it takes the residual add).

use super::{liveness::read_before_written, PlanFacts, ProductInput, QkvRope, TensorFacts};
use crate::catalogue::q8_activations;
use crate::context::Capabilities;
use crate::record::{q8_tiled_min_rows, GROUPED_MIN_SLOTS, MAX_GROUPS};
use zinc_formats::GgmlType;
use zinc_plugin_api::{Hparams, Op};

pub(super) use crate::record::tiles::side_by_side;

/// Longest row whose 8-bit activations fit the shared-activation kernel's shared memory
/// (`MAX_SHARED_K` in shaders/matmul/matmul_q8.comp: 16 KiB of values and 4 KiB of scales).
pub(in crate::record) const SHARED_X_MAX_K: u32 = 16384;

/// What the norm rules look at besides the ops.
pub(super) struct Context<'a> {
    pub(super) hp: &'a Hparams,
    pub(super) width: &'a dyn Fn(u32) -> u32,
    pub(super) facts: &'a PlanFacts,
}

/// Whether plain products of `rows` rows over `w` read as `read` take the decode row kernel
/// that stages the activation row in shared memory (matmul_q8 `sgx`): one row of 8-bit
/// activations (not their half copy), rows of up to SHARED_X_MAX_K, on a device with it.
pub(super) fn shared_x(w: TensorFacts, rows: u32, read: ProductInput, caps: Capabilities) -> bool {
    read.is_quantized()
        && !matches!(read, ProductInput::Half { .. })
        && rows == 1
        && w.row_len <= SHARED_X_MAX_K
        && caps.shared_x
}

/// Whether a plain product of `rows` rows over `w` runs on matrix units (matmul_coopmat.comp),
/// reading its input's half-precision copy.
pub(in crate::record) fn on_matrix_units(w: TensorFacts, rows: u32, caps: Capabilities) -> bool {
    caps.coopmat && q8_activations(w.dtype) && rows >= q8_tiled_min_rows(caps)
}

/// The products after one of `input` over `w` (the next two ops at most) that can share its
/// dispatch: the same input, weights of the same type and row length (a layer's Q, K and V;
/// gate and up). Each as (weight, output).
pub(super) fn products_beside(ops: &[Op], facts: &PlanFacts, (input, w): (u32, TensorFacts)) -> Vec<(u32, u32)> {
    ops.iter()
        .take(2)
        .map_while(|op| match *op {
            Op::MatMul { input: i, weight, out: o } if i == input && o != input => {
                let t = facts.tensor(weight);
                (t.dtype == w.dtype && t.row_len == w.row_len).then_some((weight, o))
            }
            _ => None,
        })
        .collect()
}

/// The norm's weight and output when `ops` starts with a residual add in place followed by a
/// norm of its result (one fused dispatch).
pub(super) fn add_then_norm(ops: &[Op]) -> Option<(u32, u32)> {
    let [Op::Add { a, b, out }, Op::RmsNorm { input, weight, out: normed }, ..] = *ops else { return None };
    ((out == a || out == b) && input == out).then_some((weight, normed))
}

/// Whether the RMS norm writing `normed` (`n` rows), followed by `after`, folds into the
/// products after it: a one-row step on the shared-activation decode kernels (32-wide subgroup
/// sums, integer dot products), the next op an 8-bit product of `normed` (or the Q/K/V unit
/// with RoPE epilogue, its three weights of one type so that they are one dispatch), and
/// nothing after those products reading `normed` (its f32 values and 8-bit copy are never
/// written). Saves the norm's one-workgroup dispatch and a barrier: each of the products'
/// workgroups normalises the row while staging it.
pub(super) fn norm_folds(after: &[Op], (normed, n): (u32, u32), ctx: &Context) -> bool {
    let Context { hp, width, facts } = *ctx;
    let Some(&Op::MatMul { input, weight, out }) = after.first() else { return false };
    let w = facts.tensor(weight);
    let k = width(normed);
    let fits = n == 1
        && facts.caps.shared_x
        && input == normed
        && out != normed
        && q8_activations(w.dtype)
        && k.is_multiple_of(32)
        && k <= SHARED_X_MAX_K
        && facts.q8.contains(&normed);
    // Q, K and V with the RoPE epilogue take the norm in each of their dispatches
    // ([`qkv_dispatches`]), whatever their types.
    let spanned = match QkvRope::find(after, hp, width, facts, n) {
        Some(_) => QkvRope::LEN,
        None => 1 + products_beside(&after[1..], facts, (input, w)).len(),
    };
    fits && !read_before_written(&after[spanned..], normed)
}

/// The dispatches of a layer's Q, K and V products with the RoPE epilogue, as ranges of roles
/// (0 Q, 1 K, 2 V): each run of consecutive products over one weight type is one dispatch, the
/// kernel taking each feature's role from where its product's features start. Q4_K_M files
/// give V (and not Q and K) Q6_K in about half the layers: Q and K then share one dispatch and
/// V has its own.
pub(in crate::record) fn qkv_dispatches(types: [GgmlType; 3]) -> Vec<std::ops::Range<usize>> {
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for (role, ty) in types.iter().enumerate() {
        match out.last_mut() {
            Some(r) if types[r.start] == *ty => r.end = role + 1,
            _ => out.push(role..role + 1),
        }
    }
    out
}

/// Whether the RMS norm writing `normed` (`n` rows) folds into the MoE block first in `after`:
/// one row, an f32 router (whose decode product then normalises the row itself and writes the
/// normalised row's 8-bit copy, see shaders/matmul/matmul.comp), experts whose gate and up read that
/// 8-bit copy, and nothing after the block reading `normed` (its f32 values are never written).
pub(super) fn moe_norm_folds(after: &[Op], (normed, n): (u32, u32), ctx: &Context) -> bool {
    let Some(&Op::Moe { input, router, gate_exps, up_exps, .. }) = after.first() else { return false };
    let (facts, r) = (ctx.facts, ctx.facts.tensor(router));
    n == 1
        && input == normed
        && r.dtype == GgmlType::F32
        && (ctx.width)(normed).is_multiple_of(32)
        && r.rows_per_matrix <= MAX_GROUPS
        && q8_activations(facts.tensor(gate_exps).dtype)
        && q8_activations(facts.tensor(up_exps).dtype)
        && facts.q8.contains(&normed)
        && !read_before_written(&after[1..], normed)
}

/// The output of the SwiGLU first in `after` when it folds into the decode product of gate and
/// up side by side (`products`: gate's, then up's) as its epilogue (matmul_q8 `_glu_sgx`):
/// the ops allow it ([`glu_pattern`]), the products take the shared-activation kernel
/// (`shared_x`; it exists for every 8-bit-activation format, with integer dot products), the
/// two have one width of whole 32-wide blocks, and the SwiGLU's 8-bit copy exists (the down
/// product reads it).
pub(super) fn glu_folds(
    after: &[Op],
    products: &[(u32, u32)],
    (shared_x, facts): (bool, &PlanFacts),
    width: &dyn Fn(u32) -> u32,
) -> Option<u32> {
    let &[(gate_w, gate), (up_w, up)] = products else { return None };
    let out = glu_pattern(after, gate, up)?;
    let f = facts.tensor(gate_w).rows_per_matrix;
    let fits = shared_x && facts.tensor(up_w).rows_per_matrix == f && f.is_multiple_of(32) && width(out) == f;
    (fits && facts.q8.contains(&out)).then_some(out)
}

/// The output of the SwiGLU first in `after` when it reads `gate` as its gate and `up` as its
/// up and nothing after it reads either (the fused kernel never writes their own values),
/// except where the SwiGLU writes its result in place of one of them, as the model programs
/// do: that activation then holds the result.
pub(super) fn glu_pattern(after: &[Op], gate: u32, up: u32) -> Option<u32> {
    let Some(&Op::SwiGlu { gate: g, up: u, out }) = after.first() else { return None };
    let unread = |a: u32| a == out || !read_before_written(&after[1..], a);
    (g == gate && u == up && gate != up && unread(gate) && unread(up)).then_some(out)
}

/// The residual that the op first in `after` adds a product's output `out` (`n` rows) to in
/// place, when nothing after that add reads `out`: the product can add to the residual itself.
/// Not when the residual is `norm_source`, the row a norm folded into the product reads: its
/// workgroups would normalise values that others have already added to.
pub(super) fn residual_folds(
    after: &[Op],
    (out, n): (u32, u32),
    rows: &[u32],
    norm_source: Option<u32>,
) -> Option<u32> {
    let Some(&Op::Add { a, b, out: res }) = after.first() else { return None };
    let other = if res == a {
        b
    } else if res == b {
        a
    } else {
        return None;
    };
    let folds = other == out
        && res != out
        && norm_source != Some(res)
        && rows[res as usize] == n
        && !read_before_written(&after[1..], out);
    folds.then_some(res)
}

/// How an MoE block's experts are computed, decided by its slots (rows × experts per row), the
/// experts' weights and the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::record) struct MoePath {
    /// Slots grouped by expert into tiles (many slots), so each expert's weights are read once
    /// per 64 slots.
    pub(in crate::record) grouped: bool,
    /// SwiGLU as the epilogue of gate and up (few slots, gate and up of one form).
    pub(in crate::record) swiglu_epilogue: bool,
    /// The top-k inside the expert kernel's gate/up dispatch instead of a dispatch of its own.
    pub(in crate::record) route_in_experts: bool,
    /// The down products and their weighted sum in one dispatch, which can add to a residual.
    pub(in crate::record) down_combined: bool,
}

/// The path of an MoE block of `slots` slots over experts `[gate, up, down]` on `caps`.
pub(in crate::record) fn moe_path(slots: u32, [gate, up, down]: [TensorFacts; 3], caps: Capabilities) -> MoePath {
    let q8 = |t: TensorFacts| q8_activations(t.dtype);
    let grouped = slots >= GROUPED_MIN_SLOTS && [gate, up, down].into_iter().all(q8);
    let same_form = up.dtype == gate.dtype && up.row_len == gate.row_len && up.rows_per_matrix == gate.rows_per_matrix;
    let swiglu_epilogue = !grouped && same_form && q8(down) && gate.rows_per_matrix.is_multiple_of(32);
    let subgroups = caps.subgroup_width.is_some();
    MoePath {
        grouped,
        swiglu_epilogue,
        route_in_experts: swiglu_epilogue && q8(gate) && subgroups,
        down_combined: !grouped && q8(down) && subgroups,
    }
}
