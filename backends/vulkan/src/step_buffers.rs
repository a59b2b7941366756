//! Per-step device memory, sized for a capacity of rows: one buffer per activation, 8-bit
//! copies of the activations that feed 32-element-format matmuls, MoE scratch, the step
//! inputs (written by the host, copied to the device at the start of the step's command
//! buffer), and the host-visible logits. Addresses stay fixed until the capacity grows, which
//! is what lets recorded command buffers be replayed.

use crate::catalogue::q8_activations;
use crate::{
    buffer::{GpuBuffer, Place},
    context::Context,
    record::{KEY_SPLITS, SPLIT_K_SCRATCH_FLOATS, SPLIT_MAX_ROWS},
    weights::Weights,
};
use std::collections::HashMap;
use zinc_plugin_api::{top_count, ModelProgram, Op, PluginResult};

/// 8-bit copy of an activation: values (`cap × width` bytes) and per-block (d, d·Σq).
pub struct Q8Buf {
    /// Quantized values, four per word.
    pub qs: GpuBuffer,
    /// Per block scale and scaled sum.
    pub ds: GpuBuffer,
}

/// Scratch for the mixture-of-experts ops (shared by every layer).
pub struct MoeScratch {
    /// Router logits, `cap × n_expert`.
    pub logits: GpuBuffer,
    /// Chosen experts, `cap × n_used` (i32).
    pub ids: GpuBuffer,
    /// Their weights.
    pub weights: GpuBuffer,
    /// Gate outputs (then the SwiGLU product), `cap·n_used × ff`.
    pub gate: GpuBuffer,
    /// Up outputs.
    pub up: GpuBuffer,
    /// 8-bit copy of `gate` for the down projection.
    pub gate_q8: Q8Buf,
    /// Down outputs, `cap·n_used × n_embd`.
    pub down: GpuBuffer,
    /// Slots grouped by expert (shaders/moe/moe_group.comp) for the tiled expert products.
    pub groups: GpuBuffer,
}

/// Where each step input lives, in i32 elements from the start of the input buffer.
#[derive(Debug, Clone, Copy)]
pub struct InputLayout {
    /// Token ids.
    pub tokens: u64,
    /// Positions.
    pub positions: u64,
    /// Per row: offset of its sequence's page table in `page_tables`.
    pub row_pages: u64,
    /// Per row: offset of its sequence's window table in `page_tables` (window pages only).
    pub row_window_pages: u64,
    /// Indices of the rows whose logits are returned.
    pub logit_rows: u64,
    /// Page tables of every sequence, back to back, then their window tables (as window-page
    /// indices from 0).
    pub page_tables: u64,
    /// Total i32 elements.
    pub len: u64,
}

impl InputLayout {
    fn new(cap_rows: u32, cap_pages: u32) -> InputLayout {
        let c = cap_rows as u64;
        InputLayout {
            tokens: 0,
            positions: c,
            row_pages: 2 * c,
            logit_rows: 3 * c,
            row_window_pages: 4 * c,
            page_tables: 5 * c,
            len: 5 * c + cap_pages as u64,
        }
    }
}

/// Everything a step touches besides weights and KV pages.
pub struct StepBuffers {
    /// Rows the buffers hold.
    pub cap_rows: u32,
    /// Page-table entries the input buffer holds.
    pub cap_pages: u32,
    /// One per activation id.
    pub acts: Vec<GpuBuffer>,
    /// 8-bit copies, for activations that feed 32-element-format matmuls.
    pub q8: HashMap<u32, Q8Buf>,
    /// MoE scratch, when the program has MoE ops.
    pub moe: Option<MoeScratch>,
    /// Host-written step inputs.
    pub input_host: GpuBuffer,
    /// Their device copy, which the kernels read.
    pub input_dev: GpuBuffer,
    /// Input layout.
    pub layout: InputLayout,
    /// Logits, read by the host.
    pub logits: GpuBuffer,
    /// Summaries of the summarised logit rows (shaders/rows/logit_summary.comp):
    /// [`summary_words`] words per row, written on the device...
    pub summaries: GpuBuffer,
    /// ...and copied here for the host.
    pub summaries_host: GpuBuffer,
    /// Half-precision copy of the 8-bit activations that the matrix-unit product reads
    /// (shaders/rows/q8_to_half.comp), for the widest such input; only on devices with that path.
    pub half_acts: Option<GpuBuffer>,
    /// Split attention's per-split results (shaders/attention/attention.comp, attention_merge.comp):
    /// `SPLIT_MAX_ROWS × n_head × KEY_SPLITS × (head_dim + 2)` floats.
    pub attn_partial: GpuBuffer,
    /// Partial sums of matrix-unit products split over k (shaders/matmul/matmul_coopmat.comp's
    /// SPLIT_K, added by split_sum.comp); only on devices with that path.
    pub split_partial: Option<GpuBuffer>,
}

