//! Records one step of the model program into one command buffer: the input copy, every
//! op's dispatches with a barrier only where a dispatch touches memory that an earlier
//! unbarriered one wrote (or writes memory that one read), and the logits copy. A recorded
//! buffer depends only on the step's shape (rows, logit rows), so it is replayed for every
//! later step of the same shape.

use crate::{
    context::{vk_err, Context},
    kernels::{Kernels, Push},
    step_buffers::{uses_q8, Q8Buf, StepBuffers},
    weights::{kernel_type_name, DeviceTensor, Weights},
};
use ash::vk;
use std::collections::HashSet;
use zinc_plugin_api::{ModelProgram, Op, PluginResult, RopeStyle};

/// Largest workgroup count in one grid dimension that every device accepts.
const MAX_GROUPS: u32 = 65535;

/// Widest row the norm kernel holds in shared memory (`MAX_WIDTH` in shaders/rms_norm.comp).
pub const MAX_NORM_WIDTH: u32 = 8192;

/// Features and rows per workgroup of the tiled kernel (shaders/matmul_q8_tiled.comp).
const TILE: u32 = 64;
/// Rows from which a 32-element-format product takes the tiled kernel.
const TILED_MIN_ROWS: u32 = 16;

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
}

/// The KV pool as the kernels see it.
pub struct KvView {
    /// Device address of page 0.
    pub address: u64,
    /// Tokens per page.
    pub page_size: u32,
}

struct Recorder<'a> {
    ctx: &'a Context,
    kernels: &'a mut Kernels,
    cmd: vk::CommandBuffer,
    written: HashSet<u64>,
    read: HashSet<u64>,
    dispatches: u32,
    /// Per-dispatch timestamps (profiling) and the kernel of each dispatch.
    profile: Option<vk::QueryPool>,
    names: Vec<String>,
}

impl Recorder<'_> {
    fn barrier(&mut self) {
        let mb = [vk::MemoryBarrier::default()
            .src_access_mask(
                vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::SHADER_READ | vk::AccessFlags::TRANSFER_WRITE,
            )
            .dst_access_mask(
                vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_READ,
            )];
        // SAFETY: recording into a command buffer in the recording state.
        unsafe {
            self.ctx.device.cmd_pipeline_barrier(
                self.cmd,
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                vk::DependencyFlags::empty(),
                &mb,
                &[],
                &[],
            )
        };
        self.written.clear();
        self.read.clear();
    }

    /// Records a barrier first when this access conflicts with unbarriered earlier ones.
    fn hazard(&mut self, reads: &[u64], writes: &[u64]) {
        let conflict = reads.iter().any(|b| self.written.contains(b))
            || writes.iter().any(|b| self.written.contains(b) || self.read.contains(b));
        if conflict {
            self.barrier();
        }
        self.read.extend(reads);
        self.written.extend(writes);
    }

    /// One dispatch of `kernel` over `groups` workgroups; `reads` and `writes` name the
    /// buffers (by base address) it touches.
    fn dispatch(
        &mut self,
        kernel: &str,
        push: Push,
        groups: [u32; 3],
        reads: &[u64],
        writes: &[u64],
    ) -> PluginResult<()> {
        if groups.iter().any(|&g| g == 0) {
            return Ok(());
        }
        self.hazard(reads, writes);
        let pipeline = self.kernels.get(self.ctx, kernel)?;
        // SAFETY: recording state; push constants fit the layout's range.
        unsafe {
            let d = &self.ctx.device;
            d.cmd_bind_pipeline(self.cmd, vk::PipelineBindPoint::COMPUTE, pipeline);
            d.cmd_push_constants(self.cmd, self.kernels.layout, vk::ShaderStageFlags::COMPUTE, 0, push.bytes());
            d.cmd_dispatch(self.cmd, groups[0], groups[1], groups[2]);
            if let Some(q) = self.profile.filter(|_| self.dispatches + 1 < crate::profile::CAPACITY) {
                d.cmd_write_timestamp(self.cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, q, self.dispatches + 1);
                self.names.push(kernel.to_string());
            }
        }
        self.dispatches += 1;
        Ok(())
    }

    /// A one-dimensional grid of `n` workgroups, folded into y past the per-dimension limit
    /// (kernels compute `x + y · 65535`).
    fn folded(n: u32) -> [u32; 3] {
        if n <= MAX_GROUPS {
            [n, 1, 1]
        } else {
            [MAX_GROUPS, n.div_ceil(MAX_GROUPS), 1]
        }
    }

    fn quantize(&mut self, x: u64, q: &Q8Buf, width: u32, rows: u32) -> PluginResult<()> {
        let push = Push::default().addr(x).addr(q.qs.address).addr(q.ds.address).u32(width);
        self.dispatch("quantize_q8", push, [(width / 32).div_ceil(64), rows, 1], &[x], &[q.qs.address, q.ds.address])
    }
}

