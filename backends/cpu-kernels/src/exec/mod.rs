//! The CPU tier's step executor: runs a model program over a batched step with paged KV.

mod attention;
mod gated;
mod kv;
mod matmul;
mod moe;
mod ops;
mod weights;

pub use moe::top_k;

use crate::pool::ThreadPool;
use attention::AttnShape;
use kv::KvPool;
use matmul::{matmul, wants, QuantizedCopies};
use std::{collections::HashMap, time::Instant};
use weights::Weight;
use zinc_plugin_api::{
    window_keys, AttentionSpan, BackendImpl, Counters, DeviceInfo, Hparams, KvLayout, KvPoolInfo, KvPoolSpec,
    LogitRows, ModelProgram, Op, PageCopy, PluginError, PluginResult, RopeFreqs, SchedulingHints, Step, StepOutput,
};

/// The step being executed, between `begin_step` and `end_step`.
struct StepState {
    step: Step,
    started: Instant,
    output: Option<u32>,
}

struct Loaded {
    program: ModelProgram,
    weights: Vec<Weight>,
    /// Small vectors (norm weights) dequantized once.
    vectors: HashMap<u32, Vec<f32>>,
    /// RoPE inverse frequencies: [`RopeFreqs::Global`]'s, then [`RopeFreqs::Local`]'s.
    inv_freq: [Vec<f32>; 2],
    kv_dim: usize,
}

impl Loaded {
    fn inv_freq(&self, freqs: RopeFreqs) -> &[f32] {
        &self.inv_freq[match freqs {
            RopeFreqs::Global => 0,
            RopeFreqs::Local => 1,
        }]
    }
}

/// The CPU backend object.
pub struct CpuBackend {
    device: DeviceInfo,
    pool: ThreadPool,
    model: Option<Loaded>,
    kv: Option<KvPool>,
    counters: Counters,
    acts: Vec<Vec<f32>>,
    rows: Vec<usize>,
    /// Each activation's quantized copies in the current step.
    quantized: Vec<QuantizedCopies>,
    current: Option<StepState>,
    /// How K-quant weights meet activations (plugin option `k_quant_activations`).
    pub k_quant_activations: crate::quant::KQuantActivations,
    /// Whether prompt chunks may go through weight panels (plugin option `panels`): faster,
    /// but a row's arithmetic then depends on how many rows share its step. `false` also
    /// sends a prompt's lone rows through attention's prompt kernel (`AttnShape::row_invariant`).
    pub panels: bool,
}

impl CpuBackend {
    /// A backend running on `threads` threads.
    pub fn new(device: DeviceInfo, threads: usize) -> CpuBackend {
        CpuBackend {
            device,
            pool: ThreadPool::new(threads),
            model: None,
            kv: None,
            counters: Counters::default(),
            acts: Vec::new(),
            rows: Vec::new(),
            quantized: Vec::new(),
            current: None,
            k_quant_activations: Default::default(),
            panels: true,
        }
    }
}

fn invalid(msg: impl Into<String>) -> PluginError {
    PluginError::invalid(msg)
}

impl CpuBackend {
    fn take(&mut self, a: u32, rows: usize) -> Vec<f32> {
        let w = self.model.as_ref().expect("model loaded").program.activation_widths[a as usize] as usize;
        let mut v = std::mem::take(&mut self.acts[a as usize]);
        v.resize(rows * w, 0.0);
        self.quantized[a as usize] = QuantizedCopies::default();
        v
    }

    fn put(&mut self, a: u32, rows: usize, v: Vec<f32>) {
        self.acts[a as usize] = v;
        self.rows[a as usize] = rows;
    }

