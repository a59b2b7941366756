//! The MoE block's dispatches: the router's product and top-k, then the experts' products —
//! grouped by expert into tiles for many slots, or for few slots (decode) on the expert
//! kernels (SwiGLU as the gate/up epilogue, the weighted sum inside the down products) where
//! the device has subgroup arithmetic, else on the row kernel with SwiGLU and the weighted
//! sum as dispatches of their own.

use super::{
    ops::{elementwise, matmul, q8_to_half, swiglu_q8, Elementwise, FoldedNorm, MatMul, DECODE_GROUPS},
    recorder::Recorder,
    StepView, GROUPED_MIN_SLOTS,
};
use crate::catalogue::q8_activations;
use crate::catalogue::{Dot, ExpertEpilogue, KernelId};
use crate::{
    kernels::Push,
    step_buffers::{MoeScratch, Q8Buf},
    weights::DeviceTensor,
};
use zinc_formats::GgmlType;
use zinc_plugin_api::PluginResult;

/// One MoE op of the program: its activations and tensors, and the rows of the step.
pub(super) struct MoeOp {
    pub(super) input: u32,
    pub(super) router: u32,
    pub(super) gate_exps: u32,
    pub(super) up_exps: u32,
    pub(super) down_exps: u32,
    pub(super) n_used: u32,
    pub(super) out: u32,
    pub(super) n: u32,
    /// The residual that `out` is added to in place right after the block (the program's next
    /// op), when nothing else reads `out`: the block may add its sum to it instead of writing
    /// `out` (see [`moe`]).
    pub(super) residual: Option<u64>,
    /// The RMS norm that writes `input`, folded into the router's product (see
    /// `moe_norm_folds`): `input`'s f32 values are then never written, only its 8-bit copy.
    pub(super) norm: Option<FoldedNorm>,
}

