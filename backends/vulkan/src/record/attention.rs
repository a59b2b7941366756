//! The attention part of a layer: what lies between the Q/K/V products and the output
//! projection. Where the program has its usual shape (optional per-head Q/K norms, RoPE on Q
//! and K, attention), the norms, rotations and KV store are one dispatch
//! (shaders/attention/rope_kv_store.comp), or part of attention's own workgroups in decode steps whose
//! rows read no other row's new key (`attention.prelude`), or, for llama's pairing in
//! decode-sized steps, the Q/K/V products' epilogue; attention also writes the 8-bit copy of
//! its output. Attention itself takes 16-row tiles of one sequence together in prompt chunks
//! (attention_tiled.comp) and splits each row's (or tile's) keys over workgroups for steps of
//! few rows at long contexts (attention_merge.comp combines them).

use super::{
    ops::{matmul, FoldedNorm, MatMul, RopeKv},
    plan::{qkv_dispatches, Prelude, QkvRope},
    recorder::Recorder,
    LayerKv, StepView, KEY_SPLITS, SPLIT_MAX_ROWS,
};
use crate::catalogue::KernelId;
use crate::{kernels::Push, step_buffers::StepBuffers};
use zinc_plugin_api::{AttentionSpan, KvClass, PluginResult, RopeStyle};

/// Query rows per tile of the prompt-chunk kernel (`TILE_ROWS` in shaders/attention/attention_tiles.glsl).
const TILE_ROWS: u32 = 16;
/// Widest head the prompt-chunk kernel stages (its shared-memory tiles).
const TILED_MAX_HEAD_DIM: u32 = 128;

/// Records the Q, K and V products of `unit` with their RoPE / KV-store epilogues, then
/// attention. The input's 8-bit copy must be current (the caller quantizes it) unless `norm`
/// is folded into the products (decode; they then normalise the row before it themselves).
pub(super) fn record_qkv_rope(
    rec: &mut Recorder,
    view: &StepView,
    unit: &QkvRope,
    rows: u32,
    norm: Option<FoldedNorm>,
) -> PluginResult<()> {
    let StepView { bufs, weights, kv, hp, caps, .. } = *view;
    let act = |a: u32| bufs.acts[a as usize].address;
    let q8 = &bufs.q8[&unit.input];
    let [wq, wk, wv] = unit.weights.map(|t| weights.tensor(t));
    let lk = kv.layer(unit.layer);
    let rope = |role| RopeKv {
        role,
        layer: lk.slot,
        n_layer: lk.layers,
        head_dim: hp.head_dim,
        half_rot: hp.rope_dim / 2,
        page_size: kv.page_size,
        kv: lk.address,
        inputs: bufs.input_dev.address,
        paging: paging(bufs, lk),
        inv_freq: weights.inv_freq(unit.freqs, hp),
    };
    let product = |w, role: u32| MatMul {
        rope: Some(rope(role)),
        ..MatMul::plain(w, act(unit.input), Some(q8), act(unit.acts[role as usize]), rows)
    };
    // One dispatch per run of products over one weight type (the kernel picks each feature's
    // weights), each normalising the row itself where the norm is folded in.
    let ws = [wq, wk, wv];
    for roles in qkv_dispatches(ws.map(|w| w.dtype)) {
        let first = roles.start;
        let beside = (first + 1..roles.end).map(|r| (ws[r], act(unit.acts[r]))).collect();
        matmul(rec, MatMul { beside, norm, ..product(ws[first], first as u32) }, caps)?;
    }
    attention(rec, view, (unit.layer, unit.acts[0], unit.out), unit.span, rows)
}

