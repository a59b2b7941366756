//! Records one step of the model program into one command buffer: the input copy, every
//! op's dispatches with a barrier only where a dispatch touches memory that an earlier
//! unbarriered one wrote (or writes memory that one read), and the logits copy. A recorded
//! buffer depends only on the step's shape (rows, logit rows), so it is replayed for every
//! later step of the same shape.

use crate::catalogue::q8_activations;
use crate::catalogue::KernelId;
use crate::{
    context::Capabilities,
    context::{vk_err, Context},
    kernels::{Kernels, Push},
    step_buffers::{Q8Buf, StepBuffers},
    weights::{DeviceTensor, Weights},
};
use ash::vk;
use std::collections::HashSet;
use zinc_plugin_api::{Hparams, ModelProgram, Op, PluginError, PluginResult, RopeStyle, SeqChunk, Step};

mod attention;
#[cfg(test)]
mod kernel_choice_tests;
mod liveness;
mod moe;
mod ops;
mod recorder;

use attention::{attention, kv_store, record_prelude, record_qkv_rope, Prelude, QkvRope};
use liveness::read_before_written;
use moe::{moe, MoeOp};
use ops::{
    elementwise, matmul, norm_kernel, on_matrix_units, q8_to_half, rms_norm, shared_x, side_by_side, swiglu_q8,
    Elementwise, FoldedNorm, MatMul, SHARED_X_MAX_K,
};
use recorder::Recorder;

/// What every op's recorder reads for one step: the step's buffers, the weights, the KV
/// pages, the model's shape, the step's shape and the device's capabilities.
#[derive(Clone, Copy)]
pub struct StepView<'a> {
    pub bufs: &'a StepBuffers,
    pub weights: &'a Weights,
    pub kv: &'a KvView,
    pub hp: &'a Hparams,
    pub shape: StepShape,
    pub caps: Capabilities,
}

/// Largest workgroup count in one grid dimension that every device accepts.
const MAX_GROUPS: u32 = 65535;

/// Widest row the norm kernel holds in shared memory (`MAX_WIDTH` in shaders/rms_norm.comp).
pub const MAX_NORM_WIDTH: u32 = 8192;

/// Features and rows per workgroup of the tiled kernel (shaders/matmul_q8_tiled.comp).
const TILE: u32 = 64;
/// Output features and rows per workgroup of the float-weight prompt tiles
/// (shaders/matmul_float_tiled.comp).
const FLOAT_TILE: u32 = 32;
/// Output features and rows per workgroup of the matrix-unit kernel (`BM`, `BN` in
/// shaders/matmul_coopmat.comp), features of its WIDE variant and rows of its SHORT one.
const COOPMAT_FEATURES: u32 = 64;
const COOPMAT_ROWS: u32 = 128;
const COOPMAT_WIDE_FEATURES: u32 = 128;
const COOPMAT_SHORT_ROWS: u32 = 64;
/// Workgroups of the wide variant from which a product takes it. Measured on the H200
/// (docs/measurements/vulkan-h200-prompt-2026-12-03/): with every plain product wide, dense
/// 7.4B pp512 went from 6,389 to 8,241 tok/s (its products have 128 to 448 wide workgroups)
/// while SmolLM2 fell from 59,660 to 56,922 (20 to 48) and the 30B-A3B from 7,811 to 7,731.
const COOPMAT_WIDE_MIN_GROUPS: u32 = 128;
/// Rows from which a plain 32-element-format product takes a tiled kernel (integer tiles or
/// matrix units); fewer take the row kernel, eight rows per pass over the weights. Measured on
/// the H200 with `zinc bench -p N` (docs/measurements/vulkan-h200-2026-12-03/
/// small-chunks-and-slowdown/): the row kernel was faster up to 32 rows for both SmolLM2 and
/// the dense 7.4B (dense pp16 1,224 against 579 tok/s), the tiles from 48 for the dense
/// (1,586 against 1,386). Chunks this small are what a server cuts beside running streams.
const TILED_MIN_ROWS: u32 = 40;
/// Expert slots from which an MoE step's products are grouped by expert into tiles.
const GROUPED_MIN_SLOTS: u32 = 16;

/// Activation rows per matrix-kernel workgroup (`ROWS` in shaders/matmul_common.glsl).
const ROWS_PER_GROUP: u32 = 8;

