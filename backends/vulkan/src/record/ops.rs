//! The dispatches of the ops that take more than one kernel or choose between kernels:
//! matrix products (row, tiled, expert), norms with their fusions, SwiGLU (the MoE block is
//! in moe.rs).

use super::plan::{Elementwise, SHARED_X_MAX_K};
use super::tiles::{coopmat_dims, coopmat_tile, split_k, split_sum, SplitOutputs};
use super::{
    q8_tiled_min_rows, recorder::Recorder, StepView, FEATURES_PER_GROUP, FLOAT_TILE, MAX_GROUPS, MAX_NORM_WIDTH,
    ROWS_PER_GROUP, TILE, TILED_MIN_ROWS,
};
use crate::catalogue::{CoopmatTile, Dot, ExpertEpilogue, KernelId, RowEpilogue, RowReduce};
use crate::{context::Capabilities, kernels::Push, step_buffers::Q8Buf, weights::DeviceTensor};
use zinc_formats::GgmlType;
use zinc_plugin_api::{PluginError, PluginResult};

/// A matrix product to record.
pub(super) struct MatMul<'t> {
    pub(super) w: &'t DeviceTensor,
    pub(super) x: u64,
    pub(super) q8: Option<&'t Q8Buf>,
    pub(super) out: u64,
    pub(super) rows: u32,
    /// 0: plain; 1: expert gate/up (input row r / n_used); 2: expert down.
    pub(super) mode: u32,
    pub(super) ids: u64,
    pub(super) n_used: u32,
    /// Slots grouped by expert (moe_group.comp): expert products take the tiled kernel.
    pub(super) group: u64,
    /// Experts of the grouped product.
    pub(super) n_experts: u32,
    /// RoPE / KV-store epilogue (llama's Q, K and V in decode-sized steps).
    pub(super) rope: Option<RopeKv>,
    /// The half-precision copy of the 8-bit input (q8_to_half.comp) that the matrix-unit
    /// kernel reads; 0 when the product takes another kernel.
    pub(super) half: u64,
    /// Up to two more products of the same input, their weights and outputs, recorded in the
    /// same matrix-unit dispatch side by side (see [`super::tiles::side_by_side`]).
    pub(super) beside: Vec<(&'t DeviceTensor, u64)>,
    /// The RMS norm of the input, folded into the shared-activation decode kernel (which then
    /// reads the f32 row before the norm); `q8` is then not read.
    pub(super) norm: Option<FoldedNorm>,
    /// The product adds its result to `out` (the residual add after it, folded into the
    /// shared-activation decode kernel).
    pub(super) accumulate: bool,
    /// The SwiGLU after a gate product (this one) and its up product (the one beside it),
    /// folded in as their epilogue: `out` is then the SwiGLU's f32 output, and this its 8-bit
    /// copy (shaders/matmul/matmul_q8.comp's GLU_OUT).
    pub(super) glu: Option<&'t Q8Buf>,
    /// Scratch for the partial sums of a matrix-unit product split over k
    /// (`CoopmatTile::ShortSplit`); 0 where the device has none (the product is then not split).
    pub(super) partial: u64,
}

/// An RMS norm that the products reading its output compute themselves (see [`MatMul::norm`]):
/// the address of the f32 row it reads, its weights and epsilon.
#[derive(Clone, Copy)]
pub(super) struct FoldedNorm {
    pub(super) x: u64,
    pub(super) weight: u64,
    pub(super) eps: f32,
}

/// The epilogue of a Q, K or V product (matmul_q8.comp with ROPE_KV): rotate pairs (2i, 2i+1)
/// of Q or K, write K or V to the KV pages.
pub(super) struct RopeKv {
    /// 0: Q (rotate), 1: K (rotate, store), 2: V (store).
    pub(super) role: u32,
    pub(super) layer: u32,
    pub(super) n_layer: u32,
    pub(super) head_dim: u32,
    pub(super) half_rot: u32,
    pub(super) page_size: u32,
    /// KV pool address.
    pub(super) kv: u64,
    /// The step inputs' base address, and the positions, row-page and page-table arrays in it.
    pub(super) inputs: u64,
    pub(super) paging: [u64; 3],
    pub(super) inv_freq: u64,
}