    /// Starts a step: validates it and sizes the activation buffers. Returns the number of
    /// ops; run each with [`CpuBackend::run_op`], then collect with [`CpuBackend::end_step`].
    /// The kfd backend drives these from its emulated packet processor, one op per dispatch.
    pub fn begin_step(&mut self, step: &Step) -> PluginResult<usize> {
        let model = self.model.as_ref().ok_or_else(|| invalid("execute before load_model"))?;
        let kv = self.kv.as_ref().ok_or_else(|| invalid("execute before create_kv_pool"))?;
        step.validate(&kv.info(), kv.window_keys).map_err(invalid)?;
        let n_ops = model.program.ops.len();
        let n_acts = model.program.activation_widths.len();
        self.acts.resize_with(n_acts, Vec::new);
        self.rows.resize(n_acts, 0);
        self.quantized.clear();
        self.quantized.resize_with(n_acts, QuantizedCopies::default);
        self.current = Some(StepState { step: step.clone(), started: Instant::now(), output: None });
        Ok(n_ops)
    }

    /// Runs op `k` of the program on the current step.
    pub fn run_op(&mut self, k: usize) -> PluginResult<()> {
        let mut st = self.current.take().ok_or_else(|| invalid("run_op outside a step"))?;
        let r = self.op(&mut st, k);
        self.current = Some(st);
        r
    }

    fn op(&mut self, st: &mut StepState, k: usize) -> PluginResult<()> {
        let step = &st.step;
        let model = self.model.as_ref().ok_or_else(|| invalid("no model"))?;
        let hp = model.program.hparams.clone();
        let op = model.program.ops.get(k).cloned().ok_or_else(|| invalid(format!("op {k} out of range")))?;
        let eps = hp.rms_eps;
        self.counters.dispatches += 1;
        match op {
            Op::Embed { table, out } => self.embed(step, table, out)?,
            Op::RmsNorm { input, weight, out } => {
                let rows = self.rows[input as usize];
                let mut o = self.take(out, rows);
                let m = self.model.as_ref().unwrap();
                let g = &m.vectors[&weight];
                let w = g.len();
                for r in 0..rows {
                    let row = &mut o[r * w..(r + 1) * w];
                    if input == out {
                        ops::rms_norm_in_place(row, g, eps);
                    } else {
                        ops::rms_norm(&self.acts[input as usize][r * w..(r + 1) * w], g, eps, row);
                    }
                }
                self.put(out, rows, o);
            }
            Op::HeadRmsNorm { buf, weight, head_dim } => {
                let rows = self.rows[buf as usize];
                let mut o = self.take(buf, rows);
                let g = &self.model.as_ref().unwrap().vectors[&weight];
                for head in o.chunks_exact_mut(head_dim as usize) {
                    ops::rms_norm_in_place(head, g, eps);
                }
                self.put(buf, rows, o);
            }
            Op::MatMul { input, weight, out } => {
                let rows = self.rows[input as usize];
                let mut o = self.take(out, rows);
                let m = self.model.as_ref().unwrap();
                let w = &m.weights[weight as usize];
                let width = m.program.activation_widths[input as usize] as usize;
                let x = &self.acts[input as usize];
                let rows_in = self.quantized[input as usize].rows(&self.pool, x, width, rows, wants(w));
                matmul(&self.pool, w, 0, w.rows(), &rows_in, &mut o);
                self.put(out, rows, o);
            }
            Op::Rope { buf, head_dim, freqs } => {
                let rows = self.rows[buf as usize];
                let mut o = self.take(buf, rows);
                let m = self.model.as_ref().unwrap();
                let width = m.program.activation_widths[buf as usize] as usize;
                for r in 0..rows {
                    ops::rope(
                        &mut o[r * width..(r + 1) * width],
                        head_dim as usize,
                        step.positions[r],
                        m.inv_freq(freqs),
                        hp.rope_style,
                    );
                }
                self.put(buf, rows, o);
            }
            Op::Attention { layer, q, k, v, out, span } => self.attention(step, &hp, (layer, q, k, v, out), span),
            Op::SwiGlu { gate, up, out } | Op::GeluGlu { gate, up, out } | Op::Add { a: gate, b: up, out } => {
                let rows = self.rows[gate as usize];
                let mut o = self.take(out, rows);
                // An operand that is also the output is read from `o` itself (the residual add
                // `x = x + f`): no copy of either operand in the token loop.
                let a = (gate != out).then(|| &self.acts[gate as usize][..]);
                let b = (up != out).then(|| &self.acts[up as usize][..]);
                match op {
                    Op::SwiGlu { .. } => gated::gated(&mut o, a, b, gated::Gate::Silu),
                    Op::GeluGlu { .. } => gated::gated(&mut o, a, b, gated::Gate::GeluTanh),
                    _ => ops::combine(&mut o, a, b, |p, q| p + q),
                }
                self.put(out, rows, o);
            }
            Op::Scale { buf, factor } => {
                let rows = self.rows[buf as usize];
                let mut o = self.take(buf, rows);
                o.iter_mut().for_each(|x| *x *= factor);
                self.put(buf, rows, o);
            }
            Op::ScaleRotated { buf, head_dim, dims, factor } => {
                let rows = self.rows[buf as usize];
                let mut o = self.take(buf, rows);
                o.chunks_exact_mut(head_dim as usize)
                    .for_each(|head| head[..dims as usize].iter_mut().for_each(|x| *x *= factor));
                self.put(buf, rows, o);
            }
            Op::SoftCap { buf, cap } => {
                let rows = self.rows[buf as usize];
                let mut o = self.take(buf, rows);
                ops::soft_cap(&mut o, cap);
                self.put(buf, rows, o);
            }
            Op::AddBias { buf, bias } => {
                let rows = self.rows[buf as usize];
                let mut o = self.take(buf, rows);
                let b = &self.model.as_ref().unwrap().vectors[&bias];
                o.chunks_exact_mut(b.len()).for_each(|row| row.iter_mut().zip(b).for_each(|(x, y)| *x += y));
                self.put(buf, rows, o);
            }
            Op::Moe { input, router, gate_exps, up_exps, down_exps, n_used, out } => {
                self.moe(input, [router, gate_exps, up_exps, down_exps], n_used, out)
            }
            Op::SelectLogitRows { input, out } => self.select_logit_rows(step, input, out),
            Op::Output { input } => st.output = Some(input),
        }
        Ok(())
    }