/// Records the MoE block. Returns whether it added its result to `m.residual` (the experts'
/// combined down products do where they take one dispatch) rather than writing `m.out`.
pub(super) fn moe(rec: &mut Recorder, view: &StepView, m: MoeOp, width: &dyn Fn(u32) -> u32) -> PluginResult<bool> {
    let StepView { bufs, weights, caps, .. } = *view;
    let s = bufs.moe.as_ref().expect("MoE scratch allocated for MoE programs");
    let x = bufs.acts[m.input as usize].address;
    let out = bufs.acts[m.out as usize].address;
    let (router, gate, up, down) =
        (weights.tensor(m.router), weights.tensor(m.gate_exps), weights.tensor(m.up_exps), weights.tensor(m.down_exps));
    if let Some(norm) = m.norm {
        normed_router(rec, router, norm, &bufs.q8[&m.input], s.logits.address)?;
        rec.q8_current.insert(m.input);
    }
    let input_q8 = |rec: &mut Recorder, w: &DeviceTensor| -> PluginResult<Option<&Q8Buf>> {
        if !q8_activations(w.dtype) {
            return Ok(None);
        }
        rec.current_q8(bufs, (m.input, width(m.input), m.n)).map(Some)
    };
    if m.norm.is_none() {
        let q = input_q8(rec, router)?;
        matmul(rec, MatMul::plain(router, x, q, s.logits.address, m.n), caps)?;
    }
    let n_expert = router.rows_per_matrix;
    let slots = m.n * m.n_used;
    let ids = s.ids.address;
    // Many slots: group them by expert once, so each expert's weights are read per 64 slots.
    let grouped = slots >= GROUPED_MIN_SLOTS && [gate, up, down].iter().all(|w| q8_activations(w.dtype));
    let ff = gate.rows_per_matrix;
    let same_form = up.dtype == gate.dtype && up.row_len == gate.row_len && up.rows_per_matrix == ff;
    let swiglu_epilogue = !grouped && same_form && q8_activations(down.dtype) && ff % 32 == 0;
    // Few slots on the expert kernels (gate and up with the SwiGLU epilogue): the top-k is
    // that kernel's prologue, not a dispatch of its own.
    let route_in_experts = swiglu_epilogue && q8_activations(gate.dtype) && caps.subgroup_width.is_some();
    if !route_in_experts {
        let push = Push::default()
            .addr(s.logits.address)
            .addr(s.ids.address)
            .addr(s.weights.address)
            .u32(n_expert)
            .u32(m.n_used)
            .u32(m.n);
        let writes = [s.ids.address, s.weights.address];
        rec.dispatch(KernelId::MoeRoute, push, Recorder::folded(m.n), &[s.logits.address], &writes)?;
    }
    let group = if grouped {
        let push = Push::default().addr(ids).addr(s.groups.address).u32(slots).u32(n_expert);
        rec.dispatch(KernelId::MoeGroup, push, [1, 1, 1], &[ids], &[s.groups.address])?;
        s.groups.address
    } else {
        0
    };
    // Grouped expert products run on matrix units where the device has them, reading half
    // copies of their 8-bit inputs.
    let half = bufs.half_acts.as_ref().filter(|_| grouped && caps.coopmat).map(|b| b.address);
    let expert = |w, x, q8, out, mode| MatMul {
        w,
        x,
        q8,
        out,
        rows: slots,
        mode,
        ids,
        n_used: m.n_used,
        group,
        n_experts: n_expert,
        rope: None,
        half: half.unwrap_or(0),
        beside: Vec::new(),
        norm: None,
        accumulate: false,
        glu: None,
    };
    let q = input_q8(rec, gate)?;
    if let (Some(h), Some(q)) = (half, q) {
        q8_to_half(rec, q, h, m.n * width(m.input) / 32)?;
    }
    if let (Some(q), Some(sg), true) = (q, caps.subgroup_width, route_in_experts) {
        // Few slots on a device with subgroup arithmetic: the top-k, gate, up, SwiGLU and its
        // 8-bit copy in one dispatch (matvec_q8 `swiglu`, a workgroup per 32 features of a
        // slot, each finding its slot's expert from the router's logits), then the down
        // products with their weighted sum in another.
        let kernel =
            KernelId::MatvecQ8 { ty: gate.dtype, dot: Dot::of(caps.int_dot), epilogue: ExpertEpilogue::Swiglu };
        let expert_bytes = gate.expert_bytes()?;
        let sw = &s.gate_q8;
        let push = Push::default()
            .addr(gate.buf.address)
            .addr(q.ds.address)
            .addr(q.qs.address)
            .addr(sw.qs.address)
            .addr(ids)
            .u32(gate.row_len)
            .u32(ff)
            .u32(slots)
            .u32(gate.row_bytes)
            .u32(expert_bytes)
            .u32(m.n_used)
            .addr(up.buf.address)
            .addr(sw.ds.address)
            .addr(s.logits.address)
            .addr(s.weights.address)
            .u32(n_expert);
        let reads = [gate.buf.address, up.buf.address, q.ds.address, q.qs.address, s.logits.address];
        let writes = [sw.qs.address, sw.ds.address, ids, s.weights.address];
        rec.dispatch(kernel, push, [ff / 32, slots, 1], &reads, &writes)?;
        return moe_down_combined(rec, m, s, (down, sw, out), (sg, caps.int_dot));
    }
    if !grouped && q.is_some() && same_form {
        // Few slots: gate and up side by side in one row-kernel dispatch.
        matmul(rec, MatMul { beside: vec![(up, s.up.address)], ..expert(gate, x, q, s.gate.address, 1) }, caps)?;
    } else {
        matmul(rec, expert(gate, x, q, s.gate.address, 1), caps)?;
        let q = input_q8(rec, up)?;
        matmul(rec, expert(up, x, q, s.up.address, 1), caps)?;
    }
    let q = if q8_activations(down.dtype) {
        swiglu_q8(rec, s.gate.address, s.up.address, s.gate.address, &s.gate_q8, slots * ff / 32)?;
        if let Some(h) = half {
            q8_to_half(rec, &s.gate_q8, h, slots * ff / 32)?;
        }
        Some(&s.gate_q8)
    } else {
        elementwise(rec, (s.gate.address, s.up.address, s.gate.address), slots * ff, Elementwise::SwiGlu)?;
        None
    };
    if let (Some(q), Some(sg), false) = (q, caps.subgroup_width, grouped) {
        return moe_down_combined(rec, m, s, (down, q, out), (sg, caps.int_dot));
    }
    matmul(rec, expert(down, s.gate.address, q, s.down.address, 2), caps)?;
    let n_embd = down.rows_per_matrix;
    let push = Push::default().addr(s.down.address).addr(s.weights.address).addr(out).u32(n_embd).u32(m.n_used);
    rec.dispatch(
        KernelId::MoeCombine,
        push,
        [n_embd.div_ceil(64), m.n, 1],
        &[s.down.address, s.weights.address],
        &[out],
    )?;
    Ok(false)
}