/// Words of one row's summary for a vocabulary of `n_vocab`: its candidates' ids and values,
/// then its log-normaliser (the layout logit_summary.comp writes).
pub fn summary_words(n_vocab: u32) -> u32 {
    2 * top_count(n_vocab) + 1
}

impl StepBuffers {
    /// Allocates buffers for `cap_rows` rows and `cap_pages` page-table entries. On error,
    /// whatever was allocated is freed.
    pub fn new(
        ctx: &mut Context,
        program: &ModelProgram,
        weights: &Weights,
        cap_rows: u32,
        cap_pages: u32,
    ) -> PluginResult<StepBuffers> {
        let layout = InputLayout::new(cap_rows, cap_pages);
        let mut parts: Vec<GpuBuffer> = Vec::new();
        let r = Self::alloc(ctx, program, weights, cap_rows, cap_pages, layout, &mut parts);
        if r.is_err() {
            for b in parts {
                b.free(ctx);
            }
        }
        r
    }

    fn alloc(
        ctx: &mut Context,
        program: &ModelProgram,
        weights: &Weights,
        cap_rows: u32,
        cap_pages: u32,
        layout: InputLayout,
        parts: &mut Vec<GpuBuffer>,
    ) -> PluginResult<StepBuffers> {
        let cap = cap_rows as u64;
        // Each allocation is recorded in `parts` until the whole set exists, so a failure
        // part-way frees what was made.
        macro_rules! buf {
            ($name:expr, $size:expr, $place:expr) => {{
                let b = GpuBuffer::new(ctx, $name, $size, $place)?;
                parts.push(b);
                parts.len() - 1
            }};
        }
        let mut act_idx = Vec::new();
        for &w in program.activation_widths.iter() {
            act_idx.push(buf!("activation", cap * w as u64 * 4, Place::Device));
        }
        let mut q8_idx = HashMap::new();
        let mut moe_idx = None;
        for op in program.ops.iter() {
            match *op {
                Op::MatMul { input, weight, .. } if q8_activations(weights.tensor(weight).dtype) => {
                    if let std::collections::hash_map::Entry::Vacant(e) = q8_idx.entry(input) {
                        let w = program.activation_widths[input as usize] as u64;
                        e.insert((
                            buf!("q8 values", cap * w, Place::Device),
                            buf!("q8 scales", cap * (w / 32) * 8, Place::Device),
                        ));
                    }
                }
                Op::Moe { input, router, gate_exps, down_exps, n_used, .. } => {
                    let w = program.activation_widths[input as usize] as u64;
                    let uses = [router, gate_exps, down_exps].iter().any(|&t| q8_activations(weights.tensor(t).dtype));
                    if uses && !q8_idx.contains_key(&input) {
                        q8_idx.insert(
                            input,
                            (
                                buf!("q8 values", cap * w, Place::Device),
                                buf!("q8 scales", cap * (w / 32) * 8, Place::Device),
                            ),
                        );
                    }
                    if moe_idx.is_none() {
                        let n_exp = weights.tensor(router).rows_per_matrix as u64;
                        let ff = weights.tensor(gate_exps).rows_per_matrix as u64;
                        let n_embd = weights.tensor(down_exps).rows_per_matrix as u64;
                        let slots = cap * n_used as u64;
                        moe_idx = Some([
                            buf!("moe logits", cap * n_exp * 4, Place::Device),
                            buf!("moe ids", slots * 4, Place::Device),
                            buf!("moe weights", slots * 4, Place::Device),
                            buf!("moe gate", slots * ff * 4, Place::Device),
                            buf!("moe up", slots * ff * 4, Place::Device),
                            buf!("moe gate q8", slots * ff, Place::Device),
                            buf!("moe gate q8 scales", slots * (ff / 32) * 8, Place::Device),
                            buf!("moe down", slots * n_embd * 4, Place::Device),
                            buf!("moe groups", (2 * n_exp + 3 + slots) * 4, Place::Device),
                        ]);
                    }
                }
                _ => {}
            }
        }
        // The matrix-unit product's half-precision activations: the widest 8-bit input, expert
        // down products' per-slot inputs included.
        let expert_width = program.ops.iter().filter_map(|op| match *op {
            Op::Moe { gate_exps, n_used, .. } => Some(n_used as u64 * weights.tensor(gate_exps).rows_per_matrix as u64),
            _ => None,
        });
        let half_width = q8_idx.keys().map(|&a| program.activation_widths[a as usize] as u64).chain(expert_width).max();
        let half_idx = match half_width {
            Some(w) if ctx.caps.coopmat => Some(buf!("half activations", cap * w * 2, Place::Device)),
            _ => None,
        };
        let in_host = buf!("step inputs", layout.len * 4, Place::Upload);
        let in_dev = buf!("step inputs (device)", layout.len * 4, Place::Device);
        let logits = buf!("logits", cap * program.hparams.n_vocab as u64 * 4, Place::Readback);
        let summary_bytes = cap * summary_words(program.hparams.n_vocab) as u64 * 4;
        let summaries = buf!("logit summaries", summary_bytes, Place::Device);
        let summaries_host = buf!("logit summaries (host)", summary_bytes, Place::Readback);
        let hp = &program.hparams;
        let partial_floats = (SPLIT_MAX_ROWS * hp.n_head * KEY_SPLITS) as u64 * (hp.head_dim as u64 + 2);
        let attn_partial = buf!("split attention scratch", partial_floats * 4, Place::Device);
        let split_idx = match ctx.caps.coopmat {
            true => Some(buf!("split product scratch", SPLIT_K_SCRATCH_FLOATS * 4, Place::Device)),
            false => None,
        };

        // Everything exists: hand the buffers to their owners.
        let mut slots: Vec<Option<GpuBuffer>> = parts.drain(..).map(Some).collect();
        let mut take = |i: usize| slots[i].take().expect("each buffer taken once");
        let acts = act_idx.into_iter().map(&mut take).collect();
        let q8 = q8_idx.into_iter().map(|(a, (q, d))| (a, Q8Buf { qs: take(q), ds: take(d) })).collect();
        let moe = moe_idx.map(|m| MoeScratch {
            logits: take(m[0]),
            ids: take(m[1]),
            weights: take(m[2]),
            gate: take(m[3]),
            up: take(m[4]),
            gate_q8: Q8Buf { qs: take(m[5]), ds: take(m[6]) },
            down: take(m[7]),
            groups: take(m[8]),
        });
        let bufs = StepBuffers {
            cap_rows,
            cap_pages,
            acts,
            q8,
            moe,
            input_host: take(in_host),
            input_dev: take(in_dev),
            layout,
            logits: take(logits),
            summaries: take(summaries),
            summaries_host: take(summaries_host),
            half_acts: half_idx.map(&mut take),
            attn_partial: take(attn_partial),
            split_partial: split_idx.map(&mut take),
        };
        // The matrix kernels read 8-bit blocks as 16-byte vectors and their scales as 8-byte
        // pairs; allocations are aligned far beyond that on every driver seen, but a buffer
        // address that is not would make those reads undefined, so say so instead.
        let q8s = bufs.q8.values().chain(bufs.moe.as_ref().map(|m| &m.gate_q8));
        let half = bufs.half_acts.as_ref().map_or(0, |b| b.address);
        let misplaced = q8s.into_iter().map(|q| (q.qs.address, q.ds.address)).chain([(half, 0)]);
        if let Some((a, b)) = misplaced.into_iter().find(|(a, b)| a % 16 != 0 || b % 8 != 0) {
            bufs.free(ctx);
            return Err(zinc_plugin_api::PluginError::unsupported(format!(
                "vulkan: the driver placed activation buffers at {a:#x} / {b:#x}, not 16/8-byte aligned"
            )));
        }
        Ok(bufs)
    }

    /// Device address of input element `at` (i32 units).
    pub fn input(&self, at: u64) -> u64 {
        self.input_dev.address + at * 4
    }

    /// Frees every buffer.
    pub fn free(self, ctx: &mut Context) {
        for b in self.acts {
            b.free(ctx);
        }
        for (_, q) in self.q8 {
            q.qs.free(ctx);
            q.ds.free(ctx);
        }
        if let Some(m) = self.moe {
            for b in [m.logits, m.ids, m.weights, m.gate, m.up, m.gate_q8.qs, m.gate_q8.ds, m.down, m.groups] {
                b.free(ctx);
            }
        }
        self.input_host.free(ctx);
        self.input_dev.free(ctx);
        self.logits.free(ctx);
        self.summaries.free(ctx);
        self.summaries_host.free(ctx);
        self.attn_partial.free(ctx);
        for b in [self.half_acts, self.split_partial].into_iter().flatten() {
            b.free(ctx);
        }
    }
}