    /// `out[r] = table[step.tokens[r]]`, refusing token ids outside the vocabulary.
    fn embed(&mut self, step: &Step, table: u32, out: u32) -> PluginResult<()> {
        let n = step.tokens.len();
        let mut o = self.take(out, n);
        let m = self.model.as_ref().expect("checked by begin_step");
        let t = &m.weights[table as usize];
        let w = t.row_len();
        for (r, &tok) in step.tokens.iter().enumerate() {
            if tok as usize >= t.rows() {
                let msg = format!("token id {tok} is outside the {}-token vocabulary", t.rows());
                self.put(out, n, o);
                return Err(invalid(msg));
            }
            zinc_formats::dequant::dequantize_row(t.dtype, t.row(tok as usize), &mut o[r * w..(r + 1) * w]);
        }
        self.put(out, n, o);
        Ok(())
    }

    /// Stores the step's K and V rows in their pages, then attention of `q` into `out`.
    fn attention(
        &mut self,
        step: &Step,
        hp: &Hparams,
        (layer, q, k, v, out): (u32, u32, u32, u32, u32),
        span: AttentionSpan,
    ) {
        let n = step.tokens.len();
        let kv_dim = self.model.as_ref().expect("checked by begin_step").kv_dim;
        let kvp = self.kv.as_mut().expect("checked by begin_step");
        attention::store_kv(kvp, step, layer as usize, &self.acts[k as usize], &self.acts[v as usize], kv_dim);
        let mut o = self.take(out, n);
        let shape = AttnShape {
            n_head: hp.n_head as usize,
            n_head_kv: hp.n_head_kv as usize,
            head_dim: hp.head_dim as usize,
            span,
            softcap: hp.attn_logit_softcap,
            row_invariant: !self.panels,
        };
        let kv = self.kv.as_ref().expect("checked by begin_step");
        attention::attend(&self.pool, kv, step, layer as usize, &shape, &self.acts[q as usize], &mut o);
        self.put(out, n, o);
    }

