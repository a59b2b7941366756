//! Records one step of the model program into one command buffer: the input copy, every
//! op's dispatches with a barrier only where a dispatch touches memory that an earlier
//! unbarriered one wrote (or writes memory that one read), and the logits copy. A recorded
//! buffer depends only on the step's shape (rows, logit rows), so it is replayed for every
//! later step of the same shape.

use crate::catalogue::KernelId;
use crate::{
    context::Capabilities,
    context::{vk_err, Context},
    kernels::{Kernels, Push},
    step_buffers::{summary_words, StepBuffers},
    weights::{DeviceTensor, Weights},
};
use ash::vk;
use std::collections::HashSet;
use zinc_plugin_api::{
    top_count, Hparams, KvClass, KvLayout, ModelProgram, Op, PluginError, PluginResult, RopeStyle, SeqChunk, Step,
    NO_PAGE,
};

mod attention;
#[cfg(test)]
mod kernel_choice_tests;
mod moe;
mod ops;
mod plan;
mod recorder;
mod tiles;

use attention::{attention, kv_store, record_prelude, record_qkv_rope};
use moe::moe;
use ops::{elementwise, matmul, norm_kernel, q8_to_half, rms_norm, swiglu_q8, FoldedNorm, MatMul};
use plan::{plan_step, Elementwise, Epilogue, NormFold, PlanFacts, ProductInput, Products, TensorFacts, Unit};
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

/// Widest row the norm kernel holds in shared memory (`MAX_WIDTH` in shaders/rows/rms_norm.comp).
pub const MAX_NORM_WIDTH: u32 = 8192;

/// Features and rows per workgroup of the tiled kernel (shaders/matmul/matmul_q8_tiled.comp).
const TILE: u32 = 64;
/// Output features and rows per workgroup of the float-weight prompt tiles
/// (shaders/matmul/matmul_float_tiled.comp).
const FLOAT_TILE: u32 = 32;
/// Output features and rows per workgroup of the matrix-unit kernel (`BM`, `BN` in
/// shaders/matmul/matmul_coopmat.comp), features of its WIDE variant and rows of its SHORT one.
const COOPMAT_FEATURES: u32 = 64;
const COOPMAT_ROWS: u32 = 128;
const COOPMAT_WIDE_FEATURES: u32 = 128;
const COOPMAT_SHORT_ROWS: u32 = 64;
/// Workgroups of the wide variant from which a product takes it: the wide tiles pay for large
/// products and cost where they leave too few workgroups (small models, experts). Chosen on
/// the H200 (docs/measurements/vulkan-h200-prompt-2026-12-03/).
const COOPMAT_WIDE_MIN_GROUPS: u32 = 128;
/// Rows from which a plain 32-element-format product takes a tiled kernel (integer tiles or
/// matrix units); fewer take the row kernel, eight rows per pass over the weights, which was
/// the faster one up to 32 rows on the H200 (`zinc bench -p N`,
/// docs/measurements/vulkan-h200-2026-12-03/small-chunks-and-slowdown/). Chunks this small are
/// what a server cuts beside running streams.
const TILED_MIN_ROWS: u32 = 40;
/// The same switch for 8-bit products on a device with matrix units, whose short tile split
/// over k reads each weight block once per step at any row count up to 64: from 16 rows it
/// beat the row kernel on an H100, at 8 it lost (docs/measurements/split-k-2026-12-07/).
const COOPMAT_MIN_ROWS: u32 = 16;

/// Rows from which a plain 8-bit product leaves the row kernel on a device with `caps`.
fn q8_tiled_min_rows(caps: Capabilities) -> u32 {
    if caps.coopmat {
        COOPMAT_MIN_ROWS
    } else {
        TILED_MIN_ROWS
    }
}

/// Workgroups a product on the short matrix-unit tile should have: one whose grid has fewer
/// splits its k loop (`CoopmatTile::ShortSplit`) into up to SPLIT_K_MAX slices until it has
/// about this many. Four resident workgroups per multiprocessor of an H100 or H200 (132):
/// with one workgroup per 64 features, a 4096-wide product at batched decode has 64
/// workgroups, each walking the whole row alone. 256 was slower at 64 rows on an H100
/// (docs/measurements/split-k-2026-12-07/).
const SPLIT_K_GROUPS: u32 = 512;
/// Most slices of a split product.
const SPLIT_K_MAX: u32 = 8;
/// Fewest steps (of two 32-element blocks) per slice: shorter slices add more partial sums to
/// write and add than they save.
const SPLIT_K_MIN_STEPS: u32 = 4;
/// Floats of the split products' scratch (`StepBuffers::split_partial`): slices × rows ×
/// features, at most SPLIT_K_GROUPS workgroups of 64 features × 64 rows (see
/// `ops::split_k`).
pub const SPLIT_K_SCRATCH_FLOATS: u64 = (SPLIT_K_GROUPS * COOPMAT_FEATURES * COOPMAT_SHORT_ROWS) as u64;
/// Expert slots from which an MoE step's products are grouped by expert into tiles.
const GROUPED_MIN_SLOTS: u32 = 16;