/// Records the fused norms, rotations and KV store of `unit`, then attention.
pub(super) fn record_prelude(rec: &mut Recorder, view: &StepView, unit: &Prelude, rows: u32) -> PluginResult<()> {
    let StepView { bufs, weights, kv, hp, shape, .. } = *view;
    let act = |a: u32| bufs.acts[a as usize].address;
    let inputs = bufs.input_dev.address;
    let (qn, kn) = unit.norms.map_or((0, 0), |(q, k)| (weights.vectors[&q].address, weights.vectors[&k].address));
    let inv_freq = weights.inv_freq(unit.freqs, hp);
    let lk = kv.layer(unit.layer);
    let fits_packing = [hp.n_head, hp.n_head_kv, hp.head_dim, hp.rope_dim / 2, lk.slot, lk.layers]
        .iter()
        .all(|&v| v <= u16::MAX as u32);
    // The prelude's packed arguments have no room for a soft cap on scores (Gemma 2).
    if shape.one_row_per_sequence && fits_packing && hp.attn_logit_softcap == 0.0 {
        // Each row is the only new key of its sequence: every attention workgroup prepares
        // its own head, and the layer loses rope_kv_store's dispatch and barrier.
        let prelude = HeadPrelude { k: act(unit.k), v: act(unit.v), inv_freq, q_norm: qn, k_norm: kn };
        let head = (unit.layer, unit.q, unit.out);
        return attention_of(rec, view, head, unit.span, rows, Some(&prelude));
    }
    let push = Push::default()
        .addr(act(unit.q))
        .addr(act(unit.k))
        .addr(act(unit.v))
        .addr(lk.address)
        .addrs(&paging(bufs, lk))
        .addr(inv_freq)
        .addr(qn)
        .addr(kn)
        .u32(hp.n_head)
        .u32(hp.n_head_kv)
        .u32(hp.head_dim)
        .u32(hp.rope_dim / 2)
        .u32((hp.rope_style == RopeStyle::Neox) as u32)
        .u32(lk.slot)
        .u32(lk.layers)
        .u32(kv.page_size)
        .f32(hp.rms_eps);
    let mut reads = vec![act(unit.v), inputs, inv_freq];
    reads.extend(unit.norms.map(|_| [qn, kn]).into_iter().flatten());
    rec.dispatch(
        KernelId::RopeKvStore,
        push,
        [hp.n_head + hp.n_head_kv, rows, 1],
        &reads,
        &[act(unit.q), act(unit.k), lk.address],
    )?;
    attention(rec, view, (unit.layer, unit.q, unit.out), unit.span, rows)
}

/// What decode attention reads when it does the head norms, RoPE and KV store itself
/// (`PRELUDE` in shaders/attention/attention.comp): the step's K and V products (Q is its `q`), RoPE's
/// frequencies, and the Q and K head-norm weights (0 when the model has none).
pub(super) struct HeadPrelude {
    k: u64,
    v: u64,
    inv_freq: u64,
    q_norm: u64,
    k_norm: u64,
}

/// The step inputs that locate layer `lk`'s KV pages: each row's position, the offset of its
/// sequence's table of the layer's class, and the tables.
pub(super) fn paging(bufs: &StepBuffers, lk: LayerKv) -> [u64; 3] {
    let l = bufs.layout;
    [bufs.input(l.positions), bufs.input(row_tables(bufs, lk)), bufs.input(l.page_tables)]
}

/// Where the per-row table offsets of `lk`'s class are in the step inputs.
fn row_tables(bufs: &StepBuffers, lk: LayerKv) -> u64 {
    match lk.class {
        KvClass::Full => bufs.layout.row_pages,
        KvClass::Window => bufs.layout.row_window_pages,
    }
}

/// Records the KV store of this step's K and V rows, unfused (programs of another shape).
pub(super) fn kv_store(
    rec: &mut Recorder,
    view: &StepView,
    (layer, k, v): (u32, u32, u32),
    rows: u32,
) -> PluginResult<()> {
    let StepView { bufs, kv, hp, .. } = *view;
    let act = |a: u32| bufs.acts[a as usize].address;
    let kv_dim = hp.n_head_kv * hp.head_dim;
    let lk = kv.layer(layer);
    let push = Push::default()
        .addr(act(k))
        .addr(act(v))
        .addr(lk.address)
        .addrs(&paging(bufs, lk))
        .u32(kv_dim)
        .u32(lk.slot)
        .u32(lk.layers)
        .u32(kv.page_size);
    rec.dispatch(
        KernelId::KvStore,
        push,
        [(kv_dim / 2).div_ceil(64), rows, 1],
        &[act(k), act(v), bufs.input_dev.address],
        &[lk.address],
    )
}