    /// The MoE block of `input` over the router and the experts' gate, up and down tensors.
    fn moe(&mut self, input: u32, [router, gate, up, down]: [u32; 4], n_used: u32, out: u32) {
        let rows = self.rows[input as usize];
        let mut o = self.take(out, rows);
        let m = self.model.as_ref().expect("checked by begin_step");
        let experts = moe::Experts {
            router: &m.weights[router as usize],
            gate: &m.weights[gate as usize],
            up: &m.weights[up as usize],
            down: &m.weights[down as usize],
            n_used: n_used as usize,
        };
        let width = m.program.activation_widths[input as usize] as usize;
        moe::moe(&self.pool, &experts, &self.acts[input as usize], rows, width, &mut o);
        self.put(out, rows, o);
    }

    /// Copies the rows whose logits the step asks for into `out`.
    fn select_logit_rows(&mut self, step: &Step, input: u32, out: u32) {
        let width =
            self.model.as_ref().expect("checked by begin_step").program.activation_widths[input as usize] as usize;
        let mut picked = Vec::new();
        for s in step.seqs.iter() {
            let (a, b) = (s.first_row as usize, (s.first_row + s.n_rows) as usize);
            match s.logits {
                LogitRows::None => {}
                LogitRows::Last | LogitRows::LastTop => picked.push(b - 1),
                LogitRows::All => picked.extend(a..b),
            }
        }
        // The program selects into a separate buffer (validated at load), so only the picked
        // rows are copied.
        let mut o = self.take(out, picked.len());
        let x = &self.acts[input as usize];
        for (i, r) in picked.iter().enumerate() {
            o[i * width..(i + 1) * width].copy_from_slice(&x[r * width..(r + 1) * width]);
        }
        self.put(out, picked.len(), o);
    }

    /// Finishes the current step and returns its logits.
    pub fn end_step(&mut self) -> PluginResult<StepOutput> {
        let st = self.current.take().ok_or_else(|| invalid("end_step outside a step"))?;
        let n_vocab = self.model.as_ref().ok_or_else(|| invalid("no model"))?.program.hparams.n_vocab as usize;
        let rows = st.output.map_or(0, |a| self.rows[a as usize]);
        let picked = st.output.map_or(&[][..], |a| &self.acts[a as usize][..rows * n_vocab]);
        let elapsed = st.started.elapsed().as_nanos() as u64;
        let out = StepOutput::from_picked_rows(&st.step, picked, n_vocab, elapsed);
        self.counters.steps += 1;
        self.counters.submits += 1;
        self.counters.bytes_downloaded += (out.logits.len() * 4) as u64;
        self.counters.device_time_ns += elapsed;
        Ok(out)
    }

    fn run_step(&mut self, step: &Step) -> PluginResult<StepOutput> {
        let n_ops = self.begin_step(step)?;
        for k in 0..n_ops {
            if let Err(e) = self.run_op(k) {
                self.current = None;
                return Err(e);
            }
        }
        self.end_step()
    }
}

impl BackendImpl for CpuBackend {
    fn device(&self) -> DeviceInfo {
        self.device.clone()
    }

    fn load_model(&mut self, program: &ModelProgram) -> PluginResult<()> {
        let k = self.k_quant_activations;
        let mut weights = program.tensors.iter().map(|t| Weight::adopt(t, k)).collect::<PluginResult<Vec<_>>>()?;
        weights.iter_mut().for_each(|w| w.panels = self.panels);
        program.check_shapes().map_err(invalid)?;
        if std::env::var_os("ZINC_CPU_NO_PACK").is_none() {
            for op in program.ops.iter() {
                match *op {
                    Op::MatMul { weight, .. } => weights[weight as usize].pack(),
                    Op::Moe { router, gate_exps, up_exps, down_exps, .. } => {
                        for w in [router, gate_exps, up_exps, down_exps] {
                            weights[w as usize].pack();
                        }
                    }
                    _ => {}
                }
            }
        }
        let mut vectors = HashMap::new();
        for op in program.ops.iter() {
            if let Op::RmsNorm { weight, .. } | Op::HeadRmsNorm { weight, .. } | Op::AddBias { bias: weight, .. } = *op
            {
                vectors.entry(weight).or_insert_with(|| weights[weight as usize].to_f32());
            }
        }
        let hp = &program.hparams;
        self.model = Some(Loaded {
            program: program.clone(),
            weights,
            vectors,
            inv_freq: [hp.rope_inv_freq(RopeFreqs::Global), hp.rope_inv_freq(RopeFreqs::Local)],
            kv_dim: (hp.n_head_kv * hp.head_dim) as usize,
        });
        self.kv = None;
        Ok(())
    }