/// Output features per matrix-kernel workgroup (`RPW` in shaders/matmul_common.glsl).
const FEATURES_PER_GROUP: u32 = 2;

/// Shape facts a recording depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepShape {
    /// Token rows.
    pub rows: u32,
    /// Rows whose logits are returned.
    pub logit_rows: u32,
    /// Attention splits each row's keys over several workgroups (few rows, long contexts:
    /// see [`split_keys`]).
    pub split_keys: bool,
    /// Every row belongs to one sequence (a prompt chunk alone, one stream decoding): the
    /// prompt attention tiles take every row, and nothing else is recorded beside them.
    pub one_sequence: bool,
    /// Every row is its own sequence's only row and reads no other row's new key (decode; see
    /// [`rows_read_only_their_own_new_keys`]): attention takes each row's new key from the
    /// step's K and V products rather than its KV page, so the head norms, RoPE and KV store
    /// join attention's dispatch (`attention.prelude`).
    pub one_row_per_sequence: bool,
}

/// Key splits per row of split attention (`splits` in shaders/attention.comp).
pub const KEY_SPLITS: u32 = 16;
/// Most rows a step may have for split attention (its scratch is sized for this many). Up to
/// four 16-row tiles of a prompt chunk: a chunk cut small beside running decodes, deep in a
/// long prompt, has a few tiles that would each walk the whole context alone; longer chunks
/// have enough tiles to fill the device.
pub const SPLIT_MAX_ROWS: u32 = 64;
/// Context from which a step of few rows splits its keys. Below it the extra merge dispatch
/// (one more barrier per layer) costs more than the parallelism gains.
pub const SPLIT_MIN_CONTEXT: u32 = 512;

/// Whether a step of `rows` rows whose longest context is `longest` tokens splits keys.
pub fn split_keys(rows: u32, longest: u32) -> bool {
    rows <= SPLIT_MAX_ROWS && longest >= SPLIT_MIN_CONTEXT
}

/// Whether each row of `step` is its sequence's only row and the KV slot it writes lies in a
/// page that no row's context maps anywhere else (`page_size` tokens per page): then a row's
/// new key is the only key of the step in its context, and attention may take it from the
/// step's K and V products instead of reading back what the step stores (`attention.prelude`).
/// Steps the scheduler makes always qualify in decode (a page a sequence writes is its own:
/// shared prefixes are copied before a write); page tables that alias the written slots keep
/// the separate KV store, whose order the CPU tier has.
pub fn rows_read_only_their_own_new_keys(step: &Step, page_size: u32) -> bool {
    if step.seqs.len() != step.tokens.len() {
        return false;
    }
    let written_page = |s: &SeqChunk| s.page_table.get((s.n_past / page_size) as usize).copied();
    let mut written: Vec<u32> = step.seqs.iter().filter_map(written_page).collect();
    written.sort_unstable();
    if written.len() != step.seqs.len() || written.windows(2).any(|w| w[0] == w[1]) {
        return false;
    }
    // Every mapped page of every context that is a written page must be that row's own slot.
    step.seqs.iter().all(|s| {
        let own = (s.n_past / page_size) as usize;
        let used = (s.n_past / page_size + 1) as usize;
        s.page_table.iter().take(used).enumerate().all(|(i, p)| i == own || written.binary_search(p).is_err())
    })
}

/// The KV pool as the kernels see it.
pub struct KvView {
    /// Device address of page 0.
    pub address: u64,
    /// Tokens per page.
    pub page_size: u32,
}

/// What a recording holds besides its commands.
pub struct Recording {
    /// Dispatches per replay.
    pub dispatches: u32,
    /// The kernel of each profiled dispatch (empty unless profiling).
    pub names: Vec<String>,
}

/// The query pools a recorded step writes: the step's start and end, and (profiling) one
/// timestamp per dispatch.
#[derive(Clone, Copy)]
pub struct Queries {
    pub timestamps: Option<vk::QueryPool>,
    pub profile: Option<vk::QueryPool>,
}

