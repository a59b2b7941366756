//! The lowering plan of one step: which ops of the model program become which units of
//! dispatches, and what each unit reads, computes first (its prologue: quantizing its input,
//! a half-precision copy, a folded norm) and writes last (its epilogue: a SwiGLU, a residual
//! add, RoPE and the KV store). It is a pure function of the program, facts about the weights
//! and step buffers, the device's capabilities and the step's shape, so every fusion rule is
//! tested without a GPU ([`fusion`] holds them, one function each), and `ZINC_VULKAN_PLAN=1`
//! prints the plan of each step shape when it is recorded. Recording (record/mod.rs) is a
//! loop over the units; which kernel variant a unit's products take is chosen there from the
//! unit and the capabilities (ops.rs), as the MoE block's expert products need the same
//! choice.

use super::StepShape;
use crate::catalogue::q8_activations;
use crate::context::Capabilities;
use std::collections::HashSet;
use std::fmt;
use zinc_formats::GgmlType;
use zinc_plugin_api::{AttentionSpan, Hparams, ModelProgram, Op, PluginError, PluginResult, RopeFreqs};

mod fusion;
mod liveness;
#[cfg(test)]
mod tests;
mod units;

use fusion::moe_path;
pub(super) use fusion::{qkv_dispatches, MoePath, SHARED_X_MAX_K};
pub(super) use units::{Prelude, QkvRope};

/// What the plan needs to know of one weight matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TensorFacts {
    /// Storage type.
    pub dtype: GgmlType,
    /// Elements per row.
    pub row_len: u32,
    /// Rows per expert for 3-D expert tensors, else all rows.
    pub rows_per_matrix: u32,
}

/// Everything a plan depends on besides the program: the weights' types and shapes, which
/// activations have an 8-bit copy and whether the half-precision copy exists (the step
/// buffers), the device's capabilities and the step's shape.
pub struct PlanFacts {
    /// Facts of each weight tensor the ops read, by tensor id.
    pub tensors: Vec<Option<TensorFacts>>,
    /// Activations with an 8-bit copy in the step buffers.
    pub q8: HashSet<u32>,
    /// The step buffers hold a half-precision activation copy (devices with matrix units).
    pub half_acts: bool,
    /// The kernel paths the device takes.
    pub caps: Capabilities,
    /// The step's rows and kind.
    pub shape: StepShape,
}

impl PlanFacts {
    /// Facts of weight tensor `t`.
    pub(super) fn tensor(&self, t: u32) -> TensorFacts {
        self.tensors.get(t as usize).copied().flatten().expect("facts of every tensor the ops read")
    }
}

/// How a unit's products read their input activation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum ProductInput {
    /// Its f32 rows (weights without 8-bit activation kernels: floats, K-quants).
    F32,
    /// Its 8-bit copy; `quantize`: the copy is made first (no earlier dispatch left it current).
    Q8 { quantize: bool },
    /// The half-precision copy of its 8-bit copy (matrix units); `convert`: that copy is made
    /// first from the 8-bit one, which is itself made first when `quantize`.
    Half { quantize: bool, convert: bool },
    /// The RMS norm that writes it, folded in: the products normalise the norm's source row
    /// themselves (decode on the shared-activation kernel).
    Norm(NormFold),
}

impl ProductInput {
    /// Whether the products read the input's 8-bit copy (or its half copy, made from it).
    pub(super) fn is_quantized(self) -> bool {
        !matches!(self, ProductInput::F32)
    }
}

/// An RMS norm that the units reading its output compute themselves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct NormFold {
    /// The activation the norm reads (its output is never written).
    pub(super) source: u32,
    /// The norm's weights.
    pub(super) weight: u32,
}

/// What a product writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Epilogue {
    /// Each product's output.
    Store,
    /// The SwiGLU of the gate product (the first) and the up product (beside it) into `out`,
    /// with its 8-bit copy (matmul_q8 `_glu_sgx`).
    Glu { out: u32 },
    /// The product's result added to `residual` in place (the residual add after it).
    AddTo { residual: u32 },
}

/// One to three products of one input, in one dispatch.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Products {
    pub(super) input: u32,
    pub(super) rows: u32,
    /// (weight, output) of each product; the first decides the kernel, the others are side by
    /// side with it.
    pub(super) products: Vec<(u32, u32)>,
    pub(super) read: ProductInput,
    pub(super) epilogue: Epilogue,
}