impl<'t> MatMul<'t> {
    /// A plain product: every row against the same weight matrix.
    pub(super) fn plain(w: &'t DeviceTensor, x: u64, q8: Option<&'t Q8Buf>, out: u64, rows: u32) -> MatMul<'t> {
        MatMul {
            w,
            x,
            q8,
            out,
            rows,
            mode: 0,
            ids: 0,
            n_used: 1,
            group: 0,
            n_experts: 0,
            rope: None,
            half: 0,
            beside: Vec::new(),
            norm: None,
            accumulate: false,
            glu: None,
            partial: 0,
        }
    }
}

/// Writes the half-precision copy of the 8-bit activations `q` (`blocks` blocks of 32) to
/// `half`, in the order matmul_coopmat.comp reads.
pub(super) fn q8_to_half(rec: &mut Recorder, q: &Q8Buf, half: u64, blocks: u32) -> PluginResult<()> {
    let push = Push::default().addr(q.qs.address).addr(q.ds.address).addr(half).u32(blocks);
    let groups = blocks.div_ceil(64);
    let grid = [groups.min(MAX_GROUPS), groups.div_ceil(MAX_GROUPS), 1];
    rec.dispatch(KernelId::Q8ToHalf, push, grid, &[q.qs.address, q.ds.address], &[half])
}

