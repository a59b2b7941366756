//! The Vulkan backend object: one submission and one fence wait per step, recorded command
//! buffers replayed for repeated step shapes, KV pages in device memory.

use crate::{
    buffer::{GpuBuffer, Place},
    context::{vk_err, Context},
    fence_wait::FenceWait,
    kernels::Kernels,
    profile::{HostPhase, Profiler},
    record::{
        record_step, rows_read_only_their_own_new_keys, split_keys, KvView, Queries, Recording, StepShape, StepView,
        MAX_NORM_WIDTH,
    },
    step_buffers::{summary_words, StepBuffers},
    weights::Weights,
};
use ash::vk;
pub use prepare::PrepareSteps;
use std::{
    collections::HashMap,
    time::{Duration, Instant},
};
use zinc_plugin_api::{
    top_count, window_keys, BackendImpl, Counters, DeviceInfo, KvLayout, KvPoolInfo, KvPoolSpec, LogitRows,
    ModelProgram, Op, PageCopy, PluginError, PluginResult, SchedulingHints, Step, StepOutput, NO_PAGE,
};

mod prepare;

/// Recorded command buffers kept for replay; past this many shapes the least recently used
/// one is freed. A server's steps vary in rows (decodes joining and leaving, chunks cut to a
/// time allowance), so the shapes in use drift; starting over would re-record all of them.
const MAX_RECORDED: usize = 128;

struct Model {
    program: ModelProgram,
    weights: Weights,
    /// Rows of the embedding table: token ids must be below this.
    embed_rows: u32,
}

/// The KV pool: full pages, then window pages, in one buffer (`zinc_plugin_api::kv`).
struct KvPages {
    buf: GpuBuffer,
    info: KvPoolInfo,
    layout: KvLayout,
    /// The model's widest sliding window (what a step may read of window tables).
    window_keys: u32,
}

impl KvPages {
    /// Byte offset of page `page` (either class) in the buffer, and its size; `None` outside.
    fn page_region(&self, page: u32) -> Option<(u64, u64)> {
        let i = &self.info;
        let bytes = i.page_bytes(page);
        if page >= i.n_pages + i.window_pages {
            return None;
        }
        Some(match page.checked_sub(i.n_pages) {
            None => (page as u64 * bytes, bytes),
            Some(w) => (i.n_pages as u64 * i.bytes_per_page + w as u64 * bytes, bytes),
        })
    }
}

struct Recorded {
    cmd: vk::CommandBuffer,
    dispatches: u32,
    names: Vec<String>,
    /// The step count when it last ran, for eviction.
    last_used: u64,
    /// How long it took on the device when it last ran: the fence wait sleeps through half of
    /// that before polling (see fence_wait.rs).
    last_time: Option<Duration>,
}

/// The backend.
pub struct VulkanBackend {
    ctx: Context,
    kernels: Kernels,
    model: Option<Model>,
    kv: Option<KvPages>,
    bufs: Option<StepBuffers>,
    recorded: HashMap<StepShape, Recorded>,
    fence: vk::Fence,
    fence_wait: FenceWait,
    prepare: PrepareSteps,
    timestamps: Option<vk::QueryPool>,
    profiler: Option<Profiler>,
    counters: Counters,
}

fn invalid(msg: impl Into<String>) -> PluginError {
    PluginError::invalid(msg)
}