/// The MoE block of one op.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct MoeUnit {
    pub(super) input: u32,
    pub(super) router: u32,
    pub(super) gate_exps: u32,
    pub(super) up_exps: u32,
    pub(super) down_exps: u32,
    pub(super) n_used: u32,
    pub(super) out: u32,
    pub(super) rows: u32,
    /// The norm that writes `input`, folded into the router's product, which then writes the
    /// normalised row's 8-bit copy for the experts.
    pub(super) norm: Option<NormFold>,
    /// The input's 8-bit copy is made when the first product needs it.
    pub(super) quantize: bool,
    /// The residual the experts' combined down products add to in place (the add after the
    /// block), instead of writing `out`.
    pub(super) add_to: Option<u32>,
    /// How the experts' products are computed (which also decides `add_to`).
    pub(super) path: MoePath,
}

/// What an elementwise dispatch computes of `a` and `b` (`op` in shaders/rows/elementwise.comp).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Elementwise {
    /// `a + b`.
    Add,
    /// `silu(a) · b`.
    SwiGlu,
    /// `gelu(a) · b`, GELU in its tanh form.
    GeluGlu,
    /// `a · factor` (`b` unread).
    Scale(f32),
    /// `a · factor` for the first `dims` elements of every head of `head_dim`, `a` elsewhere.
    ScaleRotated { head_dim: u32, dims: u32, factor: f32 },
    /// `a + b[i mod width]`: `b` a vector (a tensor) added to every row of `width` elements.
    AddBias { width: u32 },
    /// `cap · tanh(a / cap)` (`b` unread).
    SoftCap(f32),
}

/// One unit of the plan: the dispatches of one op or of several fused ops.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Unit {
    /// Rows of an embedding table.
    Embed { table: u32, out: u32 },
    /// RMS norm of `input` into `out` (with the 8-bit copy of `out` where one exists), after
    /// `input += add` in place when given (a residual add and the next layer's norm).
    Norm { input: u32, add: Option<u32>, weight: u32, out: u32, rows: u32 },
    /// Per-head RMS norm in place.
    HeadNorm { buf: u32, weight: u32, head_dim: u32, rows: u32 },
    /// SwiGLU with the 8-bit copy of its output.
    SwiGluQ8 { gate: u32, up: u32, out: u32, rows: u32 },
    /// Products of one input.
    Products(Products),
    /// A layer's Q, K and V products with RoPE and the KV store as their epilogue, then
    /// attention. `read` is `Q8` or `Norm`.
    QkvRope { unit: QkvRope, read: ProductInput, rows: u32 },
    /// Head norms, RoPE and KV store in one dispatch (or inside attention's), then attention.
    Prelude { unit: Prelude, rows: u32 },
    /// RoPE in place.
    Rope { buf: u32, head_dim: u32, freqs: RopeFreqs, rows: u32 },
    /// KV store of K and V, then attention.
    Attention { layer: u32, q: u32, k: u32, v: u32, out: u32, span: AttentionSpan, rows: u32 },
    /// `out = op(a, b)` over `rows` rows of `out`'s width; `b` is a tensor for `AddBias`.
    Elementwise { a: u32, b: u32, out: u32, op: Elementwise, rows: u32 },
    /// An MoE block.
    Moe(MoeUnit),
    /// The rows whose logits are returned.
    SelectLogitRows { input: u32, out: u32, rows: u32 },
}

/// The units of one step, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub(super) units: Vec<Unit>,
}

/// Plans the step `facts.shape` of `program`.
pub fn plan_step(program: &ModelProgram, facts: &PlanFacts) -> PluginResult<Plan> {
    let mut p = Planner {
        program,
        facts,
        rows: vec![facts.shape.rows; program.activation_widths.len()],
        q8_current: HashSet::new(),
        half_of: None,
        folded: None,
        units: Vec::new(),
    };
    let ops = &program.ops[..];
    let mut k = 0;
    while k < ops.len() {
        k += p.next(&ops[k..])?;
    }
    Ok(Plan { units: p.units })
}

