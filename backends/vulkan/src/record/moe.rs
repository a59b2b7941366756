//! The MoE block's dispatches: the router's product and top-k, then the experts' products —
//! grouped by expert into tiles for many slots, or for few slots (decode) on the expert
//! kernels (SwiGLU as the gate/up epilogue, the weighted sum inside the down products) where
//! the device has subgroup arithmetic, else on the row kernel with SwiGLU and the weighted
//! sum as dispatches of their own.

use super::{
    ops::{elementwise, matmul, q8_to_half, swiglu_q8, FoldedNorm, MatMul, DECODE_GROUPS},
    plan::{Elementwise, MoePath, MoeUnit},
    recorder::Recorder,
    StepView,
};
use crate::catalogue::q8_activations;
use crate::catalogue::{Dot, ExpertEpilogue, KernelId};
use crate::{
    kernels::Push,
    step_buffers::{MoeScratch, Q8Buf},
    weights::DeviceTensor,
};
use zinc_formats::GgmlType;
use zinc_plugin_api::{PluginError, PluginResult};

/// Records the MoE block `m`: the experts' products take the path the plan chose, and
/// their combined down products add to `m.add_to` in place where the plan folded the residual
/// add after the block into them.
pub(super) fn moe(rec: &mut Recorder, view: &StepView, m: &MoeUnit, width: &dyn Fn(u32) -> u32) -> PluginResult<()> {
    let StepView { bufs, weights, caps, hp, .. } = *view;
    let s = bufs.moe.as_ref().expect("MoE scratch allocated for MoE programs");
    let act = |a: u32| bufs.acts[a as usize].address;
    let x = act(m.input);
    let out = act(m.add_to.unwrap_or(m.out));
    let n = m.rows;
    let (router, gate, up, down) =
        (weights.tensor(m.router), weights.tensor(m.gate_exps), weights.tensor(m.up_exps), weights.tensor(m.down_exps));
    let path = m.path;
    // The input's 8-bit copy: the step buffers hold one where a product reads it.
    let input_q = || {
        bufs.q8
            .get(&m.input)
            .ok_or_else(|| PluginError::device("vulkan: internal error: no 8-bit copy of an MoE input"))
    };
    if let Some(fold) = m.norm {
        let norm = FoldedNorm { x: act(fold.source), weight: weights.vectors[&fold.weight].address, eps: hp.rms_eps };
        normed_router(rec, router, norm, input_q()?, s.logits.address)?;
    }
    // The input's 8-bit copy, made when the first product that reads it is recorded.
    let mut to_quantize = m.quantize;
    let mut input_q8 = |rec: &mut Recorder, w: &DeviceTensor| -> PluginResult<Option<&Q8Buf>> {
        if !q8_activations(w.dtype) {
            return Ok(None);
        }
        let q = input_q()?;
        if std::mem::take(&mut to_quantize) {
            rec.quantize(x, q, width(m.input), n)?;
        }
        Ok(Some(q))
    };
    if m.norm.is_none() {
        let q = input_q8(rec, router)?;
        matmul(rec, MatMul::plain(router, x, q, s.logits.address, n), caps)?;
    }
    let n_expert = router.rows_per_matrix;
    let slots = n * m.n_used;
    let ids = s.ids.address;
    let ff = gate.rows_per_matrix;
    let MoePath { grouped, route_in_experts, .. } = path;
    let same_form = up.dtype == gate.dtype && up.row_len == gate.row_len && up.rows_per_matrix == ff;
    let group = route(rec, s, (n_expert, m.n_used, n), path)?;
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
        partial: 0,
    };
    let q = input_q8(rec, gate)?;
    if let (Some(h), Some(q)) = (half, q) {
        q8_to_half(rec, q, h, n * width(m.input) / 32)?;
    }
    if let (Some(q), Some(sg), true) = (q, caps.subgroup_width, route_in_experts) {
        fused_gate_up(rec, s, (gate, up), q, (slots, m.n_used, n_expert), caps.int_dot)?;
        return moe_down_combined(
            rec,
            (n, m.n_used, m.add_to.is_some()),
            s,
            (down, &s.gate_q8, out),
            (sg, caps.int_dot),
        );
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
        return moe_down_combined(rec, (n, m.n_used, m.add_to.is_some()), s, (down, q, out), (sg, caps.int_dot));
    }
    matmul(rec, expert(down, s.gate.address, q, s.down.address, 2), caps)?;
    let n_embd = down.rows_per_matrix;
    let push = Push::default().addr(s.down.address).addr(s.weights.address).addr(out).u32(n_embd).u32(m.n_used);
    rec.dispatch(KernelId::MoeCombine, push, [n_embd.div_ceil(64), n, 1], &[s.down.address, s.weights.address], &[out])
}