impl VulkanBackend {
    /// Opens physical device `index`; see [`Context::open`]. Steps wait for their fence by
    /// `fence_wait`; `prepare_steps` readies step shapes by `prepare`.
    pub fn open(
        index: usize,
        allow: crate::context::Allow,
        fence_wait: FenceWait,
        prepare: PrepareSteps,
    ) -> PluginResult<VulkanBackend> {
        let mut ctx = Context::open(index, allow)?;
        ctx.info.info.features.push(fence_wait.feature().into());
        let mut kernels = Kernels::new(&ctx)?;
        let fence = match ctx.fence() {
            Ok(f) => f,
            Err(e) => {
                kernels.destroy(&ctx);
                return Err(e);
            }
        };
        let timestamps = if ctx.caps.timestamps {
            let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(2);
            // SAFETY: plain create; destroyed in Drop.
            unsafe { ctx.device.create_query_pool(&info, None) }.ok()
        } else {
            None
        };
        let profiler = Profiler::from_env(&ctx);
        Ok(VulkanBackend {
            profiler,
            ctx,
            kernels,
            model: None,
            kv: None,
            bufs: None,
            recorded: HashMap::new(),
            fence,
            fence_wait,
            prepare,
            timestamps,
            counters: Counters::default(),
        })
    }

    fn forget_recordings(&mut self) {
        let cmds: Vec<vk::CommandBuffer> = self.recorded.drain().map(|(_, r)| r.cmd).collect();
        if !cmds.is_empty() {
            // SAFETY: every submission was waited for, so none is pending.
            unsafe { self.ctx.device.free_command_buffers(self.ctx.pool, &cmds) };
        }
    }

    fn drop_step_buffers(&mut self) {
        self.forget_recordings();
        if let Some(b) = self.bufs.take() {
            b.free(&mut self.ctx);
        }
    }

    /// Makes the step buffers hold `rows` rows and `pages` page-table entries.
    fn ensure_capacity(&mut self, rows: u32, pages: u32) -> PluginResult<()> {
        if let Some(b) = &self.bufs {
            if b.cap_rows >= rows && b.cap_pages >= pages {
                return Ok(());
            }
        }
        let (old_rows, old_pages) = self.bufs.as_ref().map_or((0, 0), |b| (b.cap_rows, b.cap_pages));
        self.drop_step_buffers();
        let cap_rows = rows.next_power_of_two().max(16).max(old_rows);
        // Page-table room for the whole pool from the start: growing it mid-serve reallocates
        // the step buffers and re-records every step shape, one long pause for every stream.
        // With window pages every sequence has a window table as long as its page table.
        let tables = |k: &KvPages| k.info.n_pages * if k.info.window_pages > 0 { 2 } else { 1 };
        let pool_pages = self.kv.as_ref().map_or(0, |k| tables(k).min(1 << 20));
        let cap_pages = pages.next_power_of_two().max(pool_pages.next_power_of_two()).max(256).max(old_pages);
        let model = self.model.as_ref().expect("checked by the caller");
        self.bufs = Some(StepBuffers::new(&mut self.ctx, &model.program, &model.weights, cap_rows, cap_pages)?);
        Ok(())
    }