/// The state of planning: rows per activation, which 8-bit and half copies are current, and
/// a norm waiting for the products that fold it in.
struct Planner<'a> {
    program: &'a ModelProgram,
    facts: &'a PlanFacts,
    /// Rows held by each activation (all of them until logit rows are selected).
    rows: Vec<u32>,
    /// Activations whose 8-bit copy is current.
    q8_current: HashSet<u32>,
    /// The activation whose half-precision copy is current: only across consecutive products
    /// of that activation (Q, K, V; gate, up).
    half_of: Option<u32>,
    /// A norm not yet planned because the next products fold it in: (its output, the fold).
    folded: Option<(u32, NormFold)>,
    units: Vec<Unit>,
}

impl Planner<'_> {
    fn width(&self, a: u32) -> u32 {
        self.program.activation_widths[a as usize]
    }

    fn hp(&self) -> &Hparams {
        &self.program.hparams
    }

    /// Plans the unit starting at `ops[0]`; returns the ops it spans.
    fn next(&mut self, ops: &[Op]) -> PluginResult<usize> {
        let op = &ops[0];
        if !matches!(*op, Op::MatMul { input, .. } if self.half_of == Some(input)) {
            self.half_of = None;
        }
        if self.folded.is_some_and(
            |(normed, _)| !matches!(*op, Op::MatMul { input, .. } | Op::Moe { input, .. } if input == normed),
        ) {
            return Err(PluginError::device("vulkan: internal error: a folded norm's products did not follow it"));
        }
        if let Some(len) = self.fused_attention(ops) {
            return Ok(len);
        }
        let widths = &self.program.activation_widths;
        let width = |a: u32| widths[a as usize];
        Ok(match *op {
            Op::Embed { table, out } => {
                self.rows[out as usize] = self.facts.shape.rows;
                self.q8_current.remove(&out);
                self.units.push(Unit::Embed { table, out });
                1
            }
            Op::RmsNorm { input, weight, out } => {
                let n = self.rows[input as usize];
                self.rows[out as usize] = n;
                let after = &ops[1..];
                let ctx = fusion::Context { hp: &self.program.hparams, width: &width, facts: self.facts };
                self.q8_current.remove(&out);
                if fusion::norm_folds(after, (out, n), &ctx) || fusion::moe_norm_folds(after, (out, n), &ctx) {
                    self.folded = Some((out, NormFold { source: input, weight }));
                    return Ok(1);
                }
                self.norm(Unit::Norm { input, add: None, weight, out, rows: n });
                1
            }
            // A residual add in place followed by a norm of its result: one fused dispatch.
            Op::Add { a, b, out } if fusion::add_then_norm(ops).is_some() => {
                let (weight, normed) = fusion::add_then_norm(ops).expect("matched");
                let other = if out == a { b } else { a };
                let n = self.rows[out as usize];
                self.q8_current.remove(&out);
                self.rows[normed as usize] = n;
                self.norm(Unit::Norm { input: out, add: Some(other), weight, out: normed, rows: n });
                2
            }
            Op::SwiGlu { gate, up, out } if self.facts.q8.contains(&out) && width(out) % 32 == 0 => {
                let n = self.rows[gate as usize];
                self.rows[out as usize] = n;
                self.q8_current.insert(out);
                self.units.push(Unit::SwiGluQ8 { gate, up, out, rows: n });
                1
            }
            Op::HeadRmsNorm { buf, weight, head_dim } => {
                self.q8_current.remove(&buf);
                self.units.push(Unit::HeadNorm { buf, weight, head_dim, rows: self.rows[buf as usize] });
                1
            }
            Op::MatMul { input, weight, out } => self.products(ops, (input, weight, out))?,
            Op::Rope { buf, head_dim, freqs } => {
                self.q8_current.remove(&buf);
                self.units.push(Unit::Rope { buf, head_dim, freqs, rows: self.rows[buf as usize] });
                1
            }
            Op::Attention { layer, q, k, v, out, span } => {
                let n = self.rows[q as usize];
                self.rows[out as usize] = n;
                self.attention_writes(out);
                self.units.push(Unit::Attention { layer, q, k, v, out, span, rows: n });
                1
            }
            Op::SwiGlu { gate: a, up: b, out } | Op::GeluGlu { gate: a, up: b, out } | Op::Add { a, b, out } => {
                let op = match op {
                    Op::SwiGlu { .. } => Elementwise::SwiGlu,
                    Op::GeluGlu { .. } => Elementwise::GeluGlu,
                    _ => Elementwise::Add,
                };
                let n = self.rows[a as usize];
                self.rows[out as usize] = n;
                self.q8_current.remove(&out);
                self.units.push(Unit::Elementwise { a, b, out, op, rows: n });
                1
            }
            Op::Scale { buf, factor } => {
                self.q8_current.remove(&buf);
                let rows = self.rows[buf as usize];
                self.units.push(Unit::Elementwise { a: buf, b: buf, out: buf, op: Elementwise::Scale(factor), rows });
                1
            }
            Op::ScaleRotated { buf, head_dim, dims, factor } => {
                self.q8_current.remove(&buf);
                let rows = self.rows[buf as usize];
                let op = Elementwise::ScaleRotated { head_dim, dims, factor };
                self.units.push(Unit::Elementwise { a: buf, b: buf, out: buf, op, rows });
                1
            }
            Op::SoftCap { buf, cap } => {
                self.q8_current.remove(&buf);
                let rows = self.rows[buf as usize];
                self.units.push(Unit::Elementwise { a: buf, b: buf, out: buf, op: Elementwise::SoftCap(cap), rows });
                1
            }
            Op::AddBias { buf, bias } => {
                self.q8_current.remove(&buf);
                let (rows, op) = (self.rows[buf as usize], Elementwise::AddBias { width: width(buf) });
                self.units.push(Unit::Elementwise { a: buf, b: bias, out: buf, op, rows });
                1
            }
            Op::Moe { .. } => self.moe(ops),
            Op::SelectLogitRows { input, out } => {
                let rows = self.facts.shape.logit_rows;
                self.rows[out as usize] = rows;
                self.q8_current.remove(&out);
                self.units.push(Unit::SelectLogitRows { input, out, rows });
                1
            }
            Op::Output { .. } => 1,
        })
    }

    /// A norm unit, and the 8-bit copy of its output it writes where one exists.
    fn norm(&mut self, unit: Unit) {
        let Unit::Norm { out, .. } = unit else { unreachable!("a norm unit") };
        self.q8_current.remove(&out);
        if self.facts.q8.contains(&out) && self.width(out).is_multiple_of(32) {
            self.q8_current.insert(out);
        }
        self.units.push(unit);
    }

    /// Attention writes `out` and, where a product reads one, its 8-bit copy.
    fn attention_writes(&mut self, out: u32) {
        self.q8_current.remove(&out);
        if self.facts.q8.contains(&out) && self.hp().head_dim.is_multiple_of(32) {
            self.q8_current.insert(out);
        }
    }

    /// The input's 8-bit copy is read: whether it must be made first.
    fn quantize(&mut self, input: u32) -> bool {
        self.q8_current.insert(input)
    }

    /// The attention units that span several ops at `ops[0]`: Q/K/V products with the RoPE
    /// epilogue, or the prelude of head norms, RoPE and KV store. Returns the ops spanned.
    fn fused_attention(&mut self, ops: &[Op]) -> Option<usize> {
        let widths = &self.program.activation_widths;
        let width = |a: u32| widths[a as usize];
        match ops[0] {
            Op::MatMul { input, .. } => {
                let unit = QkvRope::find(ops, &self.program.hparams, &width, self.facts, self.rows[input as usize])?;
                let n = self.rows[unit.input as usize];
                let read = match self.folded.take() {
                    Some((_, fold)) => ProductInput::Norm(fold),
                    None => ProductInput::Q8 { quantize: self.quantize(unit.input) },
                };
                for a in unit.acts {
                    self.rows[a as usize] = n;
                    self.q8_current.remove(&a);
                }
                self.rows[unit.out as usize] = n;
                self.attention_writes(unit.out);
                self.units.push(Unit::QkvRope { unit, read, rows: n });
                Some(QkvRope::LEN)
            }
            Op::HeadRmsNorm { .. } | Op::Rope { .. } => {
                let unit = Prelude::find(ops, &self.program.hparams, &width)?;
                let (n, len) = (self.rows[unit.q as usize], unit.len);
                self.rows[unit.out as usize] = n;
                self.attention_writes(unit.out);
                self.q8_current.remove(&unit.q);
                self.q8_current.remove(&unit.k);
                self.units.push(Unit::Prelude { unit, rows: n });
                Some(len)
            }
            _ => None,
        }
    }

    /// The product at `ops[0]` with those beside it and its folded prologue and epilogue.
    fn products(&mut self, ops: &[Op], (input, weight, out): (u32, u32, u32)) -> PluginResult<usize> {
        let facts = self.facts;
        let w = facts.tensor(weight);
        let n = self.rows[input as usize];
        let mut read = match self.folded.take() {
            Some((_, fold)) => ProductInput::Norm(fold),
            None if q8_activations(w.dtype) => ProductInput::Q8 { quantize: self.quantize(input) },
            None => ProductInput::F32,
        };
        // The next products of this input with weights of the same type and row length (a
        // layer's Q, K and V; gate and up) may share this one's dispatch.
        let next = fusion::products_beside(&ops[1..], facts, (input, w));
        let mut beside = 0;
        if let (ProductInput::Q8 { quantize }, true) = (read, facts.half_acts) {
            if fusion::on_matrix_units(w, n, facts.caps) {
                read = ProductInput::Half { quantize, convert: self.half_of != Some(input) };
                self.half_of = Some(input);
                let widths: Vec<u32> = std::iter::once(w)
                    .chain(next.iter().map(|&(t, _)| facts.tensor(t)))
                    .map(|t| t.rows_per_matrix)
                    .collect();
                beside =
                    (2..=widths.len()).rev().find(|&len| fusion::side_by_side(&widths[..len], n)).map_or(0, |l| l - 1);
            }
        }
        // The 8-bit row kernel takes its features one by one: any products fit.
        if read.is_quantized() && n < super::q8_tiled_min_rows(facts.caps) {
            beside = next.len();
        }
        let mut products = vec![(weight, out)];
        products.extend_from_slice(&next[..beside]);
        let mut len = products.len();
        let shared_x = fusion::shared_x(w, n, read, facts.caps);
        if matches!(read, ProductInput::Norm(_)) && !shared_x {
            return Err(PluginError::device(
                "vulkan: internal error: a norm was folded into a product that cannot compute it",
            ));
        }
        let mut epilogue = Epilogue::Store;
        if let Some(glu) = fusion::glu_folds(&ops[len..], &products, (shared_x, facts), &|a| self.width(a)) {
            epilogue = Epilogue::Glu { out: glu };
            len += 1;
        } else {
            // A residual add of this product's output in place (`res += out`, as every
            // attention and FFN block ends) folded into it: the product adds to the residual.
            let norm_source = match read {
                ProductInput::Norm(f) => Some(f.source),
                _ => None,
            };
            if let Some(res) = fusion::residual_folds(&ops[len..], (out, n), &self.rows, norm_source) {
                if products.len() == 1 && shared_x {
                    epilogue = Epilogue::AddTo { residual: res };
                    len += 1;
                }
            }
        }
        let written: Vec<u32> = match epilogue {
            Epilogue::Store => products.iter().map(|&(_, o)| o).collect(),
            Epilogue::Glu { out } => vec![out],
            Epilogue::AddTo { residual } => vec![residual],
        };
        for o in written {
            self.rows[o as usize] = n;
            // The SwiGLU epilogue writes its output's 8-bit copy too.
            if matches!(epilogue, Epilogue::Glu { .. }) {
                self.q8_current.insert(o);
            } else {
                self.q8_current.remove(&o);
            }
        }
        self.units.push(Unit::Products(Products { input, rows: n, products, read, epilogue }));
        Ok(len)
    }

    /// The MoE block at `ops[0]`, with the residual add after it where its down products take
    /// it.
    fn moe(&mut self, ops: &[Op]) -> usize {
        let Op::Moe { input, router, gate_exps, up_exps, down_exps, n_used, out } = ops[0] else {
            unreachable!("an MoE op")
        };
        let n = self.rows[input as usize];
        let norm = self.folded.take().map(|(_, fold)| fold);
        let [r, g, u, d] = [router, gate_exps, up_exps, down_exps].map(|t| self.facts.tensor(t));
        let path = moe_path(n * n_used, [g, u, d], self.facts.caps);
        let reads_q8 = [r, g, u].iter().any(|t| q8_activations(t.dtype));
        let quantize = norm.is_none() && reads_q8 && !self.q8_current.contains(&input);
        if norm.is_some() || reads_q8 {
            self.q8_current.insert(input);
        }
        let add_to = fusion::residual_folds(&ops[1..], (out, n), &self.rows, None).filter(|_| path.down_combined);
        let written = add_to.unwrap_or(out);
        self.rows[written as usize] = n;
        self.q8_current.remove(&written);
        let unit = MoeUnit {
            input,
            router,
            gate_exps,
            up_exps,
            down_exps,
            n_used,
            out,
            rows: n,
            norm,
            quantize,
            add_to,
            path,
        };
        self.units.push(Unit::Moe(unit));
        1 + add_to.is_some() as usize
    }
}