pub(super) fn matmul(rec: &mut Recorder, m: MatMul, caps: Capabilities) -> PluginResult<()> {
    // With products side by side, the dispatch covers all their features.
    let n_out = m.w.rows_per_matrix + m.beside.iter().map(|(w, _)| w.rows_per_matrix).sum::<u32>();
    // Only the expert modes read it (a plain matrix may pass 4 GiB).
    let expert_bytes = if m.mode != 0 { m.w.expert_bytes()? } else { 0 };
    // Prompt chunks of 32-element formats take the tiled kernel, which reads each weight
    // block once per 64 rows; decode and small batches the row kernels.
    let tiled = m.q8.is_some() && ((m.mode == 0 && m.rows >= q8_tiled_min_rows(caps)) || m.group != 0);
    let ids = if m.group != 0 { m.group } else { m.ids };
    // Prompt-chunk products (plain, or grouped by expert) on matrix units where the caller
    // made the input's half copy (see `on_matrix_units`).
    let coopmat = tiled && m.half != 0;
    // Prompt chunks of the other types (floats, K-quants: f32 activations) take 32 × 32
    // tiles (shaders/matmul/matmul_float_tiled.comp).
    let float_tiled = m.q8.is_none() && m.mode == 0 && m.rows >= TILED_MIN_ROWS;
    debug_assert!(
        m.beside.is_empty() || (coopmat && m.group == 0) || (m.q8.is_some() && !tiled),
        "products side by side exist on matrix units and in the 8-bit row kernel only"
    );
    let (x, xq) = match m.q8 {
        Some(_) if coopmat => (0, m.half),
        Some(_) if m.norm.is_some() => (m.norm.map_or(0, |n| n.x), 0),
        Some(q) => (q.ds.address, q.qs.address),
        None => (m.x, 0),
    };
    let kernel = if coopmat {
        let tile =
            if m.group != 0 { CoopmatTile::Grouped } else { coopmat_tile(n_out, m.rows, m.w.row_len, m.partial != 0) };
        KernelId::MatmulCoopmat { ty: m.w.dtype, tile }
    } else if m.q8.is_some() && expert_subgroups(&m, tiled, caps).is_some() {
        KernelId::MatvecQ8 { ty: m.w.dtype, dot: Dot::of(caps.int_dot), epilogue: ExpertEpilogue::Plain }
    } else if m.q8.is_some() && tiled {
        KernelId::MatmulQ8Tiled { ty: m.w.dtype, dot: Dot::of(caps.int_dot) }
    } else if m.q8.is_some() {
        let epilogue = if m.glu.is_some() { RowEpilogue::Glu } else { RowEpilogue::Plain };
        q8_row_kernel(m.w.dtype, caps, shared_x(&m, caps), epilogue)
    } else if float_tiled {
        KernelId::MatmulFloatTiled { ty: m.w.dtype, low_mem: caps.float_tiles_unpadded }
    } else {
        KernelId::Matmul { ty: m.w.dtype, subgroup: false }
    };
    if let Some(e) = &m.rope {
        debug_assert!(!tiled && m.q8.is_some(), "the RoPE epilogue exists in the 8-bit row kernel only");
        return rope_matmul(rec, &m, e, caps, (x, xq));
    }
    // A product split over k writes slices of partial sums to the scratch, added after it.
    let split = matches!(kernel, KernelId::MatmulCoopmat { tile: CoopmatTile::ShortSplit, .. })
        .then(|| split_k(n_out, m.w.row_len));
    let push = Push::default()
        .addr(m.w.buf.address)
        .addr(x)
        .addr(xq)
        .addr(if split.is_some() { m.partial } else { m.out })
        .addr(ids)
        .u32(m.w.row_len)
        .u32(n_out)
        .u32(m.rows)
        .u32(m.w.row_bytes)
        .u32(expert_bytes)
        .u32(m.mode)
        .u32(m.n_used);
    // Second and third weights and outputs, and where their features start (every kernel of
    // these pushes reads them or ignores the tail).
    let part = |i: usize| m.beside.get(i).map_or((0, 0, 0), |(w, out)| (w.buf.address, *out, w.rows_per_matrix));
    let ((w2, out2, n2), (w3, out3, _)) = (part(0), part(1));
    // With the SwiGLU epilogue `out_` takes its f32 result, the places of the up product's
    // output and the third product's its 8-bit copy.
    let (out2, out3) = m.glu.map_or((out2, out3), |q| (q.qs.address, q.ds.address));
    let split1 = if m.beside.is_empty() { n_out } else { m.w.rows_per_matrix };
    let split2 = if m.beside.len() == 2 { split1 + n2 } else { n_out };
    let push = push.addr(w2).addr(w3).addr(out2).addr(out3).u32(split1).u32(split2);
    debug_assert!((m.norm.is_none() && !m.accumulate) || shared_x(&m, caps), "folded into `sgx` only");
    let norm_w = m.norm.map_or(0, |n| n.weight);
    let push = push.addr(norm_w).f32(m.norm.map_or(0.0, |n| n.eps)).u32(m.accumulate as u32);
    let mut writes = vec![m.out];
    match m.glu {
        Some(q) => writes.extend([q.qs.address, q.ds.address]),
        None => writes.extend(m.beside.iter().map(|(_, out)| *out)),
    }
    let split_outs = split.map(|splits| SplitOutputs { splits, outs: [m.out, out2, out3], at: [split1, split2] });
    if split.is_some() {
        writes = vec![m.partial];
    }
    // Grouped expert tiles (64 slots of one expert) are the same on both tiled kernels.
    let groups = if tiled && m.group != 0 {
        // Tiles of one expert each: at most ceil(slots / 64) + one partial tile per expert.
        [n_out.div_ceil(TILE), m.rows.div_ceil(TILE) + m.n_experts, 1]
    } else if coopmat {
        let (features, rows) = coopmat_dims(coopmat_tile(n_out, m.rows, m.w.row_len, false));
        [n_out.div_ceil(features), m.rows.div_ceil(rows), split.unwrap_or(1)]
    } else if float_tiled {
        [n_out.div_ceil(FLOAT_TILE), m.rows.div_ceil(FLOAT_TILE), 1]
    } else if tiled {
        [n_out.div_ceil(TILE), m.rows.div_ceil(TILE), 1]
    } else if let Some(width) = expert_subgroups(&m, tiled, caps) {
        // Expert products at decode (matvec_q8): subgroups loop over groups of features, so
        // the grid is capped; expert slots are its rows.
        [matvec_groups(n_out, width), m.rows, 1]
    } else if m.glu.is_some() {
        // A workgroup per 32-wide block of the SwiGLU's output at a time.
        [glu_groups(split1 / 32), 1, 1]
    } else if shared_x(&m, caps) {
        // Decode on the row kernel with the activation row in shared memory (see SHARED_X_GROUPS).
        [n_out.div_ceil(SHARED_X_FEATURES).min(SHARED_X_GROUPS), 1, 1]
    } else if m.q8.is_some() && m.mode == 0 && m.rows == 1 && caps.int_dot && caps.subgroup_reduce {
        // Decode on the 8-bit row kernel with subgroup sums (matmul_q8 `sg`): it loops over
        // features, so the grid is capped. Other kernels take one launch per feature pair.
        let [x, _, z] = row_kernel_groups(n_out, 1, 0, m.w);
        [(x * z).min(DECODE_GROUPS), 1, 1]
    } else {
        row_kernel_groups(n_out, m.rows, m.mode, m.w)
    };
    let mut reads = vec![m.w.buf.address, x, ids];
    reads.extend(m.beside.iter().map(|(w, _)| w.buf.address));
    if xq != 0 {
        reads.push(xq);
    }
    if m.accumulate {
        reads.push(m.out);
    }
    if norm_w != 0 {
        reads.push(norm_w);
    }
    rec.dispatch(kernel, push, groups, &reads, &writes)?;
    match split_outs {
        Some(s) => split_sum(rec, m.partial, &s, n_out, m.rows),
        None => Ok(()),
    }
}