    /// Writes the step's inputs into the host-visible input buffer; returns bytes written.
    fn write_inputs(&mut self, step: &Step) -> u64 {
        let bufs = self.bufs.as_mut().expect("capacity ensured");
        let l = bufs.layout;
        let mut put = Vec::new();
        // Whole rows first, then the summarised ones (`StepShape::top_rows`), each in chunk order.
        let (mut logit_rows, mut top_rows) = (Vec::new(), Vec::new());
        let mut row_pages = vec![0u32; step.tokens.len()];
        let mut row_window_pages = vec![0u32; step.tokens.len()];
        let mut tables = Vec::new();
        for s in step.seqs.iter() {
            let at = tables.len() as u32;
            tables.extend(s.page_table.iter().copied());
            for r in s.first_row..s.first_row + s.n_rows {
                row_pages[r as usize] = at;
            }
        }
        // Window tables after all page tables, as indices into the window pages' region;
        // freed entries (never read) become 0.
        let n_pages = self.kv.as_ref().map_or(0, |k| k.info.n_pages);
        for s in step.seqs.iter().filter(|s| !s.window_table.is_empty()) {
            let at = tables.len() as u32;
            tables.extend(s.window_table.iter().map(|&p| p.checked_sub(n_pages).filter(|_| p != NO_PAGE).unwrap_or(0)));
            for r in s.first_row..s.first_row + s.n_rows {
                row_window_pages[r as usize] = at;
            }
        }
        for s in step.seqs.iter() {
            match s.logits {
                LogitRows::None => {}
                LogitRows::Last => logit_rows.push(s.first_row + s.n_rows - 1),
                LogitRows::All => logit_rows.extend(s.first_row..s.first_row + s.n_rows),
                LogitRows::LastTop => top_rows.push(s.first_row + s.n_rows - 1),
            }
        }
        logit_rows.extend(top_rows);
        put.push((l.tokens, &step.tokens[..]));
        put.push((l.positions, &step.positions[..]));
        put.push((l.row_pages, &row_pages[..]));
        put.push((l.row_window_pages, &row_window_pages[..]));
        put.push((l.logit_rows, &logit_rows[..]));
        put.push((l.page_tables, &tables[..]));
        let map = bufs.input_host.mapped();
        let mut bytes = 0u64;
        for (at, vals) in put {
            let at = at as usize * 4;
            for (i, v) in vals.iter().enumerate() {
                map[at + i * 4..at + i * 4 + 4].copy_from_slice(&v.to_le_bytes());
            }
            bytes += vals.len() as u64 * 4;
        }
        bytes
    }

    fn recorded_for(&mut self, shape: StepShape) -> PluginResult<&Recorded> {
        if !self.recorded.contains_key(&shape) {
            if self.recorded.len() >= MAX_RECORDED {
                let oldest = self.recorded.iter().min_by_key(|(_, r)| r.last_used).map(|(s, _)| *s);
                if let Some(r) = oldest.and_then(|s| self.recorded.remove(&s)) {
                    // SAFETY: every submission was waited for, so it is not pending.
                    unsafe { self.ctx.device.free_command_buffers(self.ctx.pool, &[r.cmd]) };
                }
            }
            let cmd = self.ctx.command_buffer()?;
            let queries = Queries { timestamps: self.timestamps, profile: self.profiler.as_ref().map(|p| p.pool) };
            match self.record_shape(cmd, shape, queries) {
                Ok(r) => {
                    let last_used = self.counters.steps;
                    self.recorded.insert(
                        shape,
                        Recorded { cmd, dispatches: r.dispatches, names: r.names, last_used, last_time: None },
                    );
                }
                Err(e) => {
                    // SAFETY: never submitted.
                    unsafe { self.ctx.device.free_command_buffers(self.ctx.pool, &[cmd]) };
                    return Err(e);
                }
            }
        }
        let rec = self.recorded.get_mut(&shape).expect("recorded above");
        rec.last_used = self.counters.steps;
        Ok(rec)
    }

    /// Records the step of `shape` into `cmd`; the model, the KV pool and step buffers large
    /// enough for it exist.
    fn record_shape(&mut self, cmd: vk::CommandBuffer, shape: StepShape, queries: Queries) -> PluginResult<Recording> {
        let model = self.model.as_ref().expect("checked");
        let kv = self.kv.as_ref().expect("checked");
        let window_address = kv.buf.address + kv.info.n_pages as u64 * kv.info.bytes_per_page;
        let (address, page_size, layout) = (kv.buf.address, kv.info.page_size, kv.layout.clone());
        let view = KvView { address, window_address, page_size, layout };
        let bufs = self.bufs.as_ref().expect("capacity ensured");
        let hp = &model.program.hparams;
        let step = StepView { bufs, weights: &model.weights, kv: &view, hp, shape, caps: self.ctx.caps };
        record_step(&self.ctx, &mut self.kernels, cmd, &model.program, step, queries)
    }