/// Activation rows per matrix-kernel workgroup (`ROWS` in shaders/matmul/matmul_common.glsl).
const ROWS_PER_GROUP: u32 = 8;

/// Output features per matrix-kernel workgroup (`RPW` in shaders/matmul/matmul_common.glsl).
const FEATURES_PER_GROUP: u32 = 2;

/// Shape facts a recording depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StepShape {
    /// Token rows.
    pub rows: u32,
    /// Rows whose logits are returned.
    pub logit_rows: u32,
    /// Of those, how many are summarised (`LogitRows::LastTop`): the last ones of the
    /// selected rows, whose summaries come back instead of their logits.
    pub top_rows: u32,
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

/// Key splits per row of split attention (`splits` in shaders/attention/attention.comp).
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
    let window_tables = step.seqs.iter().any(|s| !s.window_table.is_empty());
    only_own_written_pages(step, page_size, |s| &s.page_table)
        && (!window_tables || only_own_written_pages(step, page_size, |s| &s.window_table))
}

/// [`rows_read_only_their_own_new_keys`] for the tables `table` picks (full or window pages).
fn only_own_written_pages(step: &Step, page_size: u32, table: impl Fn(&SeqChunk) -> &[u32]) -> bool {
    let written_page = |s: &SeqChunk| table(s).get((s.n_past / page_size) as usize).copied();
    let mut written: Vec<u32> = step.seqs.iter().filter_map(written_page).collect();
    written.sort_unstable();
    if written.len() != step.seqs.len() || written.windows(2).any(|w| w[0] == w[1]) {
        return false;
    }
    // Every mapped page of every context that is a written page must be that row's own slot
    // (freed window entries, NO_PAGE, are never read).
    step.seqs.iter().all(|s| {
        let own = (s.n_past / page_size) as usize;
        let used = (s.n_past / page_size + 1) as usize;
        table(s)
            .iter()
            .take(used)
            .enumerate()
            .all(|(i, &p)| i == own || p == NO_PAGE || written.binary_search(&p).is_err())
    })
}

/// The KV pool as the kernels see it: one or two page classes (`zinc_plugin_api::kv`).
pub struct KvView {
    /// Device address of full page 0.
    pub address: u64,
    /// Device address of window page 0 (the window pages' region of the same buffer).
    pub window_address: u64,
    /// Tokens per page.
    pub page_size: u32,
    /// Each layer's page class and slot.
    pub layout: KvLayout,
}

/// Where one layer's keys and values are: the kernels' `kv`, `layer` and `n_layer` push
/// constants, and which per-row table offsets (`row_pages`) its rows take.
#[derive(Debug, Clone, Copy)]
pub struct LayerKv {
    /// Device address of page 0 of the layer's class.
    pub address: u64,
    /// The layer's slot in its class's pages.
    pub slot: u32,
    /// Layers in its class's pages.
    pub layers: u32,
    /// The layer's class.
    pub class: KvClass,
}