    fn create_kv_pool(&mut self, spec: KvPoolSpec) -> PluginResult<KvPoolInfo> {
        let m = self.model.as_ref().ok_or_else(|| invalid("create_kv_pool before load_model"))?;
        if spec.page_size == 0 || spec.n_pages == 0 {
            return Err(invalid("KV pool needs at least one page of at least one token"));
        }
        self.kv = None;
        let split = spec.window_pages > 0;
        let kv =
            KvPool::new(spec, KvLayout::of(&m.program, split), m.kv_dim, window_keys(&m.program)).ok_or_else(|| {
                PluginError::new(
                    zinc_plugin_api::ErrorKind::OutOfMemory,
                    format!("cannot allocate {} KV pages and {} window pages", spec.n_pages, spec.window_pages),
                )
            })?;
        let info = kv.info();
        self.kv = Some(kv);
        Ok(info)
    }

    fn execute(&mut self, step: &Step) -> PluginResult<StepOutput> {
        self.run_step(step)
    }

    fn copy_pages(&mut self, copies: &[PageCopy]) -> PluginResult<()> {
        let kv = self.kv.as_mut().ok_or_else(|| invalid("no KV pool"))?;
        for c in copies {
            let src = match (kv.page(c.src), kv.page(c.dst)) {
                (Some((from, data)), Some((to, _))) if from == to => data.to_vec(),
                (Some(_), Some(_)) => {
                    return Err(invalid(format!("page copy {} → {} across page classes", c.src, c.dst)))
                }
                _ => return Err(invalid(format!("page copy {} → {} outside the pool", c.src, c.dst))),
            };
            kv.page_mut(c.dst).expect("checked").copy_from_slice(&src);
        }
        Ok(())
    }

    fn swap_out(&mut self, pages: &[u32]) -> PluginResult<Vec<u8>> {
        let kv = self.kv.as_ref().ok_or_else(|| invalid("no KV pool"))?;
        let mut out = Vec::new();
        for &p in pages {
            let (_, data) = kv.page(p).ok_or_else(|| invalid(format!("page {p} outside the pool")))?;
            out.extend(data.iter().flat_map(|h| h.to_le_bytes()));
        }
        self.counters.bytes_downloaded += out.len() as u64;
        Ok(out)
    }

    fn swap_in(&mut self, pages: &[u32], data: &[u8]) -> PluginResult<()> {
        let kv = self.kv.as_mut().ok_or_else(|| invalid("no KV pool"))?;
        let info = kv.info();
        if let Some(p) = pages.iter().find(|&&p| kv.page(p).is_none()) {
            return Err(invalid(format!("page {p} outside the pool")));
        }
        let want: u64 = pages.iter().map(|&p| info.page_bytes(p)).sum();
        if data.len() as u64 != want {
            return Err(invalid(format!("swap-in of {} pages needs {want} bytes, got {}", pages.len(), data.len())));
        }
        let mut rest = data;
        for &p in pages {
            let dst = kv.page_mut(p).expect("checked");
            let (bytes, tail) = rest.split_at(dst.len() * 2);
            for (h, b) in dst.iter_mut().zip(bytes.chunks_exact(2)) {
                *h = u16::from_le_bytes([b[0], b[1]]);
            }
            rest = tail;
        }
        self.counters.bytes_uploaded += data.len() as u64;
        Ok(())
    }

    fn counters(&self) -> Counters {
        self.counters
    }
    /// Prompt attention works on blocks of 16 query rows and the weight panels on 16 or more
    /// activation rows; the order of rows does not matter.
    fn scheduling(&self) -> SchedulingHints {
        SchedulingHints { min_prefill_chunk: 16, row_group: 1 }
    }
}