    /// Runs `record` in a one-off command buffer and waits for it.
    fn one_off(&mut self, record: impl FnOnce(&ash::Device, vk::CommandBuffer)) -> PluginResult<()> {
        let cmd = self.ctx.command_buffer()?;
        // SAFETY: fresh command buffer; freed after the wait.
        let r = unsafe {
            let d = &self.ctx.device;
            d.begin_command_buffer(
                cmd,
                &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT),
            )
            .map_err(vk_err("recording a copy"))
            .and_then(|_| {
                record(d, cmd);
                d.end_command_buffer(cmd).map_err(vk_err("recording a copy"))
            })
            .and_then(|_| self.ctx.submit_and_wait(cmd, self.fence))
        };
        // SAFETY: waited for (or never submitted).
        unsafe { self.ctx.device.free_command_buffers(self.ctx.pool, &[cmd]) };
        self.counters.submits += 1;
        r
    }

    fn kv(&self) -> PluginResult<&KvPages> {
        self.kv.as_ref().ok_or_else(|| invalid("create_kv_pool first"))
    }

    /// Each page's byte offset and size in the pool, or an error naming the first page outside it.
    fn page_regions(&self, pages: &[u32]) -> PluginResult<Vec<(u64, u64)>> {
        let kv = self.kv()?;
        let pool = kv.info.n_pages + kv.info.window_pages;
        pages
            .iter()
            .map(|&p| kv.page_region(p).ok_or_else(|| invalid(format!("page {p} outside the {pool}-page pool"))))
            .collect()
    }
}

impl BackendImpl for VulkanBackend {
    fn device(&self) -> DeviceInfo {
        self.ctx.info.info.clone()
    }

    fn load_model(&mut self, program: &ModelProgram) -> PluginResult<()> {
        program.check_shapes().map_err(invalid)?;
        if let Some(Op::Moe { router, .. }) = program.ops.iter().find(|o| matches!(o, Op::Moe { .. })) {
            let n_exp = program.tensors[*router as usize].rows();
            let n_used = program
                .ops
                .iter()
                .find_map(|o| match o {
                    Op::Moe { n_used, .. } => Some(*n_used),
                    _ => None,
                })
                .unwrap_or(1);
            if n_exp > 256 || n_used > 64 {
                return Err(PluginError::unsupported(format!(
                    "vulkan: {n_exp} experts; the router kernel handles 256 experts, 64 chosen"
                )));
            }
        }
        if program.hparams.head_dim > 256 || !program.hparams.head_dim.is_multiple_of(2) {
            return Err(PluginError::unsupported(format!(
                "vulkan: head width {} (the attention kernel handles even widths up to 256)",
                program.hparams.head_dim
            )));
        }
        let widest_norm = program.ops.iter().filter_map(|o| match *o {
            Op::RmsNorm { input, .. } => Some(program.activation_widths[input as usize]),
            Op::HeadRmsNorm { head_dim, .. } => Some(head_dim),
            _ => None,
        });
        if let Some(w) = widest_norm.max().filter(|&w| w > MAX_NORM_WIDTH) {
            return Err(PluginError::unsupported(format!(
                "vulkan: a norm over {w} elements (the kernel handles up to {MAX_NORM_WIDTH})"
            )));
        }
        self.drop_step_buffers();
        if let Some(kv) = self.kv.take() {
            kv.buf.free(&mut self.ctx);
        }
        if let Some(m) = self.model.take() {
            m.weights.free(&mut self.ctx);
        }
        let weights = Weights::upload(&mut self.ctx, program)?;
        self.counters.bytes_uploaded += weights.bytes;
        let embed_rows = program
            .ops
            .iter()
            .find_map(|o| match o {
                Op::Embed { table, .. } => Some(program.tensors[*table as usize].rows() as u32),
                _ => None,
            })
            .unwrap_or(0);
        self.model = Some(Model { program: program.clone(), weights, embed_rows });
        Ok(())
    }