/// Records `program` for the step `view` describes into `cmd` (begun and ended here).
pub fn record_step(
    ctx: &Context,
    kernels: &mut Kernels,
    cmd: vk::CommandBuffer,
    program: &ModelProgram,
    view: StepView,
    Queries { timestamps, profile }: Queries,
) -> PluginResult<Recording> {
    let StepView { bufs, shape, .. } = view;
    let d = &ctx.device;
    // SAFETY: the command buffer is idle (not pending) and reset by begin.
    unsafe {
        d.begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default()).map_err(vk_err("recording a step"))?;
        if let Some(q) = timestamps {
            d.cmd_reset_query_pool(cmd, q, 0, 2);
            d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, q, 0);
        }
        let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: bufs.layout.len * 4 };
        d.cmd_copy_buffer(cmd, bufs.input_host.buffer, bufs.input_dev.buffer, &[region]);
        if let Some(q) = profile {
            d.cmd_reset_query_pool(cmd, q, 0, crate::profile::CAPACITY);
            d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, q, 0);
        }
    }
    let mut rec = Recorder {
        ctx,
        kernels,
        cmd,
        written: HashSet::new(),
        read: HashSet::new(),
        dispatches: 0,
        profile,
        names: Vec::new(),
        profile_grid: profile.is_some() && std::env::var_os("ZINC_VULKAN_PROFILE").is_some_and(|v| v == "grid"),
        after_transfer: true,
        q8_current: HashSet::new(),
    };
    rec.written.insert(bufs.input_dev.address);
    record_ops(&mut rec, program, &view)?;
    rec.barrier_with(true);
    let (dispatches, names) = (rec.dispatches, std::mem::take(&mut rec.names));
    // SAFETY: as above; the copy reads the logits the last op wrote (barrier recorded).
    unsafe {
        let n_vocab = program.hparams.n_vocab as u64;
        if shape.logit_rows > 0 {
            if let Some(Op::Output { input }) = program.ops.iter().rev().find(|o| matches!(o, Op::Output { .. })) {
                let region =
                    vk::BufferCopy { src_offset: 0, dst_offset: 0, size: shape.logit_rows as u64 * n_vocab * 4 };
                d.cmd_copy_buffer(cmd, bufs.acts[*input as usize].buffer, bufs.logits.buffer, &[region]);
            }
        }
        let to_host = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::TRANSFER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        d.cmd_pipeline_barrier(
            cmd,
            vk::PipelineStageFlags::TRANSFER,
            vk::PipelineStageFlags::HOST,
            vk::DependencyFlags::empty(),
            &to_host,
            &[],
            &[],
        );
        if let Some(q) = timestamps {
            d.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, q, 1);
        }
        d.end_command_buffer(cmd).map_err(vk_err("recording a step"))?;
    }
    Ok(Recording { dispatches, names })
}