/// The 8-bit row kernel for weights of `ty` on a device with `caps`: subgroup sums where
/// subgroups are 32 wide and integer dot products exist, the activation row staged in
/// workgroup memory where the caller chose that (`staged`, see [`shared_x`]).
pub(super) fn q8_row_kernel(ty: GgmlType, caps: Capabilities, staged: bool, epilogue: RowEpilogue) -> KernelId {
    let reduce = if staged {
        RowReduce::SharedX
    } else if caps.int_dot && caps.subgroup_reduce {
        RowReduce::Subgroup
    } else {
        RowReduce::Workgroup
    };
    KernelId::MatmulQ8 { ty, dot: Dot::of(caps.int_dot), reduce, epilogue }
}

/// Features one workgroup of the shared-activation decode kernel (matmul_q8 `sgx`: 512
/// invocations, a feature per subgroup of 32) computes at a time.
const SHARED_X_FEATURES: u32 = 16;
/// Its grid: subgroups loop over features, and 264 workgroups of 512 hold as many invocations
/// as the `sg` kernel's capped grid (DECODE_GROUPS of 64) while copying the activation row
/// 264 times instead of 2,048. Chosen on the H200 against other grids and workgroup sizes
/// (docs/measurements/vulkan-h200-session11-2026-12-03/).
const SHARED_X_GROUPS: u32 = 264;
/// Workgroups of the SwiGLU epilogue's kernel (matmul_q8 `_glu_sgx`) for `blocks` 32-wide
/// blocks of its output: at most SHARED_X_GROUPS, every workgroup taking the same number of
/// blocks (an uneven share would leave the last round part-empty anyway). Larger grids were
/// slower for every `sgx` product on the H200 (docs/measurements/vulkan-h200-session14-2026-12-04/p3),
/// as two workgroups of 512 per multiprocessor is what stays resident.
fn glu_groups(blocks: u32) -> u32 {
    let rounds = blocks.div_ceil(SHARED_X_GROUPS).max(1);
    blocks.div_ceil(rounds)
}

/// Whether product `m` takes the decode row kernel that reads its activation row from shared
/// memory (matmul_q8 `sgx`): one row of a plain product (others beside it allowed) on a
/// device with 32-wide subgroup sums and integer dot products, rows of up to SHARED_X_MAX_K.
pub(super) fn shared_x(m: &MatMul, caps: Capabilities) -> bool {
    m.q8.is_some()
        && m.rows == 1
        && m.mode == 0
        && m.rope.is_none()
        && m.half == 0
        && m.w.row_len <= SHARED_X_MAX_K
        && caps.shared_x
}

/// Output features one subgroup of the expert decode kernel computes (`FPS` in
/// shaders/matmul/matvec_q8.comp).
const MATVEC_FEATURES_PER_SUBGROUP: u32 = 4;

/// The subgroup width when product `m` runs on the expert decode kernel
/// (shaders/matmul/matvec_q8.comp): expert slots over 8-bit activations, not grouped into tiles, on
/// a device with subgroup arithmetic. Plain decode products stay on the row kernel, which
/// measured faster for them on the H200 (its one feature per subgroup keeps more subgroups
/// in flight: dense 7.4B tg128 386 against 282 with four features per subgroup, 358 with two).
fn expert_subgroups(m: &MatMul, tiled: bool, caps: Capabilities) -> Option<u32> {
    let experts = m.q8.is_some() && !tiled && m.mode != 0;
    caps.subgroup_width.filter(|_| experts)
}

/// Workgroups (of 64 invocations) along the features of an expert decode-kernel grid.
fn matvec_groups(n_out: u32, subgroup: u32) -> u32 {
    let per_group = MATVEC_FEATURES_PER_SUBGROUP * (64 / subgroup);
    n_out.div_ceil(per_group).min(DECODE_GROUPS)
}

/// Most workgroups of a decode grid whose subgroups loop over features instead of one launch
/// per feature group (the row kernel's subgroup-sum variant, the expert kernels).
pub(super) const DECODE_GROUPS: u32 = 2048;