/// The f32 router's product of one row with the RMS norm before it folded in
/// (shaders/matmul.comp with `norm_w` set): every workgroup normalises the f32 row
/// `norm.x` itself, and the first k / 32 write the normalised row's 8-bit copy `q`, which
/// the experts' products read.
fn normed_router(
    rec: &mut Recorder,
    router: &DeviceTensor,
    norm: FoldedNorm,
    q: &Q8Buf,
    logits: u64,
) -> PluginResult<()> {
    let n_expert = router.rows_per_matrix;
    // The plain product layout (shaders/matmul_push.glsl): the 8-bit copy's values in `xq`,
    // its block scales in `out2`, nothing beside.
    let push = Push::default()
        .addr(router.buf.address)
        .addr(norm.x)
        .addr(q.qs.address)
        .addr(logits)
        .addr(0)
        .u32(router.row_len)
        .u32(n_expert)
        .u32(1)
        .u32(router.row_bytes)
        .u32(0)
        .u32(0)
        .u32(0)
        .addr(0)
        .addr(0)
        .addr(q.ds.address)
        .addr(0)
        .u32(n_expert)
        .u32(n_expert)
        .addr(norm.weight)
        .f32(norm.eps)
        .u32(0);
    let reads = [router.buf.address, norm.x, norm.weight];
    let writes = [logits, q.qs.address, q.ds.address];
    // One workgroup per feature, as for every f32 decode product; its sums as subgroup
    // operations where the device has them.
    let kernel = KernelId::Matmul { ty: GgmlType::F32, subgroup: rec.ctx.caps.subgroup_width.is_some() };
    rec.dispatch(kernel, push, [n_expert, 1, 1], &reads, &writes)
}

/// The experts' down products of few slots and their weighted sum in one dispatch
/// (matvec_q8 `combine`, on a device whose subgroups are `subgroup` wide, with integer dot
/// products or not): `q` is the 8-bit copy of the slots' SwiGLU, `out` the MoE output.
fn moe_down_combined(
    rec: &mut Recorder,
    m: MoeOp,
    s: &MoeScratch,
    (down, q, out): (&DeviceTensor, &Q8Buf, u64),
    (subgroup, int_dot): (u32, bool),
) -> PluginResult<bool> {
    let (n_embd, ids) = (down.rows_per_matrix, s.ids.address);
    let out = m.residual.unwrap_or(out);
    let kernel = KernelId::MatvecQ8 { ty: down.dtype, dot: Dot::of(int_dot), epilogue: ExpertEpilogue::Combine };
    let expert_bytes = down.expert_bytes()?;
    let push = Push::default()
        .addr(down.buf.address)
        .addr(q.ds.address)
        .addr(q.qs.address)
        .addr(out)
        .addr(ids)
        .addr(s.weights.address)
        .u32(down.row_len)
        .u32(n_embd)
        .u32(m.n * m.n_used)
        .u32(down.row_bytes)
        .u32(expert_bytes)
        .u32(m.n_used)
        .u32(m.residual.is_some() as u32);
    let mut reads = vec![down.buf.address, q.ds.address, q.qs.address, ids, s.weights.address];
    reads.extend(m.residual);
    // One feature per subgroup (shaders/matvec_q8.comp says why).
    let groups = n_embd.div_ceil(64 / subgroup).min(DECODE_GROUPS);
    rec.dispatch(kernel, push, [groups, m.n, 1], &reads, &[out])?;
    Ok(m.residual.is_some())
}