fn record_ops(rec: &mut Recorder, program: &ModelProgram, view: &StepView) -> PluginResult<()> {
    let StepView { bufs, weights, hp, shape, caps, .. } = *view;
    let act = |a: u32| bufs.acts[a as usize].address;
    let width = |a: u32| program.activation_widths[a as usize];
    let layout = bufs.layout;
    let (tokens, positions) = (bufs.input(layout.tokens), bufs.input(layout.positions));
    let inputs = bufs.input_dev.address;
    // Rows held by each activation (all of them until logit rows are selected).
    let mut rows = vec![shape.rows; program.activation_widths.len()];

    // The activation whose half-precision copy is in `bufs.half_acts`: valid only across
    // consecutive products of that activation (Q, K, V; gate, up).
    let mut half_of: Option<u32> = None;
    // A norm not yet recorded because the next products fold it in (see `norm_folds`).
    let mut folded_norm: Option<FoldedNorm> = None;

    let ops = &program.ops[..];
    let mut k = 0;
    while k < ops.len() {
        let op = &ops[k];
        k += 1;
        if !matches!(*op, Op::MatMul { input, .. } if half_of == Some(input)) {
            half_of = None;
        }
        if folded_norm
            .is_some_and(|f| !matches!(*op, Op::MatMul { input, .. } | Op::Moe { input, .. } if input == f.normed))
        {
            return Err(PluginError::device("vulkan: internal error: a folded norm's products did not follow it"));
        }
        if let Op::MatMul { input, .. } = *op {
            if let Some(unit) = QkvRope::find(&ops[k - 1..], hp, &width, weights, rows[input as usize]) {
                k += QkvRope::LEN - 1;
                let n = rows[unit.input as usize];
                let norm = folded_norm.take();
                if norm.is_none() {
                    rec.current_q8(bufs, (unit.input, width(unit.input), n))?;
                }
                record_qkv_rope(rec, view, &unit, n, norm)?;
                for a in unit.acts {
                    rows[a as usize] = n;
                }
                rows[unit.out as usize] = n;
                continue;
            }
        }
        if matches!(op, Op::HeadRmsNorm { .. } | Op::Rope { .. }) {
            if let Some(unit) = Prelude::find(&ops[k - 1..], hp, &width) {
                k += unit.len - 1;
                let n = rows[unit.q as usize];
                record_prelude(rec, view, &unit, n)?;
                rec.q8_current.remove(&unit.q);
                rec.q8_current.remove(&unit.k);
                rows[unit.out as usize] = n;
                continue;
            }
        }
        match *op {
            Op::Embed { table, out } => {
                let t = weights.tensor(table);
                let push =
                    Push::default().addr(t.buf.address).addr(tokens).addr(act(out)).u32(width(out)).u32(t.row_bytes);
                rec.dispatch(
                    KernelId::Embed(t.dtype),
                    push,
                    [width(out).div_ceil(64), shape.rows, 1],
                    &[t.buf.address, inputs],
                    &[act(out)],
                )?;
                rows[out as usize] = shape.rows;
                rec.q8_current.remove(&out);
            }
            Op::RmsNorm { input, weight, out } => {
                let n = rows[input as usize];
                rows[out as usize] = n;
                let context = (hp, &width as &dyn Fn(u32) -> u32, weights, bufs, caps);
                if norm_folds(&ops[k..], (out, n), context) || moe_norm_folds(&ops[k..], (out, n), context) {
                    let weight = weights.vectors[&weight].address;
                    folded_norm =
                        Some(FoldedNorm { normed: out, source: input, x: act(input), weight, eps: hp.rms_eps });
                    rec.q8_current.remove(&out);
                    continue;
                }
                rms_norm(rec, view, (input, None, weight, out), n, width(input))?;
            }
            // A residual add in place followed by a norm of its result: one fused dispatch.
            Op::Add { a, b, out }
                if (out == a || out == b) && matches!(ops.get(k), Some(Op::RmsNorm { input, .. }) if *input == out) =>
            {
                let Some(&Op::RmsNorm { weight, out: normed, .. }) = ops.get(k) else { unreachable!() };
                k += 1;
                let other = if out == a { b } else { a };
                let n = rows[out as usize];
                rec.q8_current.remove(&out);
                rms_norm(rec, view, (out, Some(other), weight, normed), n, width(out))?;
                rows[normed as usize] = n;
            }
            Op::SwiGlu { gate, up, out } if bufs.q8.contains_key(&out) && width(out) % 32 == 0 => {
                let n = rows[gate as usize];
                let q = &bufs.q8[&out];
                swiglu_q8(rec, act(gate), act(up), act(out), q, n * width(out) / 32)?;
                rows[out as usize] = n;
                rec.q8_current.insert(out);
            }
            Op::HeadRmsNorm { buf, weight, head_dim } => {
                let g = weights.vectors[&weight].address;
                let push = Push::default()
                    .addr(act(buf))
                    .addr(0)
                    .addr(g)
                    .addr(act(buf))
                    .addr(0)
                    .addr(0)
                    .u32(head_dim)
                    .f32(hp.rms_eps);
                let groups = rows[buf as usize] * (width(buf) / head_dim);
                rec.dispatch(norm_kernel(caps), push, Recorder::folded(groups), &[act(buf), g], &[act(buf)])?;
                rec.q8_current.remove(&buf);
            }
            Op::MatMul { input, weight, out } => {
                let w = weights.tensor(weight);
                let n = rows[input as usize];
                let norm = folded_norm.take();
                let q8 = match norm {
                    Some(_) => Some(&bufs.q8[&input]),
                    None if q8_activations(w.dtype) => Some(rec.current_q8(bufs, (input, width(input), n))?),
                    None => None,
                };
                let mut m = MatMul::plain(w, act(input), q8, act(out), n);
                m.norm = norm;
                // This product's output and those of any recorded beside it.
                let mut outs = vec![out];
                // The next products of this input with weights of the same type and row length
                // (a layer's Q, K and V; gate and up) may share this one's dispatch.
                let next = products_beside(&ops[k..], weights, (input, w));
                let mut beside = 0;
                if let (Some(q), Some(half)) = (q8, &bufs.half_acts) {
                    if on_matrix_units(w, n, caps) {
                        if half_of != Some(input) {
                            q8_to_half(rec, q, half.address, n * width(input) / 32)?;
                            half_of = Some(input);
                        }
                        m.half = half.address;
                        // Side by side on matrix units only when each boundary is a tile edge.
                        let widths: Vec<u32> =
                            std::iter::once(w).chain(next.iter().map(|(t, _)| *t)).map(|t| t.rows_per_matrix).collect();
                        beside =
                            (2..=widths.len()).rev().find(|&len| side_by_side(&widths[..len], n)).map_or(0, |l| l - 1);
                    }
                }
                // The 8-bit row kernel takes its features one by one: any products fit.
                if q8.is_some() && n < TILED_MIN_ROWS {
                    beside = next.len();
                }
                m.beside = next[..beside].iter().map(|&(t, o)| (t, act(o))).collect();
                outs.extend(next[..beside].iter().map(|&(_, o)| o));
                k += outs.len() - 1;
                if m.norm.is_some() && !shared_x(&m, caps) {
                    return Err(PluginError::device(
                        "vulkan: internal error: a norm was folded into a product that cannot compute it",
                    ));
                }
                // The SwiGLU of this gate product and the up product beside it, folded in.
                if let Some((h, q)) = glu_folds(&ops[k..], &outs, (&m, caps), bufs, &width) {
                    m.out = act(h);
                    m.glu = Some(q);
                    outs = vec![h];
                    k += 1;
                }
                // A residual add of this product's output in place (`res += out`, as every
                // attention and FFN block ends) folded into it: the product adds to the residual.
                let norm_source = m.norm.map(|f| f.source);
                if let Some(res) = residual_folds(&ops[k..], (out, n), &rows, norm_source) {
                    if m.beside.is_empty() && shared_x(&m, caps) {
                        m.out = act(res);
                        m.accumulate = true;
                        outs = vec![res];
                        k += 1;
                    }
                }
                let glu = m.glu.is_some();
                matmul(rec, m, caps)?;
                for o in outs {
                    rows[o as usize] = n;
                    // The SwiGLU epilogue writes its output's 8-bit copy too.
                    if glu {
                        rec.q8_current.insert(o);
                    } else {
                        rec.q8_current.remove(&o);
                    }
                }
            }
            Op::Rope { buf, head_dim, freqs } => {
                let half = hp.rope_dim / 2;
                let push = Push::default()
                    .addr(act(buf))
                    .addr(positions)
                    .addr(weights.inv_freq(freqs, hp))
                    .u32(width(buf))
                    .u32(head_dim)
                    .u32(half)
                    .u32((hp.rope_style == RopeStyle::Neox) as u32);
                let pairs = width(buf) / head_dim * half;
                let n = rows[buf as usize];
                rec.dispatch(
                    KernelId::Rope,
                    push,
                    [pairs.div_ceil(64), n, 1],
                    &[act(buf), inputs, weights.inv_freq(freqs, hp)],
                    &[act(buf)],
                )?;
                rec.q8_current.remove(&buf);
            }
            Op::Attention { layer, q, k, v, out, span } => {
                let n = rows[q as usize];
                kv_store(rec, view, (layer, k, v), n)?;
                attention(rec, view, (layer, q, out), span, n)?;
                rows[out as usize] = n;
            }
            Op::SwiGlu { gate: a, up: b, out } | Op::GeluGlu { gate: a, up: b, out } | Op::Add { a, b, out } => {
                let n = rows[a as usize];
                let kind = match op {
                    Op::SwiGlu { .. } => Elementwise::SwiGlu,
                    Op::GeluGlu { .. } => Elementwise::GeluGlu,
                    _ => Elementwise::Add,
                };
                elementwise(rec, (act(a), act(b), act(out)), n * width(out), kind)?;
                rows[out as usize] = n;
                rec.q8_current.remove(&out);
            }
            Op::Scale { buf, factor } => {
                let n = rows[buf as usize];
                elementwise(rec, (act(buf), act(buf), act(buf)), n * width(buf), Elementwise::Scale(factor))?;
                rec.q8_current.remove(&buf);
            }
            Op::AddBias { buf, bias } => {
                let (n, b) = (rows[buf as usize], weights.vectors[&bias].address);
                let kind = Elementwise::AddBias { width: width(buf) };
                elementwise(rec, (act(buf), b, act(buf)), n * width(buf), kind)?;
                rec.q8_current.remove(&buf);
            }
            Op::Moe { input, router, gate_exps, up_exps, down_exps, n_used, out } => {
                let n = rows[input as usize];
                // The residual add after the block, which its combined down products may take.
                let res = residual_folds(&ops[k..], (out, n), &rows, None);
                let residual = res.map(act);
                let norm = folded_norm.take();
                let op = MoeOp { input, router, gate_exps, up_exps, down_exps, n_used, out, n, residual, norm };
                let written = match moe(rec, view, op, &width)? {
                    true => {
                        k += 1;
                        res.unwrap_or(out)
                    }
                    false => out,
                };
                rows[written as usize] = n;
                rec.q8_current.remove(&written);
            }
            Op::SelectLogitRows { input, out } => {
                let push =
                    Push::default().addr(act(input)).addr(bufs.input(layout.logit_rows)).addr(act(out)).u32(width(out));
                rec.dispatch(
                    KernelId::GatherRows,
                    push,
                    [width(out).div_ceil(64), shape.logit_rows, 1],
                    &[act(input), inputs],
                    &[act(out)],
                )?;
                rows[out as usize] = shape.logit_rows;
                rec.q8_current.remove(&out);
            }
            Op::Output { .. } => {}
        }
    }
    Ok(())
}