    fn create_kv_pool(&mut self, spec: KvPoolSpec) -> PluginResult<KvPoolInfo> {
        let model = self.model.as_ref().ok_or_else(|| invalid("load_model first"))?;
        let hp = &model.program.hparams;
        if spec.page_size == 0 || spec.n_pages == 0 {
            return Err(invalid("KV pool needs at least one page of at least one token"));
        }
        let layout = KvLayout::of(&model.program, spec.window_pages > 0);
        let per_layer = 2 * spec.page_size as u64 * (hp.n_head_kv * hp.head_dim) as u64 * 2;
        let (bytes_per_page, bytes_per_window_page) =
            (layout.full_layers as u64 * per_layer, layout.window_layers as u64 * per_layer);
        let total = bytes_per_page
            .checked_mul(spec.n_pages as u64)
            .zip(bytes_per_window_page.checked_mul(spec.window_pages as u64))
            .and_then(|(a, b)| a.checked_add(b))
            .ok_or_else(|| invalid("KV pool size overflows"))?;
        let window_keys = window_keys(&model.program);
        self.drop_step_buffers();
        if let Some(kv) = self.kv.take() {
            kv.buf.free(&mut self.ctx);
        }
        let buf = GpuBuffer::new(&mut self.ctx, "KV pages", total.max(4), Place::Device)?;
        let (b, size) = (buf.buffer, buf.size);
        let info = KvPoolInfo {
            n_pages: spec.n_pages,
            page_size: spec.page_size,
            bytes_per_page,
            window_pages: spec.window_pages,
            bytes_per_window_page,
        };
        self.kv = Some(KvPages { buf, info, layout, window_keys });
        // SAFETY: recording a fill of a buffer this backend owns.
        self.one_off(|d, cmd| unsafe { d.cmd_fill_buffer(cmd, b, 0, size, 0) })?;
        Ok(info)
    }

    fn execute(&mut self, step: &Step) -> PluginResult<StepOutput> {
        let model = self.model.as_ref().ok_or_else(|| invalid("execute before load_model"))?;
        let kv = self.kv.as_ref().ok_or_else(|| invalid("execute before create_kv_pool"))?;
        step.validate(&kv.info, kv.window_keys).map_err(invalid)?;
        let n_vocab = model.program.hparams.n_vocab;
        if let Some(t) = step.tokens.iter().find(|&&t| t >= model.embed_rows) {
            return Err(invalid(format!("token id {t} is outside the {}-token vocabulary", model.embed_rows)));
        }
        let rows = step.tokens.len() as u32;
        if rows == 0 {
            return Ok(StepOutput::default());
        }
        let one_row_per_sequence = rows_read_only_their_own_new_keys(step, kv.info.page_size);
        let pages: u32 = step.seqs.iter().map(|s| (s.page_table.len() + s.window_table.len()) as u32).sum();
        self.ensure_capacity(rows, pages)?;
        let started = Instant::now();
        let uploaded = self.write_inputs(step);
        let inputs_done = Instant::now();
        let longest = step.positions.iter().max().map_or(0, |&p| p + 1);
        let shape = StepShape {
            rows,
            logit_rows: (step.logit_row_count() + step.top_row_count()) as u32,
            top_rows: step.top_row_count() as u32,
            split_keys: split_keys(rows, longest),
            one_sequence: step.seqs.len() == 1,
            one_row_per_sequence,
        };
        let rec = self.recorded_for(shape)?;
        let (cmd, dispatches, expected) = (rec.cmd, rec.dispatches, rec.last_time);
        let recorded = Instant::now();
        self.ctx.submit_and_wait_by(cmd, self.fence, self.fence_wait, expected)?;
        let waited = Instant::now();
        if let Some(p) = self.profiler.as_mut() {
            p.collect(&self.ctx, &self.recorded[&shape].names)?;
        }
        let device_time_ns = match self.timestamps {
            Some(q) => {
                let mut t = [0u64; 2];
                // SAFETY: both queries were written by the finished submission.
                unsafe {
                    self.ctx.device.get_query_pool_results(
                        q,
                        0,
                        &mut t,
                        vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
                    )
                }
                .map_err(vk_err("reading timestamps"))?;
                (t[1].saturating_sub(t[0]) as f64 * self.ctx.caps.timestamp_period as f64) as u64
            }
            None => started.elapsed().as_nanos() as u64,
        };
        if let Some(r) = self.recorded.get_mut(&shape) {
            r.last_time = Some(Duration::from_nanos(device_time_ns));
        }
        let whole_rows = shape.logit_rows - shape.top_rows;
        let n = whole_rows as usize * n_vocab as usize;
        let bufs = self.bufs.as_mut().expect("capacity ensured");
        let copying = Instant::now();
        let logits: Vec<f32> = bufs.logits.mapped()[..n * 4]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let summaries = read_summaries(&bufs.summaries_host.mapped()[..], shape.top_rows, n_vocab);
        if let Some(p) = self.profiler.as_mut() {
            p.host_step(&[
                (HostPhase::Inputs, inputs_done - started),
                (HostPhase::Record, recorded - inputs_done),
                (HostPhase::SubmitAndWait, waited - recorded),
                (HostPhase::Timestamps, copying - waited),
                (HostPhase::Readback, copying.elapsed()),
            ]);
        }
        let c = &mut self.counters;
        c.steps += 1;
        c.submits += 1;
        c.dispatches += dispatches as u64;
        c.bytes_uploaded += uploaded;
        c.bytes_downloaded += (n + (shape.top_rows * summary_words(n_vocab)) as usize) as u64 * 4;
        c.device_time_ns += device_time_ns;
        let (top_ids, top_logits, top_norms) = summaries;
        Ok(StepOutput {
            logits: logits.into(),
            rows: whole_rows,
            top_ids: top_ids.into(),
            top_logits: top_logits.into(),
            top_norms: top_norms.into(),
            device_time_ns,
        })
    }