/// A matrix product to record.
struct MatMul<'t> {
    w: &'t DeviceTensor,
    x: u64,
    q8: Option<&'t Q8Buf>,
    out: u64,
    rows: u32,
    /// 0: plain; 1: expert gate/up (input row r / n_used); 2: expert down.
    mode: u32,
    ids: u64,
    n_used: u32,
    /// Slots grouped by expert (moe_group.comp): expert products take the tiled kernel.
    group: u64,
    /// Experts of the grouped product.
    n_experts: u32,
}

fn matmul(rec: &mut Recorder, m: MatMul, int_dot: bool) -> PluginResult<()> {
    let ty = kernel_type_name(m.w.dtype).unwrap_or_default();
    let n_out = m.w.rows_per_matrix;
    let expert_bytes = m.w.rows_per_matrix.checked_mul(m.w.row_bytes).unwrap_or(u32::MAX);
    // Prompt chunks of 32-element formats take the tiled kernel, which reads each weight
    // block once per 64 rows; decode and small batches the row kernels.
    let tiled = m.q8.is_some() && ((m.mode == 0 && m.rows >= TILED_MIN_ROWS) || m.group != 0);
    let ids = if m.group != 0 { m.group } else { m.ids };
    let (kernel, x, xq) = match m.q8 {
        Some(q) => {
            let kind = if tiled { "matmul_q8_tiled" } else { "matmul_q8" };
            let name = format!("{kind}_{ty}{}", if int_dot { "_idot" } else { "" });
            (name, q.ds.address, q.qs.address)
        }
        None => (format!("matmul_{ty}"), m.x, 0),
    };
    let push = Push::default()
        .addr(m.w.buf.address)
        .addr(x)
        .addr(xq)
        .addr(m.out)
        .addr(ids)
        .u32(m.w.row_len)
        .u32(n_out)
        .u32(m.rows)
        .u32(m.w.row_bytes)
        .u32(expert_bytes)
        .u32(m.mode)
        .u32(m.n_used);
    let groups = if tiled && m.group != 0 {
        // Tiles of one expert each: at most ceil(slots / 64) + one partial tile per expert.
        [n_out.div_ceil(TILE), m.rows.div_ceil(TILE) + m.n_experts, 1]
    } else if tiled {
        [n_out.div_ceil(TILE), m.rows.div_ceil(TILE), 1]
    } else {
        let y = if m.mode == 0 { m.rows.div_ceil(ROWS_PER_GROUP) } else { m.rows };
        let wgs = n_out.div_ceil(FEATURES_PER_GROUP);
        [wgs.min(MAX_GROUPS), y, wgs.div_ceil(MAX_GROUPS)]
    };
    let mut reads = vec![m.w.buf.address, x, ids];
    if xq != 0 {
        reads.push(xq);
    }
    rec.dispatch(&kernel, push, groups, &reads, &[m.out])
}

/// What a recording holds besides its commands.
pub struct Recording {
    /// Dispatches per replay.
    pub dispatches: u32,
    /// The kernel of each profiled dispatch (empty unless profiling).
    pub names: Vec<String>,
}

/// Records `program` for a step of `shape` into `cmd` (begun and ended here).
#[allow(clippy::too_many_arguments)]
pub fn record_step(
    ctx: &Context,
    kernels: &mut Kernels,
    cmd: vk::CommandBuffer,
    program: &ModelProgram,
    weights: &Weights,
    bufs: &StepBuffers,
    kv: &KvView,
    shape: StepShape,
    timestamps: Option<vk::QueryPool>,
    profile: Option<vk::QueryPool>,
) -> PluginResult<Recording> {
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
    };
    rec.written.insert(bufs.input_dev.address);
    record_ops(&mut rec, program, weights, bufs, kv, shape, ctx.caps.int_dot)?;
    rec.barrier();
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