/// Workgroups of the row kernel over weights `w`: FEATURES_PER_GROUP features each (one for
/// f32 weights, `TPR` 64 in shaders/matmul/matmul.comp), folded into z past the per-dimension limit;
/// ROWS_PER_GROUP rows each in mode 0, one row in the expert modes.
fn row_kernel_groups(n_out: u32, rows: u32, mode: u32, w: &DeviceTensor) -> [u32; 3] {
    let y = if mode == 0 { rows.div_ceil(ROWS_PER_GROUP) } else { rows };
    let per_group = if w.dtype == zinc_formats::GgmlType::F32 { 1 } else { FEATURES_PER_GROUP };
    let wgs = n_out.div_ceil(per_group);
    [wgs.min(MAX_GROUPS), y, wgs.div_ceil(MAX_GROUPS)]
}

/// A layer's Q, K and V products with their RoPE / KV-store epilogue (row kernel, 8-bit
/// activations): side by side in one dispatch when `m` carries K and V beside Q, else the one
/// product of `e.role`. K and V go to the KV pages only (attention reads them there).
fn rope_matmul(
    rec: &mut Recorder,
    m: &MatMul,
    e: &RopeKv,
    caps: Capabilities,
    (x, xq): (u64, u64),
) -> PluginResult<()> {
    // With the norm folded in (decode; see FoldedNorm): the shared-activation kernel, which
    // reads the f32 row and the norm's weights instead of the 8-bit row, and `eps` in the
    // place of the row count.
    let folded = m.norm.filter(|_| caps.shared_x && m.rows == 1);
    if m.norm.is_some() && folded.is_none() {
        return Err(PluginError::device("vulkan: internal error: a norm was folded into a Q/K/V product off `sgx`"));
    }
    let kernel = q8_row_kernel(m.w.dtype, caps, folded.is_some(), RowEpilogue::RopeKv);
    let (x, xq) = match folded {
        Some(norm) => (norm.x, norm.weight),
        None => (x, xq),
    };
    let n_out = m.w.rows_per_matrix + m.beside.iter().map(|(w, _)| w.rows_per_matrix).sum::<u32>();
    // The dispatch's products by role: this one's (`e.role`), then those beside it. Where K's
    // and V's features start, and each role's weights (a role without a product: this one's).
    let mut parts: [Option<&DeviceTensor>; 3] = [None; 3];
    for (i, t) in std::iter::once(m.w).chain(m.beside.iter().map(|(t, _)| *t)).enumerate() {
        parts[e.role as usize + i] = Some(t);
    }
    let features = |r: usize| parts[r].map_or(0, |t| t.rows_per_matrix);
    let weights = |r: usize| parts[r].map_or(m.w.buf.address, |t| t.buf.address);
    let (split1, split2) = (features(0), features(0) + features(1));
    let (w, w2, w3) = (weights(0), weights(1), weights(2));
    let push = Push::default()
        .addr(w)
        .addr(x)
        .addr(xq)
        .addr(m.out)
        .addr(e.paging[0])
        .addr(e.inv_freq)
        .addr(e.kv)
        .addr(e.paging[1])
        .addr(e.paging[2])
        .addr(w2)
        .addr(w3)
        .u32(m.w.row_len)
        .u32(n_out);
    // The row count, or with the norm folded in its epsilon in the same place.
    let push = match folded {
        Some(norm) => push.f32(norm.eps),
        None => push.u32(m.rows),
    };
    let push = push
        .u32(m.w.row_bytes)
        .u32(e.head_dim | e.half_rot << 16)
        .u32(e.layer)
        .u32(e.n_layer)
        .u32(e.page_size)
        .u32(split1)
        .u32(split2);
    let mut reads = vec![w, x, xq, e.inputs, e.inv_freq];
    reads.extend(m.beside.iter().map(|(t, _)| t.buf.address));
    let groups = if folded.is_some() {
        // Feature pairs, a subgroup each at a time, SHARED_X_FEATURES subgroups per workgroup.
        [(n_out / 2).div_ceil(SHARED_X_FEATURES).min(SHARED_X_GROUPS), 1, 1]
    } else {
        row_kernel_groups(n_out, m.rows, 0, m.w)
    };
    debug_assert!(e.head_dim < 1 << 16 && e.half_rot < 1 << 16);
    match (m.beside.is_empty(), e.role) {
        (false, _) => rec.dispatch(kernel, push, groups, &reads, &[m.out, e.kv]),
        (true, 0) => rec.dispatch(kernel, push, groups, &reads, &[m.out]),
        (true, 1) => rec.dispatch(kernel, push, groups, &reads, &[e.kv]),
        // V rows go to other halves of the pages K's rows just went to.
        _ => rec.dispatch_beside(kernel, push, groups, &reads, &[e.kv]),
    }
}