/// The products after one of `input` over `w` (the next two ops at most) that can share its
/// dispatch: the same input, weights of the same type and row length (a layer's Q, K and V;
/// gate and up).
fn products_beside<'w>(
    ops: &[Op],
    weights: &'w Weights,
    (input, w): (u32, &DeviceTensor),
) -> Vec<(&'w DeviceTensor, u32)> {
    ops.iter()
        .take(2)
        .map_while(|op| match *op {
            Op::MatMul { input: i, weight, out: o } if i == input && o != input => {
                let t = weights.tensor(weight);
                (t.dtype == w.dtype && t.row_len == w.row_len).then_some((t, o))
            }
            _ => None,
        })
        .collect()
}

/// What [`norm_folds`] looks at besides the ops.
type FoldContext<'a> = (&'a Hparams, &'a dyn Fn(u32) -> u32, &'a Weights, &'a StepBuffers, Capabilities);

/// Whether the RMS norm writing `normed` (`n` rows), followed by `after`, folds into the
/// products after it: a one-row step on the shared-activation decode kernels (32-wide subgroup
/// sums, integer dot products), the next op an 8-bit product of `normed` (or the Q/K/V unit
/// with RoPE epilogue, its three weights of one type so that they are one dispatch), and
/// nothing after those products reading `normed` (its f32 values and 8-bit copy are never
/// written). Saves the norm's one-workgroup dispatch and a barrier: each of the products'
/// workgroups normalises the row while staging it.
fn norm_folds(after: &[Op], (normed, n): (u32, u32), (hp, width, weights, bufs, caps): FoldContext) -> bool {
    let Some(&Op::MatMul { input, weight, out }) = after.first() else { return false };
    let w = weights.tensor(weight);
    let k = width(normed);
    let fits = n == 1
        && caps.shared_x
        && input == normed
        && out != normed
        && q8_activations(w.dtype)
        && k % 32 == 0
        && k <= SHARED_X_MAX_K
        && bufs.q8.contains_key(&normed);
    let spanned = match QkvRope::find(after, hp, width, weights, n) {
        Some(unit) => {
            let [q, k, v] = unit.weights.map(|t| weights.tensor(t).dtype);
            (q == k && q == v).then_some(QkvRope::LEN)
        }
        None => Some(1 + products_beside(&after[1..], weights, (input, w)).len()),
    };
    fits && spanned.is_some_and(|ops| !read_before_written(&after[ops..], normed))
}