fn record_ops(
    rec: &mut Recorder,
    program: &ModelProgram,
    weights: &Weights,
    bufs: &StepBuffers,
    kv: &KvView,
    shape: StepShape,
    int_dot: bool,
) -> PluginResult<()> {
    let hp = &program.hparams;
    let act = |a: u32| bufs.acts[a as usize].address;
    let width = |a: u32| program.activation_widths[a as usize];
    let layout = bufs.layout;
    let (tokens, positions) = (bufs.input(layout.tokens), bufs.input(layout.positions));
    let (row_pages, page_tables) = (bufs.input(layout.row_pages), bufs.input(layout.page_tables));
    let inputs = bufs.input_dev.address;
    // Rows held by each activation (all of them until logit rows are selected).
    let mut rows = vec![shape.rows; program.activation_widths.len()];
    // Activations whose 8-bit copy is current.
    let mut q8_current: HashSet<u32> = HashSet::new();
    let n_layer = hp.n_layer;
    let kv_dim = hp.n_head_kv * hp.head_dim;

    let ops = &program.ops[..];
    let mut k = 0;
    while k < ops.len() {
        let op = &ops[k];
        k += 1;
        match *op {
            Op::Embed { table, out } => {
                let t = weights.tensor(table);
                let ty = kernel_type_name(t.dtype).unwrap_or_default();
                let push =
                    Push::default().addr(t.buf.address).addr(tokens).addr(act(out)).u32(width(out)).u32(t.row_bytes);
                rec.dispatch(
                    &format!("embed_{ty}"),
                    push,
                    [width(out).div_ceil(64), shape.rows, 1],
                    &[t.buf.address, inputs],
                    &[act(out)],
                )?;
                rows[out as usize] = shape.rows;
                q8_current.remove(&out);
            }
            Op::RmsNorm { input, weight, out } => {
                let n = rows[input as usize];
                rms_norm(rec, bufs, weights, &mut q8_current, (input, None, weight, out), n, width(input), hp.rms_eps)?;
                rows[out as usize] = n;
            }
            // A residual add in place followed by a norm of its result: one fused dispatch.
            Op::Add { a, b, out }
                if (out == a || out == b) && matches!(ops.get(k), Some(Op::RmsNorm { input, .. }) if *input == out) =>
            {
                let Some(&Op::RmsNorm { weight, out: normed, .. }) = ops.get(k) else { unreachable!() };
                k += 1;
                let other = if out == a { b } else { a };
                let n = rows[out as usize];
                q8_current.remove(&out);
                rms_norm(
                    rec,
                    bufs,
                    weights,
                    &mut q8_current,
                    (out, Some(other), weight, normed),
                    n,
                    width(out),
                    hp.rms_eps,
                )?;
                rows[normed as usize] = n;
            }
            Op::SwiGlu { gate, up, out } if bufs.q8.contains_key(&out) && width(out) % 32 == 0 => {
                let n = rows[gate as usize];
                let q = &bufs.q8[&out];
                swiglu_q8(rec, act(gate), act(up), act(out), q, n * width(out) / 32)?;
                rows[out as usize] = n;
                q8_current.insert(out);
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
                rec.dispatch("rms_norm", push, Recorder::folded(groups), &[act(buf), g], &[act(buf)])?;
                q8_current.remove(&buf);
            }
            Op::MatMul { input, weight, out } => {
                let w = weights.tensor(weight);
                let n = rows[input as usize];
                let q8 = if uses_q8(w.dtype) {
                    let q = &bufs.q8[&input];
                    if q8_current.insert(input) {
                        rec.quantize(act(input), q, width(input), n)?;
                    }
                    Some(q)
                } else {
                    None
                };
                matmul(
                    rec,
                    MatMul {
                        w,
                        x: act(input),
                        q8,
                        out: act(out),
                        rows: n,
                        mode: 0,
                        ids: 0,
                        n_used: 1,
                        group: 0,
                        n_experts: 0,
                    },
                    int_dot,
                )?;
                rows[out as usize] = n;
                q8_current.remove(&out);
            }
            Op::Rope { buf, head_dim } => {
                let half = hp.rope_dim / 2;
                let push = Push::default()
                    .addr(act(buf))
                    .addr(positions)
                    .addr(weights.inv_freq.address)
                    .u32(width(buf))
                    .u32(head_dim)
                    .u32(half)
                    .u32((hp.rope_style == RopeStyle::Neox) as u32);
                let pairs = width(buf) / head_dim * half;
                let n = rows[buf as usize];
                rec.dispatch(
                    "rope",
                    push,
                    [pairs.div_ceil(64), n, 1],
                    &[act(buf), inputs, weights.inv_freq.address],
                    &[act(buf)],
                )?;
                q8_current.remove(&buf);
            }
            Op::Attention { layer, q, k, v, out } => {
                let n = rows[q as usize];
                let push = Push::default()
                    .addr(act(k))
                    .addr(act(v))
                    .addr(kv.address)
                    .addr(positions)
                    .addr(row_pages)
                    .addr(page_tables)
                    .u32(kv_dim)
                    .u32(layer)
                    .u32(n_layer)
                    .u32(kv.page_size);
                rec.dispatch(
                    "kv_store",
                    push,
                    [(kv_dim / 2).div_ceil(64), n, 1],
                    &[act(k), act(v), inputs],
                    &[kv.address],
                )?;
                let push = Push::default()
                    .addr(act(q))
                    .addr(kv.address)
                    .addr(act(out))
                    .addr(positions)
                    .addr(row_pages)
                    .addr(page_tables)
                    .u32(hp.n_head)
                    .u32(hp.n_head_kv)
                    .u32(hp.head_dim)
                    .u32(layer)
                    .u32(n_layer)
                    .u32(kv.page_size)
                    .f32(1.0 / (hp.head_dim as f32).sqrt());
                rec.dispatch("attention", push, [hp.n_head, n, 1], &[act(q), kv.address, inputs], &[act(out)])?;
                rows[out as usize] = n;
                q8_current.remove(&out);
            }
            Op::SwiGlu { gate: a, up: b, out } | Op::Add { a, b, out } => {
                let n = rows[a as usize];
                let op_id = matches!(op, Op::SwiGlu { .. }) as u32;
                elementwise(rec, act(a), act(b), act(out), n * width(out), op_id)?;
                rows[out as usize] = n;
                q8_current.remove(&out);
            }
            Op::Moe { input, router, gate_exps, up_exps, down_exps, n_used, out } => {
                let n = rows[input as usize];
                moe(
                    rec,
                    bufs,
                    weights,
                    &mut q8_current,
                    MoeOp { input, router, gate_exps, up_exps, down_exps, n_used, out, n },
                    &width,
                    int_dot,
                )?;
                rows[out as usize] = n;
                q8_current.remove(&out);
            }
            Op::SelectLogitRows { input, out } => {
                let push =
                    Push::default().addr(act(input)).addr(bufs.input(layout.logit_rows)).addr(act(out)).u32(width(out));
                rec.dispatch(
                    "gather_rows",
                    push,
                    [width(out).div_ceil(64), shape.logit_rows, 1],
                    &[act(input), inputs],
                    &[act(out)],
                )?;
                rows[out as usize] = shape.logit_rows;
                q8_current.remove(&out);
            }
            Op::Output { .. } => {}
        }
    }
    Ok(())
}