/// RMS norm of `input` (after `input += add` when given) into `out`, also writing the 8-bit
/// copy of `out` when a matmul will read it.
pub(super) fn rms_norm(
    rec: &mut Recorder,
    view: &StepView,
    (input, add, weight, out): (u32, Option<u32>, u32, u32),
    n: u32,
    width: u32,
) -> PluginResult<()> {
    let StepView { bufs, weights, hp, .. } = *view;
    let eps = hp.rms_eps;
    let act = |a: u32| bufs.acts[a as usize].address;
    let g = weights.vectors[&weight].address;
    if width > MAX_NORM_WIDTH {
        return Err(zinc_plugin_api::PluginError::unsupported(format!(
            "vulkan: norm over {width} elements (the kernel stages rows of up to {MAX_NORM_WIDTH} in shared memory)"
        )));
    }
    let q8 = bufs.q8.get(&out).filter(|_| width.is_multiple_of(32));
    let (xq, xds) = q8.map_or((0, 0), |q| (q.qs.address, q.ds.address));
    let add_addr = add.map_or(0, act);
    let push =
        Push::default().addr(act(input)).addr(add_addr).addr(g).addr(act(out)).addr(xq).addr(xds).u32(width).f32(eps);
    let mut writes = vec![act(out)];
    let mut reads = vec![act(input), g];
    if add.is_some() {
        writes.push(act(input));
        reads.push(add_addr);
    }
    if q8.is_some() {
        writes.extend([xq, xds]);
    }
    rec.dispatch(norm_kernel(rec.ctx.caps), push, Recorder::folded(n), &reads, &writes)
}

/// The norm kernel for the device: the row staged in workgroup memory (40 KiB), or each
/// thread's elements in registers where the device offers less (see `Capabilities`).
pub(super) fn norm_kernel(caps: Capabilities) -> KernelId {
    KernelId::RmsNorm { low_mem: caps.norm_in_registers }
}

/// `out = silu(gate) * up` over `n_blocks` blocks of 32, with its 8-bit copy.
pub(super) fn swiglu_q8(
    rec: &mut Recorder,
    gate: u64,
    up: u64,
    out: u64,
    q: &Q8Buf,
    n_blocks: u32,
) -> PluginResult<()> {
    let push = Push::default().addr(gate).addr(up).addr(out).addr(q.qs.address).addr(q.ds.address).u32(n_blocks);
    rec.dispatch(
        KernelId::SwigluQ8,
        push,
        // One workgroup per eight blocks (a word of four values per thread).
        Recorder::folded(n_blocks.div_ceil(8)),
        &[gate, up],
        &[out, q.qs.address, q.ds.address],
    )
}

impl Elementwise {
    /// The shader's op code, factor and row width.
    fn push(self) -> (u32, f32, u32) {
        match self {
            Elementwise::Add => (0, 0.0, 0),
            Elementwise::SwiGlu => (1, 0.0, 0),
            Elementwise::GeluGlu => (2, 0.0, 0),
            Elementwise::Scale(f) => (3, f, 0),
            Elementwise::SoftCap(cap) => (5, cap, 0),
            Elementwise::AddBias { width } => (4, 0.0, width),
            // Both widths in one word: heads are far narrower than 65,536 (the op checks).
            Elementwise::ScaleRotated { head_dim, dims, factor } => (6, factor, head_dim | dims << 16),
        }
    }
}

/// Records `out = op(a, b)` over `n` elements.
pub(super) fn elementwise(
    rec: &mut Recorder,
    (a, b, out): (u64, u64, u64),
    n: u32,
    op: Elementwise,
) -> PluginResult<()> {
    let (code, factor, width) = op.push();
    let push = Push::default().addr(a).addr(b).addr(out).u32(n).u32(code).f32(factor).u32(width);
    rec.dispatch(KernelId::Elementwise, push, Recorder::folded(n.div_ceil(256)), &[a, b], &[out])
}