    fn copy_pages(&mut self, copies: &[PageCopy]) -> PluginResult<()> {
        let mut regions = Vec::new();
        for c in copies.iter().filter(|c| c.src != c.dst) {
            let [(src_offset, size), (dst_offset, dst_size)] = self.page_regions(&[c.src, c.dst])?[..] else {
                unreachable!("two pages, two regions")
            };
            if size != dst_size || (c.src < self.kv()?.info.n_pages) != (c.dst < self.kv()?.info.n_pages) {
                return Err(invalid(format!("page copy {} → {} across page classes", c.src, c.dst)));
            }
            if size > 0 {
                regions.push(vk::BufferCopy { src_offset, dst_offset, size });
            }
        }
        if regions.is_empty() {
            return Ok(());
        }
        let b = self.kv()?.buf.buffer;
        // SAFETY: regions lie inside the pool (pages checked) and src != dst for each.
        self.one_off(|d, cmd| unsafe { d.cmd_copy_buffer(cmd, b, b, &regions) })
    }

    fn swap_out(&mut self, pages: &[u32]) -> PluginResult<Vec<u8>> {
        let pool = self.page_regions(pages)?;
        let b = self.kv()?.buf.buffer;
        let (regions, total) = swap_regions(&pool, true);
        if total == 0 {
            return Ok(Vec::new());
        }
        let mut host = GpuBuffer::new(&mut self.ctx, "swapped pages", total, Place::Readback)?;
        let hb = host.buffer;
        // SAFETY: regions inside both buffers.
        let r = self.one_off(|d, cmd| unsafe { d.cmd_copy_buffer(cmd, b, hb, &regions) });
        let out = r.map(|_| host.mapped()[..total as usize].to_vec());
        host.free(&mut self.ctx);
        self.counters.bytes_downloaded += total;
        out
    }