/// RMS norm of `input` (after `input += add` when given) into `out`, also writing the 8-bit
/// copy of `out` when a matmul will read it.
#[allow(clippy::too_many_arguments)]
fn rms_norm(
    rec: &mut Recorder,
    bufs: &StepBuffers,
    weights: &Weights,
    q8_current: &mut HashSet<u32>,
    (input, add, weight, out): (u32, Option<u32>, u32, u32),
    n: u32,
    width: u32,
    eps: f32,
) -> PluginResult<()> {
    let act = |a: u32| bufs.acts[a as usize].address;
    let g = weights.vectors[&weight].address;
    if width > MAX_NORM_WIDTH {
        return Err(zinc_plugin_api::PluginError::unsupported(format!(
            "vulkan: norm over {width} elements (the kernel stages rows of up to {MAX_NORM_WIDTH} in shared memory)"
        )));
    }
    let q8 = bufs.q8.get(&out).filter(|_| width % 32 == 0);
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
    rec.dispatch("rms_norm", push, Recorder::folded(n), &reads, &writes)?;
    q8_current.remove(&out);
    if q8.is_some() {
        q8_current.insert(out);
    }
    Ok(())
}

/// `out = silu(gate) * up` over `n_blocks` blocks of 32, with its 8-bit copy.
fn swiglu_q8(rec: &mut Recorder, gate: u64, up: u64, out: u64, q: &Q8Buf, n_blocks: u32) -> PluginResult<()> {
    let push = Push::default().addr(gate).addr(up).addr(out).addr(q.qs.address).addr(q.ds.address).u32(n_blocks);
    rec.dispatch(
        "swiglu_q8",
        push,
        Recorder::folded(n_blocks.div_ceil(64)),
        &[gate, up],
        &[out, q.qs.address, q.ds.address],
    )
}