impl fmt::Display for ProductInput {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match *self {
            ProductInput::F32 => write!(f, "f32"),
            ProductInput::Q8 { quantize } => write!(f, "q8{}", if quantize { " (quantized first)" } else { "" }),
            ProductInput::Half { quantize, convert } => write!(
                f,
                "half{}{}",
                if quantize { " (quantized first)" } else { "" },
                if convert { " (converted first)" } else { "" }
            ),
            ProductInput::Norm(n) => write!(f, "norm of a{} by t{} folded in", n.source, n.weight),
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            Unit::Embed { table, out } => write!(f, "embed t{table} -> a{out}"),
            Unit::Norm { input, add: None, weight, out, rows } => {
                write!(f, "rms_norm a{input} * t{weight} -> a{out} [{rows} rows]")
            }
            Unit::Norm { input, add: Some(add), weight, out, rows } => {
                write!(f, "add a{input} += a{add}; rms_norm a{input} * t{weight} -> a{out} [{rows} rows]")
            }
            Unit::HeadNorm { buf, weight, head_dim, rows } => {
                write!(f, "head_rms_norm a{buf} * t{weight} per {head_dim} [{rows} rows]")
            }
            Unit::SwiGluQ8 { gate, up, out, rows } => write!(f, "swiglu a{gate}, a{up} -> a{out} + q8 [{rows} rows]"),
            Unit::Products(p) => {
                let each: Vec<String> = p.products.iter().map(|(w, o)| format!("t{w} -> a{o}")).collect();
                write!(f, "products of a{} ({}): {}", p.input, p.read, each.join(", "))?;
                match p.epilogue {
                    Epilogue::Store => Ok(()),
                    Epilogue::Glu { out } => write!(f, "; swiglu -> a{out} + q8"),
                    Epilogue::AddTo { residual } => write!(f, "; added to a{residual}"),
                }?;
                write!(f, " [{} rows]", p.rows)
            }
            Unit::QkvRope { unit, read, rows } => {
                let [wq, wk, wv] = unit.weights;
                let [q, k, v] = unit.acts;
                write!(
                    f,
                    "qkv of a{} ({read}): t{wq} -> a{q}, t{wk} -> a{k}, t{wv} -> a{v}; rope + kv store; attention layer {} -> a{} [{rows} rows]",
                    unit.input, unit.layer, unit.out
                )
            }
            Unit::Prelude { unit, rows } => write!(
                f,
                "{}rope + kv store of a{}, a{}, a{}; attention layer {} -> a{} [{rows} rows]",
                if unit.norms.is_some() { "head norms + " } else { "" },
                unit.q,
                unit.k,
                unit.v,
                unit.layer,
                unit.out
            ),
            Unit::Rope { buf, head_dim, rows, .. } => write!(f, "rope a{buf} per {head_dim} [{rows} rows]"),
            Unit::Attention { layer, q, k, v, out, rows, .. } => {
                write!(f, "kv store a{k}, a{v}; attention layer {layer} of a{q} -> a{out} [{rows} rows]")
            }
            Unit::Elementwise { a, b, out, op, rows } => write!(f, "{op:?} a{a}, {b} -> a{out} [{rows} rows]"),
            Unit::Moe(m) => {
                write!(f, "moe of a{}", m.input)?;
                if let Some(n) = m.norm {
                    write!(f, " (norm of a{} by t{} folded into the router)", n.source, n.weight)?;
                } else if m.quantize {
                    write!(f, " (quantized first)")?;
                }
                write!(
                    f,
                    ": router t{}, experts t{}, t{}, t{} top {}",
                    m.router, m.gate_exps, m.up_exps, m.down_exps, m.n_used
                )?;
                match m.add_to {
                    Some(r) => write!(f, "; added to a{r}"),
                    None => write!(f, " -> a{}", m.out),
                }?;
                write!(f, " [{} rows]", m.rows)
            }
            Unit::SelectLogitRows { input, out, rows } => write!(f, "logit rows of a{input} -> a{out} [{rows} rows]"),
        }
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        for (i, unit) in self.units.iter().enumerate() {
            writeln!(f, "{i:4}  {unit}")?;
        }
        Ok(())
    }
}