/// Whether the RMS norm writing `normed` (`n` rows) folds into the MoE block first in `after`:
/// one row, an f32 router (whose decode product then normalises the row itself and writes the
/// normalised row's 8-bit copy, see shaders/matmul.comp), experts whose gate and up read that
/// 8-bit copy, and nothing after the block reading `normed` (its f32 values are never written).
fn moe_norm_folds(after: &[Op], (normed, n): (u32, u32), (_, width, weights, bufs, _): FoldContext) -> bool {
    let Some(&Op::Moe { input, router, gate_exps, up_exps, .. }) = after.first() else { return false };
    let r = weights.tensor(router);
    n == 1
        && input == normed
        && r.dtype == zinc_formats::GgmlType::F32
        && width(normed) % 32 == 0
        && r.rows_per_matrix <= MAX_GROUPS
        && q8_activations(weights.tensor(gate_exps).dtype)
        && q8_activations(weights.tensor(up_exps).dtype)
        && bufs.q8.contains_key(&normed)
        && !read_before_written(&after[1..], normed)
}

/// Whether the SwiGLU first in `after` folds into the decode product of gate and up just
/// recorded side by side (`outs`: gate's output, then up's) as its epilogue (matmul_q8
/// `_glu_sgx`), and if so the SwiGLU's output and its 8-bit copy: the ops allow it
/// ([`glu_pattern`]), the shared-activation kernel takes the product (it exists for every
/// 8-bit-activation format, with integer dot products), the two products have one width of
/// whole 32-wide blocks, and the SwiGLU's 8-bit copy exists (the down product reads it).
fn glu_folds<'b>(
    after: &[Op],
    outs: &[u32],
    (m, caps): (&MatMul, Capabilities),
    bufs: &'b StepBuffers,
    width: &dyn Fn(u32) -> u32,
) -> Option<(u32, &'b Q8Buf)> {
    let (&[gate, up], [(up_w, _)]) = (outs, &m.beside[..]) else { return None };
    let out = glu_pattern(after, gate, up)?;
    let f = m.w.rows_per_matrix;
    let fits = shared_x(m, caps) && up_w.rows_per_matrix == f && f.is_multiple_of(32) && width(out) == f;
    bufs.q8.get(&out).filter(|_| fits).map(|q| (out, q))
}