fn elementwise(rec: &mut Recorder, a: u64, b: u64, out: u64, n: u32, op: u32) -> PluginResult<()> {
    let push = Push::default().addr(a).addr(b).addr(out).u32(n).u32(op);
    rec.dispatch("elementwise", push, Recorder::folded(n.div_ceil(256)), &[a, b], &[out])
}

struct MoeOp {
    input: u32,
    router: u32,
    gate_exps: u32,
    up_exps: u32,
    down_exps: u32,
    n_used: u32,
    out: u32,
    n: u32,
}

#[allow(clippy::too_many_arguments)]
fn moe(
    rec: &mut Recorder,
    bufs: &StepBuffers,
    weights: &Weights,
    q8_current: &mut HashSet<u32>,
    m: MoeOp,
    width: &dyn Fn(u32) -> u32,
    int_dot: bool,
) -> PluginResult<()> {
    let s = bufs.moe.as_ref().expect("MoE scratch allocated for MoE programs");
    let x = bufs.acts[m.input as usize].address;
    let out = bufs.acts[m.out as usize].address;
    let (router, gate, up, down) =
        (weights.tensor(m.router), weights.tensor(m.gate_exps), weights.tensor(m.up_exps), weights.tensor(m.down_exps));
    let mut input_q8 = |rec: &mut Recorder, w: &DeviceTensor| -> PluginResult<Option<&Q8Buf>> {
        if !uses_q8(w.dtype) {
            return Ok(None);
        }
        let q = &bufs.q8[&m.input];
        if q8_current.insert(m.input) {
            rec.quantize(x, q, width(m.input), m.n)?;
        }
        Ok(Some(q))
    };
    let q = input_q8(rec, router)?;
    matmul(
        rec,
        MatMul {
            w: router,
            x,
            q8: q,
            out: s.logits.address,
            rows: m.n,
            mode: 0,
            ids: 0,
            n_used: 1,
            group: 0,
            n_experts: 0,
        },
        int_dot,
    )?;
    let n_expert = router.rows_per_matrix;
    let push = Push::default()
        .addr(s.logits.address)
        .addr(s.ids.address)
        .addr(s.weights.address)
        .u32(n_expert)
        .u32(m.n_used)
        .u32(m.n);
    rec.dispatch("moe_route", push, Recorder::folded(m.n), &[s.logits.address], &[s.ids.address, s.weights.address])?;
    let slots = m.n * m.n_used;
    let ids = s.ids.address;
    // Many slots: group them by expert once, so each expert's weights are read per 64 slots.
    let grouped = slots >= TILED_MIN_ROWS && [gate, up, down].iter().all(|w| uses_q8(w.dtype));
    let group = if grouped {
        let push = Push::default().addr(ids).addr(s.groups.address).u32(slots).u32(n_expert);
        rec.dispatch("moe_group", push, [1, 1, 1], &[ids], &[s.groups.address])?;
        s.groups.address
    } else {
        0
    };
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
    };
    let q = input_q8(rec, gate)?;
    matmul(rec, expert(gate, x, q, s.gate.address, 1), int_dot)?;
    let q = input_q8(rec, up)?;
    matmul(rec, expert(up, x, q, s.up.address, 1), int_dot)?;
    let ff = gate.rows_per_matrix;
    let q = if uses_q8(down.dtype) {
        swiglu_q8(rec, s.gate.address, s.up.address, s.gate.address, &s.gate_q8, slots * ff / 32)?;
        Some(&s.gate_q8)
    } else {
        elementwise(rec, s.gate.address, s.up.address, s.gate.address, slots * ff, 1)?;
        None
    };
    matmul(rec, expert(down, s.gate.address, q, s.down.address, 2), int_dot)?;
    let n_embd = down.rows_per_matrix;
    let push = Push::default().addr(s.down.address).addr(s.weights.address).addr(out).u32(n_embd).u32(m.n_used);
    rec.dispatch("moe_combine", push, [n_embd.div_ceil(64), m.n, 1], &[s.down.address, s.weights.address], &[out])
}