/// Records attention of `q` over the KV pages into `out`, with the 8-bit copy of `out` when
/// a product reads one (recorded as current in `q8_current`). `shape.split_keys`: each row's
/// keys are split over KEY_SPLITS workgroups and merged after (few rows, or a few tiles of a
/// prompt chunk, at long contexts). `shape.one_sequence`: every row belongs to one sequence,
/// so the tiles take them all and the one-row kernel is not recorded beside them.
pub(super) fn attention(
    rec: &mut Recorder,
    view: &StepView,
    head: (u32, u32, u32),
    span: AttentionSpan,
    rows: u32,
) -> PluginResult<()> {
    attention_of(rec, view, head, span, rows, None)
}

/// The kernels' `window` push constant: the keys a query reads up to its own, 0 for all.
fn window_keys(span: AttentionSpan) -> u32 {
    match span {
        AttentionSpan::Full => 0,
        AttentionSpan::Window { keys } => keys,
    }
}

/// [`attention`], with the head norms, RoPE and KV store of its query and KV heads first
/// when `prelude` is given (rows that are each their sequence's only new key; `q` is then the
/// Q product as it left the product, and the one-row kernel takes every row).
fn attention_of(
    rec: &mut Recorder,
    view: &StepView,
    (layer, q, out): (u32, u32, u32),
    span: AttentionSpan,
    rows: u32,
    prelude: Option<&HeadPrelude>,
) -> PluginResult<()> {
    let window = window_keys(span);
    let StepView { bufs, kv, hp, shape, .. } = *view;
    let lk = kv.layer(layer);
    let act = |a: u32| bufs.acts[a as usize].address;
    let q8 = bufs.q8.get(&out).filter(|_| hp.head_dim.is_multiple_of(32));
    let (xq, xds) = q8.map_or((0, 0), |q| (q.qs.address, q.ds.address));
    let scale = 1.0 / (hp.head_dim as f32).sqrt();
    let push = || {
        Push::default()
            .addr(act(q))
            .addr(lk.address)
            .addr(act(out))
            .addrs(&paging(bufs, lk))
            .addr(xq)
            .addr(xds)
            .addr(bufs.attn_partial.address)
            .u32(hp.n_head)
            .u32(hp.n_head_kv)
            .u32(hp.head_dim)
            .u32(lk.slot)
            .u32(lk.layers)
            .u32(kv.page_size)
            .f32(scale)
            .u32(rows)
    };
    // The one-row kernel's push constants for `splits` key splits: with the prelude, packed
    // into 128 bytes (`Packed` in shaders/attention/attention.comp; the counts fit 16 bits, checked by
    // the caller).
    let one_row = |skip_tiled: bool, splits: u32| match prelude {
        Some(h) => {
            let l = bufs.layout;
            Push::default()
                .addr(act(q))
                .addr(lk.address)
                .addr(act(out))
                .addr(bufs.input(l.positions))
                .addr(if splits > 0 { bufs.attn_partial.address } else { xq })
                .addr(xds)
                .addrs(&[h.k, h.v, h.inv_freq, h.q_norm, h.k_norm])
                .u32((row_tables(bufs, lk) - l.positions) as u32)
                .u32((l.page_tables - l.positions) as u32)
                .u32(hp.n_head | hp.n_head_kv << 16)
                .u32(hp.head_dim | (hp.rope_dim / 2) << 16)
                .u32(lk.slot | lk.layers << 16)
                .u32(kv.page_size)
                .f32(scale)
                .u32(splits)
                // RoPE's pairing in bit 0, the window above it.
                .u32((hp.rope_style == RopeStyle::Neox) as u32 | window << 1)
                .f32(hp.rms_eps)
        }
        None => push().u32(skip_tiled as u32).u32(splits).u32(window).f32(hp.attn_logit_softcap),
    };
    let mut writes = vec![act(out)];
    if q8.is_some() {
        writes.extend([xq, xds]);
    }
    let mut reads = vec![act(q), lk.address, bufs.input_dev.address];
    // The prelude also stores the step's K and V rows in their pages.
    let mut kv_writes = vec![];
    if let Some(h) = prelude {
        reads.extend([h.k, h.v, h.inv_freq, h.q_norm, h.k_norm].into_iter().filter(|&a| a != 0));
        kv_writes.push(lk.address);
    }
    let row_kernel =
        KernelId::Attention { subgroup: rec.ctx.caps.subgroup_width.is_some(), prelude: prelude.is_some() };
    // Tiles of rows from one sequence share each staged key and value tile
    // (attention_tiled.comp); the one-row kernel takes the remaining rows (decode rows of other
    // sequences beside a chunk), in the same barrier interval since the two write disjoint
    // rows.
    let tiled = prelude.is_none() && rows >= TILE_ROWS && hp.head_dim <= TILED_MAX_HEAD_DIM;
    let tiles = rows.div_ceil(TILE_ROWS);
    // On matrix units: up to four heads of one KV head per workgroup (one subgroup each),
    // sharing each staged key and value block; 16-key fragments stay within a page.
    let on_matrix_units = rec.ctx.caps.coopmat && hp.head_dim.is_multiple_of(16) && kv.page_size.is_multiple_of(16);
    let (tiled_kernel, head_groups) = if on_matrix_units {
        (KernelId::AttentionTiled { matrix_units: true }, hp.n_head_kv * (hp.n_head / hp.n_head_kv).div_ceil(4))
    } else {
        (KernelId::AttentionTiled { matrix_units: false }, hp.n_head)
    };
    if shape.split_keys && rows <= SPLIT_MAX_ROWS {
        // Both kernels write per-split partial results of their rows; one merge after.
        let partial = bufs.attn_partial.address;
        let one_row = one_row(tiled, KEY_SPLITS);
        if tiled {
            let groups = [head_groups, tiles, KEY_SPLITS];
            rec.dispatch(
                tiled_kernel,
                push().u32(0).u32(KEY_SPLITS).u32(window).f32(hp.attn_logit_softcap),
                groups,
                &reads,
                &[partial],
            )?;
            if !shape.one_sequence {
                rec.dispatch_beside(row_kernel, one_row, [hp.n_head, rows, KEY_SPLITS], &reads, &[partial])?;
            }
        } else {
            let writes = [&[partial][..], &kv_writes].concat();
            rec.dispatch(row_kernel, one_row, [hp.n_head, rows, KEY_SPLITS], &reads, &writes)?;
        }
        let merge = Push::default()
            .addr(partial)
            .addr(act(out))
            .addr(xq)
            .addr(xds)
            .u32(hp.n_head)
            .u32(hp.head_dim)
            .u32(KEY_SPLITS);
        rec.dispatch(KernelId::AttentionMerge, merge, [hp.n_head, rows, 1], &[partial], &writes)?;
    } else {
        let one_row = one_row(tiled, 0);
        let groups = [hp.n_head, rows, 1];
        if tiled {
            rec.dispatch(
                tiled_kernel,
                push().u32(0).u32(0).u32(window).f32(hp.attn_logit_softcap),
                [head_groups, tiles, 1],
                &reads,
                &writes,
            )?;
            if !shape.one_sequence {
                rec.dispatch_beside(row_kernel, one_row, groups, &reads, &writes)?;
            }
        } else {
            writes.extend(&kv_writes);
            rec.dispatch(row_kernel, one_row, groups, &reads, &writes)?;
        }
    }
    Ok(())
}