impl KvView {
    /// Layer `layer`'s place in the pool.
    pub fn layer(&self, layer: u32) -> LayerKv {
        let (class, slot) = self.layout.place(layer as usize);
        let (address, layers) = match class {
            KvClass::Full => (self.address, self.layout.full_layers),
            KvClass::Window => (self.window_address, self.layout.window_layers),
        };
        LayerKv { address, slot, layers, class }
    }
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
    };
    rec.written.insert(bufs.input_dev.address);
    record_ops(&mut rec, program, &view)?;
    if let (true, Some(input)) = (shape.top_rows > 0, output_of(program)) {
        summarise_logits(&mut rec, program, &view, input)?;
    }
    rec.barrier_with(true);
    let (dispatches, names) = (rec.dispatches, std::mem::take(&mut rec.names));
    // SAFETY: as above; the copy reads the logits the last op wrote (barrier recorded).
    unsafe {
        let n_vocab = program.hparams.n_vocab as u64;
        let whole_rows = (shape.logit_rows - shape.top_rows) as u64;
        if whole_rows > 0 {
            if let Some(input) = output_of(program) {
                let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size: whole_rows * n_vocab * 4 };
                d.cmd_copy_buffer(cmd, bufs.acts[input as usize].buffer, bufs.logits.buffer, &[region]);
            }
        }
        if shape.top_rows > 0 {
            let size = shape.top_rows as u64 * summary_words(program.hparams.n_vocab) as u64 * 4;
            let region = vk::BufferCopy { src_offset: 0, dst_offset: 0, size };
            d.cmd_copy_buffer(cmd, bufs.summaries.buffer, bufs.summaries_host.buffer, &[region]);
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

/// The activation the program returns as its logits.
fn output_of(program: &ModelProgram) -> Option<u32> {
    program.ops.iter().rev().find_map(|o| match *o {
        Op::Output { input } => Some(input),
        _ => None,
    })
}

/// Summarises the step's last `top_rows` selected logit rows (in activation `logits`) into the
/// summaries buffer, one workgroup per row.
fn summarise_logits(rec: &mut Recorder, program: &ModelProgram, view: &StepView, logits: u32) -> PluginResult<()> {
    let (bufs, shape, n_vocab) = (view.bufs, view.shape, program.hparams.n_vocab);
    let input = bufs.acts[logits as usize].address;
    let first = shape.logit_rows - shape.top_rows;
    let push = Push::default().addr(input).addr(bufs.summaries.address).u32(n_vocab).u32(first).u32(top_count(n_vocab));
    rec.dispatch(KernelId::LogitSummary, push, [shape.top_rows, 1, 1], &[input], &[bufs.summaries.address])
}

/// Plans the step and records each unit of the plan.
fn record_ops(rec: &mut Recorder, program: &ModelProgram, view: &StepView) -> PluginResult<()> {
    let plan = plan_step(program, &plan_facts(view))?;
    if std::env::var_os("ZINC_VULKAN_PLAN").is_some_and(|v| v != "0") {
        eprintln!("vulkan plan of a step of {:?}:\n{plan}", view.shape);
    }
    for unit in &plan.units {
        record_unit(rec, program, view, unit)?;
    }
    Ok(())
}

/// What the plan of `view`'s step depends on besides the program.
fn plan_facts(view: &StepView) -> PlanFacts {
    let tensor = |t: Option<&DeviceTensor>| {
        t.map(|t| TensorFacts { dtype: t.dtype, row_len: t.row_len, rows_per_matrix: t.rows_per_matrix })
    };
    PlanFacts {
        tensors: view.weights.tensors.iter().map(|t| tensor(t.as_ref())).collect(),
        q8: view.bufs.q8.keys().copied().collect(),
        half_acts: view.bufs.half_acts.is_some(),
        caps: view.caps,
        shape: view.shape,
    }
}

/// Records the dispatches of one unit of the plan.
fn record_unit(rec: &mut Recorder, program: &ModelProgram, view: &StepView, unit: &Unit) -> PluginResult<()> {
    let StepView { bufs, weights, hp, shape, caps, .. } = *view;
    let act = |a: u32| bufs.acts[a as usize].address;
    let width = |a: u32| program.activation_widths[a as usize];
    let layout = bufs.layout;
    let inputs = bufs.input_dev.address;
    match *unit {
        Unit::Embed { table, out } => {
            let t = weights.tensor(table);
            let tokens = bufs.input(layout.tokens);
            let push = Push::default().addr(t.buf.address).addr(tokens).addr(act(out)).u32(width(out)).u32(t.row_bytes);
            let grid = [width(out).div_ceil(64), shape.rows, 1];
            rec.dispatch(KernelId::Embed(t.dtype), push, grid, &[t.buf.address, inputs], &[act(out)])
        }
        Unit::Norm { input, add, weight, out, rows } => {
            rms_norm(rec, view, (input, add, weight, out), rows, width(input))
        }
        Unit::HeadNorm { buf, weight, head_dim, rows } => {
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
            let groups = rows * (width(buf) / head_dim);
            rec.dispatch(norm_kernel(caps), push, Recorder::folded(groups), &[act(buf), g], &[act(buf)])
        }
        Unit::SwiGluQ8 { gate, up, out, rows } => {
            swiglu_q8(rec, act(gate), act(up), act(out), &bufs.q8[&out], rows * width(out) / 32)
        }
        Unit::Products(ref p) => record_products(rec, view, p, width(p.input)),
        Unit::QkvRope { ref unit, read, rows } => {
            let norm = match read {
                ProductInput::Norm(fold) => Some(folded_norm(view, fold)),
                ProductInput::Q8 { quantize: true } => {
                    rec.quantize(act(unit.input), &bufs.q8[&unit.input], width(unit.input), rows)?;
                    None
                }
                _ => None,
            };
            record_qkv_rope(rec, view, unit, rows, norm)
        }
        Unit::Prelude { ref unit, rows } => record_prelude(rec, view, unit, rows),
        Unit::Rope { buf, head_dim, freqs, rows } => {
            let (half, inv_freq) = (hp.rope_dim / 2, weights.inv_freq(freqs, hp));
            let push = Push::default()
                .addr(act(buf))
                .addr(bufs.input(layout.positions))
                .addr(inv_freq)
                .u32(width(buf))
                .u32(head_dim)
                .u32(half)
                .u32((hp.rope_style == RopeStyle::Neox) as u32);
            let pairs = width(buf) / head_dim * half;
            rec.dispatch(
                KernelId::Rope,
                push,
                [pairs.div_ceil(64), rows, 1],
                &[act(buf), inputs, inv_freq],
                &[act(buf)],
            )
        }
        Unit::Attention { layer, q, k, v, out, span, rows } => {
            kv_store(rec, view, (layer, k, v), rows)?;
            attention(rec, view, (layer, q, out), span, rows)
        }
        Unit::Elementwise { a, b, out, op, rows } => {
            let b = match op {
                Elementwise::AddBias { .. } => weights.vectors[&b].address,
                _ => act(b),
            };
            elementwise(rec, (act(a), b, act(out)), rows * width(out), op)
        }
        Unit::Moe(ref m) => moe(rec, view, m, &width),
        Unit::SelectLogitRows { input, out, rows } => {
            let push =
                Push::default().addr(act(input)).addr(bufs.input(layout.logit_rows)).addr(act(out)).u32(width(out));
            rec.dispatch(
                KernelId::GatherRows,
                push,
                [width(out).div_ceil(64), rows, 1],
                &[act(input), inputs],
                &[act(out)],
            )
        }
    }
}

/// The device form of a norm folded into the products after it.
fn folded_norm(view: &StepView, fold: NormFold) -> FoldedNorm {
    let StepView { bufs, weights, hp, .. } = *view;
    FoldedNorm {
        x: bufs.acts[fold.source as usize].address,
        weight: weights.vectors[&fold.weight].address,
        eps: hp.rms_eps,
    }
}

/// Records the products of one unit with their prologue (quantizing the input, its half copy)
/// and epilogue; `width` is the input's.
fn record_products(rec: &mut Recorder, view: &StepView, p: &Products, width: u32) -> PluginResult<()> {
    let StepView { bufs, weights, caps, .. } = *view;
    let act = |a: u32| bufs.acts[a as usize].address;
    let (weight, out) = p.products[0];
    let w = weights.tensor(weight);
    let q8 = p.read.is_quantized().then(|| &bufs.q8[&p.input]);
    if let (ProductInput::Q8 { quantize: true } | ProductInput::Half { quantize: true, .. }, Some(q)) = (p.read, q8) {
        rec.quantize(act(p.input), q, width, p.rows)?;
    }
    let mut m = MatMul::plain(w, act(p.input), q8, act(out), p.rows);
    if let ProductInput::Half { convert, .. } = p.read {
        let (Some(q), Some(half)) = (q8, &bufs.half_acts) else {
            return Err(PluginError::device("vulkan: internal error: a half-precision input without its buffers"));
        };
        if convert {
            q8_to_half(rec, q, half.address, p.rows * width / 32)?;
        }
        m.half = half.address;
        m.partial = bufs.split_partial.as_ref().map_or(0, |b| b.address);
    }
    if let ProductInput::Norm(fold) = p.read {
        m.norm = Some(folded_norm(view, fold));
    }
    m.beside = p.products[1..].iter().map(|&(t, o)| (weights.tensor(t), act(o))).collect();
    match p.epilogue {
        Epilogue::Store => {}
        Epilogue::Glu { out } => {
            m.out = act(out);
            m.glu = Some(&bufs.q8[&out]);
        }
        Epilogue::AddTo { residual } => {
            m.out = act(residual);
            m.accumulate = true;
        }
    }
    matmul(rec, m, caps)
}

#[cfg(test)]
mod tests {
    use super::rows_read_only_their_own_new_keys;
    use zinc_plugin_api::{LogitRows, SeqChunk, Step, NO_PAGE};

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
                window_table: Default::default(),
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
    fn window_tables_are_checked_for_written_pages_too() {
        // Two decode rows on pages of their own; window tables per row.
        let with_windows = |a: &[u32], b: &[u32]| {
            let mut s = step_of(&[(1, 20, &[5, 9]), (1, 32, &[7, 3, 2])]);
            s.seqs[0].window_table = a.to_vec().into();
            s.seqs[1].window_table = b.to_vec().into();
            rows_read_only_their_own_new_keys(&s, 16)
        };
        // Freed entries (NO_PAGE) are never read, even if both tables have them.
        assert!(with_windows(&[NO_PAGE, 41], &[NO_PAGE, NO_PAGE, 42]));
        // Row 1's window context maps the window page row 0 writes.
        assert!(!with_windows(&[NO_PAGE, 41], &[NO_PAGE, 41, 42]));
    }
}