    fn swap_in(&mut self, pages: &[u32], data: &[u8]) -> PluginResult<()> {
        let pool = self.page_regions(pages)?;
        let b = self.kv()?.buf.buffer;
        let (regions, total) = swap_regions(&pool, false);
        if data.len() as u64 != total {
            return Err(invalid(format!("swap_in: {} bytes for {} pages of {total} bytes", data.len(), pages.len())));
        }
        if total == 0 {
            return Ok(());
        }
        let mut host = GpuBuffer::new(&mut self.ctx, "swapped pages", total, Place::Upload)?;
        host.mapped()[..total as usize].copy_from_slice(data);
        let hb = host.buffer;
        // SAFETY: regions inside both buffers.
        let r = self.one_off(|d, cmd| unsafe { d.cmd_copy_buffer(cmd, hb, b, &regions) });
        host.free(&mut self.ctx);
        self.counters.bytes_uploaded += total;
        r
    }

    fn counters(&self) -> Counters {
        Counters { kernels_compiled: self.kernels.compiled, ..self.counters }
    }
    /// Prompt kernels work on tiles of rows 16i..16i+15 of the step, and a tile takes rows of
    /// one sequence only: chunks should start on a tile boundary and hold at least one tile.
    fn scheduling(&self) -> SchedulingHints {
        SchedulingHints { min_prefill_chunk: 16, row_group: 16 }
    }

    fn prepare_steps(&mut self, max_rows: u32) -> PluginResult<()> {
        self.prepare_shapes(max_rows)
    }
}

/// Copy regions between KV pages (`pool`: each page's offset and size) and a host buffer
/// holding them back to back, in that order: pages → host when `out`, host → pages otherwise.
/// Also returns the host buffer's size.
fn swap_regions(pool: &[(u64, u64)], out: bool) -> (Vec<vk::BufferCopy>, u64) {
    let mut host = 0u64;
    let mut regions = Vec::new();
    for &(page, size) in pool.iter().filter(|(_, size)| *size > 0) {
        let (src_offset, dst_offset) = if out { (page, host) } else { (host, page) };
        regions.push(vk::BufferCopy { src_offset, dst_offset, size });
        host += size;
    }
    (regions, host)
}

impl Drop for VulkanBackend {
    fn drop(&mut self) {
        // SAFETY: wait for the queue, then free everything this backend created, once.
        unsafe {
            let _ = self.ctx.device.device_wait_idle();
        }
        self.drop_step_buffers();
        if let Some(kv) = self.kv.take() {
            kv.buf.free(&mut self.ctx);
        }
        if let Some(m) = self.model.take() {
            m.weights.free(&mut self.ctx);
        }
        self.kernels.destroy(&self.ctx);
        if let Some(p) = self.profiler.take() {
            p.destroy(&self.ctx);
        }
        // SAFETY: idle device; each handle destroyed once.
        unsafe {
            if let Some(q) = self.timestamps.take() {
                self.ctx.device.destroy_query_pool(q, None);
            }
            self.ctx.device.destroy_fence(self.fence, None);
        }
    }
}

/// The `rows` summaries logit_summary.comp wrote (`summary_words(n_vocab)` little-endian words
/// each: the candidates' ids, their values, the log-normaliser), as the output's three arrays.
fn read_summaries(bytes: &[u8], rows: u32, n_vocab: u32) -> (Vec<u32>, Vec<f32>, Vec<f32>) {
    let (k, words) = (top_count(n_vocab) as usize, summary_words(n_vocab) as usize);
    let word = |i: usize| u32::from_le_bytes([bytes[4 * i], bytes[4 * i + 1], bytes[4 * i + 2], bytes[4 * i + 3]]);
    let (mut ids, mut values, mut norms) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rows as usize {
        let base = r * words;
        ids.extend((0..k).map(|j| word(base + j)));
        values.extend((0..k).map(|j| f32::from_bits(word(base + k + j))));
        norms.push(f32::from_bits(word(base + 2 * k)));
    }
    (ids, values, norms)
}