/// The output of the SwiGLU first in `after` when it reads `gate` as its gate and `up` as its
/// up and nothing after it reads either (the fused kernel never writes their own values),
/// except where the SwiGLU writes its result in place of one of them, as the model programs
/// do: that activation then holds the result.
fn glu_pattern(after: &[Op], gate: u32, up: u32) -> Option<u32> {
    let Some(&Op::SwiGlu { gate: g, up: u, out }) = after.first() else { return None };
    let unread = |a: u32| a == out || !read_before_written(&after[1..], a);
    (g == gate && u == up && gate != up && unread(gate) && unread(up)).then_some(out)
}

/// The residual that the op first in `after` adds a product's output `out` (`n` rows) to in
/// place, when nothing after that add reads `out`: the product can add to the residual itself.
/// Not when the residual is `norm_source`, the row a norm folded into the product reads: its
/// workgroups would normalise values that others have already added to.
fn residual_folds(after: &[Op], (out, n): (u32, u32), rows: &[u32], norm_source: Option<u32>) -> Option<u32> {
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

#[cfg(test)]
mod tests {
    use super::{glu_pattern, residual_folds, rows_read_only_their_own_new_keys};
    use zinc_plugin_api::{LogitRows, Op, SeqChunk, Step};

    /// A step of one chunk per (rows, n_past, page table).
    fn step_of(chunks: &[(u32, u32, &[u32])]) -> Step {
        let mut s = Step::default();
        for (i, &(rows, n_past, pages)) in chunks.iter().enumerate() {
            let first_row = s.tokens.len() as u32;
            s.tokens.extend((0..rows).map(|_| 1));
            s.positions.extend((0..rows).map(|j| n_past + j));
            s.seqs.push(SeqChunk {
                seq_id: i as u64,
                first_row,
                n_rows: rows,
                n_past,
                page_table: pages.to_vec().into(),
                logits: LogitRows::Last,
            });
        }
        s
    }

    #[test]
    fn decode_rows_take_their_new_keys_from_the_step_only_where_no_context_maps_a_written_page() {
        let own = |chunks: &[(u32, u32, &[u32])]| rows_read_only_their_own_new_keys(&step_of(chunks), 16);
        // Decode rows on pages of their own (the new slots: page 9 slot 4, page 2 slot 0).
        assert!(own(&[(1, 20, &[5, 9]), (1, 32, &[7, 3, 2])]));
        // A shared prefix page that nobody writes.
        assert!(own(&[(1, 20, &[5, 9]), (1, 40, &[5, 3, 2])]));
        // Pages past a context are not read.
        assert!(own(&[(1, 20, &[5, 9, 7]), (1, 10, &[7])]));
        // A prompt chunk, or two rows of one sequence: rows read each other's new keys.
        assert!(!own(&[(2, 20, &[5, 9])]));
        assert!(!own(&[(1, 20, &[5, 9]), (3, 0, &[7])]));
        // Another context maps the written page (row 0 writes page 9), or both rows write one.
        assert!(!own(&[(1, 20, &[5, 9]), (1, 40, &[9, 3, 2])]));
        assert!(!own(&[(1, 20, &[5, 9]), (1, 16, &[7, 9])]));
        // A table that maps its own written page twice (position 4 and position 20).
        assert!(!own(&[(1, 20, &[9, 9])]));
        // A table too short for the row's position (validation reports it; never the fused path).
        assert!(!own(&[(1, 40, &[5, 9])]));
    }

    #[test]
    fn a_swiglu_folds_into_gate_and_up_only_when_nothing_after_reads_their_own_values() {
        let down = |input| Op::MatMul { input, weight: 0, out: 9 };
        let swiglu = |gate, up, out| Op::SwiGlu { gate, up, out };
        // In place of gate (as the model programs write it), of up, or a third activation.
        assert_eq!(glu_pattern(&[swiglu(3, 4, 3), down(3)], 3, 4), Some(3));
        assert_eq!(glu_pattern(&[swiglu(3, 4, 4), down(4)], 3, 4), Some(4));
        assert_eq!(glu_pattern(&[swiglu(3, 4, 5), down(5)], 3, 4), Some(5));
        // Gate's or up's own values read later: they would never be written.
        assert_eq!(glu_pattern(&[swiglu(3, 4, 5), down(3)], 3, 4), None);
        assert_eq!(glu_pattern(&[swiglu(3, 4, 3), down(4)], 3, 4), None);
        // Read only after being written again: free.
        let refill = Op::MatMul { input: 9, weight: 0, out: 4 };
        assert_eq!(glu_pattern(&[swiglu(3, 4, 3), refill, down(4)], 3, 4), Some(3));
        // Gate and up swapped, the same activation twice, or no SwiGLU next.
        assert_eq!(glu_pattern(&[swiglu(4, 3, 3)], 3, 4), None);
        assert_eq!(glu_pattern(&[swiglu(3, 3, 3)], 3, 3), None);
        assert_eq!(glu_pattern(&[down(3), swiglu(3, 4, 3)], 3, 4), None);
        assert_eq!(glu_pattern(&[], 3, 4), None);
    }

    #[test]
    fn a_residual_add_folds_into_the_product_only_when_nothing_else_needs_its_output() {
        let rows = [1; 8];
        let add = |a, b, out| Op::Add { a, b, out };
        let out_read = Op::MatMul { input: 2, weight: 0, out: 5 };
        // `3 += 2` in either operand order, `2` unread after: the product of `2` adds to `3`.
        assert_eq!(residual_folds(&[add(3, 2, 3)], (2, 1), &rows, None), Some(3));
        assert_eq!(residual_folds(&[add(2, 3, 3)], (2, 1), &rows, None), Some(3));
        // Not in place, another addend, or the output read later.
        assert_eq!(residual_folds(&[add(3, 2, 4)], (2, 1), &rows, None), None);
        assert_eq!(residual_folds(&[add(3, 6, 3)], (2, 1), &rows, None), None);
        assert_eq!(residual_folds(&[add(3, 2, 3), out_read], (2, 1), &rows, None), None);
        // Rows that differ (after logit rows are selected).
        assert_eq!(residual_folds(&[add(3, 2, 3)], (2, 4), &rows, None), None);
        // A norm folded into the product reads the residual: the add stays its own dispatch.
        assert_eq!(residual_folds(&[add(3, 2, 3)], (2, 1), &rows, Some(3)), None);
        assert_eq!(residual_folds(&[add(3, 2, 3)], (2, 1), &rows, Some(7)), Some(3));
    }
}