/// The top-k of the router's logits (unless the expert kernels take it as their prologue)
/// and, for grouped products, the slots grouped by expert; returns the groups' address (0
/// when not grouped).
fn route(
    rec: &mut Recorder,
    s: &MoeScratch,
    (n_expert, n_used, n): (u32, u32, u32),
    path: MoePath,
) -> PluginResult<u64> {
    if !path.route_in_experts {
        let push = Push::default()
            .addr(s.logits.address)
            .addr(s.ids.address)
            .addr(s.weights.address)
            .u32(n_expert)
            .u32(n_used)
            .u32(n);
        let writes = [s.ids.address, s.weights.address];
        rec.dispatch(KernelId::MoeRoute, push, Recorder::folded(n), &[s.logits.address], &writes)?;
    }
    if !path.grouped {
        return Ok(0);
    }
    let push = Push::default().addr(s.ids.address).addr(s.groups.address).u32(n * n_used).u32(n_expert);
    rec.dispatch(KernelId::MoeGroup, push, [1, 1, 1], &[s.ids.address], &[s.groups.address])?;
    Ok(s.groups.address)
}

/// Few slots on a device with subgroup arithmetic: the top-k, gate, up, SwiGLU and its 8-bit
/// copy (`s.gate_q8`) in one dispatch (matvec_q8 `swiglu`, a workgroup per 32 features of a
/// slot, each finding its slot's expert from the router's logits); `q` is the input's 8-bit
/// copy.
fn fused_gate_up(
    rec: &mut Recorder,
    s: &MoeScratch,
    (gate, up): (&DeviceTensor, &DeviceTensor),
    q: &Q8Buf,
    (slots, n_used, n_expert): (u32, u32, u32),
    int_dot: bool,
) -> PluginResult<()> {
    let (ff, ids, sw) = (gate.rows_per_matrix, s.ids.address, &s.gate_q8);
    let kernel = KernelId::MatvecQ8 { ty: gate.dtype, dot: Dot::of(int_dot), epilogue: ExpertEpilogue::Swiglu };
    let expert_bytes = gate.expert_bytes()?;
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
        .u32(n_used)
        .addr(up.buf.address)
        .addr(sw.ds.address)
        .addr(s.logits.address)
        .addr(s.weights.address)
        .u32(n_expert);
    let reads = [gate.buf.address, up.buf.address, q.ds.address, q.qs.address, s.logits.address];
    let writes = [sw.qs.address, sw.ds.address, ids, s.weights.address];
    rec.dispatch(kernel, push, [ff / 32, slots, 1], &reads, &writes)
}

/// The f32 router's product of one row with the RMS norm before it folded in
/// (shaders/matmul/matmul.comp with `norm_w` set): every workgroup normalises the f32 row
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
    // The plain product layout (shaders/matmul/matmul_push.glsl): the 8-bit copy's values in `xq`,
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
    (n, n_used, accumulate): (u32, u32, bool),
    s: &MoeScratch,
    (down, q, out): (&DeviceTensor, &Q8Buf, u64),
    (subgroup, int_dot): (u32, bool),
) -> PluginResult<()> {
    let (n_embd, ids) = (down.rows_per_matrix, s.ids.address);
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
        .u32(n * n_used)
        .u32(down.row_bytes)
        .u32(expert_bytes)
        .u32(n_used)
        .u32(accumulate as u32);
    let mut reads = vec![down.buf.address, q.ds.address, q.qs.address, ids, s.weights.address];
    if accumulate {
        reads.push(out);
    }
    // One feature per subgroup (shaders/matmul/matvec_q8.comp says why).
    let groups = n_embd.div_ceil(64 / subgroup).min(DECODE_GROUPS);
    rec.dispatch(kernel, push, [groups, n, 1], &reads, &[out])
}
