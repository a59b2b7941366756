//! The plan of small programs in the shapes the host builds (a llama layer, an MoE block) on
//! a device with every decode fusion (an H100's facts) and on one with none (lavapipe's), with
//! the fusion rules one by one.

use super::fusion::{glu_pattern, moe_path, qkv_dispatches, residual_folds};
use super::{plan_step, Elementwise, Epilogue, NormFold, Plan, PlanFacts, ProductInput, Products, TensorFacts, Unit};
use crate::context::{Capabilities, DeviceFacts};
use crate::record::StepShape;
use std::collections::HashSet;
use zinc_formats::GgmlType;
use zinc_plugin_api::{AttentionSpan, Hparams, ModelProgram, Op, RopeFreqs, RopeStyle};

/// An H100's facts: integer dot products, 32-wide subgroups with clustered operations,
/// cooperative matrices.
fn h100() -> Capabilities {
    Capabilities::from_facts(DeviceFacts {
        int_dot: true,
        subgroup_arithmetic: true,
        subgroup_size: 32,
        clustered: true,
        coopmat: true,
        shared_memory: 48 << 10,
        timestamps: true,
        timestamp_period: 1.0,
    })
}

/// Lavapipe's: integer dot products, 8-wide subgroups, no cooperative matrices.
fn lavapipe() -> Capabilities {
    Capabilities::from_facts(DeviceFacts {
        int_dot: true,
        subgroup_arithmetic: true,
        subgroup_size: 8,
        clustered: false,
        coopmat: false,
        shared_memory: 32 << 10,
        timestamps: true,
        timestamp_period: 1.0,
    })
}

/// Activations of [`llama`].
const X: u32 = 0;
const XN: u32 = 1;
const Q: u32 = 2;
const K: u32 = 3;
const V: u32 = 4;
const ATTN: u32 = 5;
const O: u32 = 6;
const FF: u32 = 7;
const FF2: u32 = 8;
const SEL: u32 = 9;
const SELN: u32 = 10;
const LOGITS: u32 = 11;

fn hparams() -> Hparams {
    Hparams {
        n_layer: 1,
        n_embd: 256,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        n_vocab: 1000,
        n_ctx_train: 4096,
        rms_eps: 1e-5,
        rope_base: 10000.0,
        rope_base_local: 10000.0,
        rope_dim: 64,
        rope_style: RopeStyle::Adjacent,
        rope_freq_scale: 1.0,
        rope_freq_factors: Default::default(),
        attn_logit_softcap: 0.0,
    }
}

/// One llama layer and the output head, as the host's dense transformer writes them.
/// Tensors: 0 embedding, 1 attention norm, 2–4 Q/K/V, 5 output projection, 6 FFN norm,
/// 7–9 gate/up/down, 10 output norm, 11 output.
fn llama() -> ModelProgram {
    let ops = vec![
        Op::Embed { table: 0, out: X },
        Op::RmsNorm { input: X, weight: 1, out: XN },
        Op::MatMul { input: XN, weight: 2, out: Q },
        Op::MatMul { input: XN, weight: 3, out: K },
        Op::MatMul { input: XN, weight: 4, out: V },
        Op::Rope { buf: Q, head_dim: 64, freqs: RopeFreqs::Global },
        Op::Rope { buf: K, head_dim: 64, freqs: RopeFreqs::Global },
        Op::Attention { layer: 0, q: Q, k: K, v: V, out: ATTN, span: AttentionSpan::Full },
        Op::MatMul { input: ATTN, weight: 5, out: O },
        Op::Add { a: X, b: O, out: X },
        Op::RmsNorm { input: X, weight: 6, out: XN },
        Op::MatMul { input: XN, weight: 7, out: FF },
        Op::MatMul { input: XN, weight: 8, out: FF2 },
        Op::SwiGlu { gate: FF, up: FF2, out: FF },
        Op::MatMul { input: FF, weight: 9, out: O },
        Op::Add { a: X, b: O, out: X },
        Op::SelectLogitRows { input: X, out: SEL },
        Op::RmsNorm { input: SEL, weight: 10, out: SELN },
        Op::MatMul { input: SELN, weight: 11, out: LOGITS },
        Op::Output { input: LOGITS },
    ];
    ModelProgram {
        arch: "llama".into(),
        hparams: hparams(),
        tensors: Default::default(),
        activation_widths: vec![256, 256, 256, 128, 128, 256, 256, 512, 512, 256, 256, 1000].into(),
        ops: ops.into(),
    }
}

/// Facts of [`llama`] with its matrices in `ty` (the embedding and norms in f32), the step
/// buffers' 8-bit copies of every product input and the half copy on devices with matrix
/// units.
fn llama_facts(ty: GgmlType, caps: Capabilities, rows: u32) -> PlanFacts {
    let m = |row_len, rows_per_matrix| Some(TensorFacts { dtype: ty, row_len, rows_per_matrix });
    let v = |n| Some(TensorFacts { dtype: GgmlType::F32, row_len: n, rows_per_matrix: 1 });
    let tensors =
        vec![v(256), v(256), m(256, 256), m(256, 128), m(256, 128), m(256, 256), v(256), m(256, 512), m(256, 512)];
    let mut tensors = tensors;
    tensors.extend([m(512, 256), v(256), m(256, 1000)]);
    let shape = StepShape {
        rows,
        logit_rows: 1,
        top_rows: 0,
        split_keys: false,
        one_sequence: true,
        one_row_per_sequence: rows == 1,
    };
    PlanFacts { tensors, q8: HashSet::from([XN, ATTN, FF, SELN]), half_acts: caps.coopmat, caps, shape }
}

fn products(p: &Plan) -> Vec<&Products> {
    p.units.iter().filter_map(|u| if let Unit::Products(p) = u { Some(p) } else { None }).collect()
}

#[test]
fn decode_on_a_device_with_the_shared_activation_kernels_folds_norms_the_swiglu_and_residual_adds() {
    let plan = plan_step(&llama(), &llama_facts(GgmlType::Q4_0, h100(), 1)).unwrap();
    let u = &plan.units;
    assert_eq!(u.len(), 7, "{plan}");
    assert_eq!(u[0], Unit::Embed { table: 0, out: X });
    // The attention norm folds into Q, K and V with RoPE and the KV store as their epilogue.
    let Unit::QkvRope { unit, read, rows: 1 } = &u[1] else { panic!("{plan}") };
    assert_eq!((unit.input, unit.weights, unit.out), (XN, [2, 3, 4], ATTN));
    assert_eq!(*read, ProductInput::Norm(NormFold { source: X, weight: 1 }));
    let p = products(&plan);
    // Attention wrote its output's 8-bit copy: the output projection quantizes nothing, and
    // adds to the residual itself.
    assert_eq!(p[0].read, ProductInput::Q8 { quantize: false });
    assert_eq!(p[0].epilogue, Epilogue::AddTo { residual: X });
    // Gate and up side by side, the FFN norm folded in, the SwiGLU their epilogue.
    assert_eq!(p[1].products, vec![(7, FF), (8, FF2)]);
    assert_eq!(p[1].read, ProductInput::Norm(NormFold { source: X, weight: 6 }));
    assert_eq!(p[1].epilogue, Epilogue::Glu { out: FF });
    // Down reads the SwiGLU's 8-bit copy the epilogue wrote and adds to the residual.
    assert_eq!((p[2].read, p[2].epilogue), (ProductInput::Q8 { quantize: false }, Epilogue::AddTo { residual: X }));
    assert_eq!(u[5], Unit::SelectLogitRows { input: X, out: SEL, rows: 1 });
    assert_eq!(p[3].read, ProductInput::Norm(NormFold { source: SEL, weight: 10 }));
}

#[test]
fn decode_without_the_shared_activation_kernels_keeps_norms_and_adds_as_dispatches() {
    let plan = plan_step(&llama(), &llama_facts(GgmlType::Q4_0, lavapipe(), 1)).unwrap();
    let u = &plan.units;
    assert_eq!(u[1], Unit::Norm { input: X, add: None, weight: 1, out: XN, rows: 1 }, "{plan}");
    // The norm wrote the 8-bit copy Q, K and V read.
    let Unit::QkvRope { read, .. } = &u[2] else { panic!("{plan}") };
    assert_eq!(*read, ProductInput::Q8 { quantize: false });
    assert_eq!(products(&plan)[0].epilogue, Epilogue::Store);
    // The residual add and the next norm in one dispatch.
    assert_eq!(u[4], Unit::Norm { input: X, add: Some(O), weight: 6, out: XN, rows: 1 });
    assert_eq!(products(&plan)[1].products, vec![(7, FF), (8, FF2)]);
    assert_eq!(u[6], Unit::SwiGluQ8 { gate: FF, up: FF2, out: FF, rows: 1 });
    // The last add is followed by the logit rows, not a norm.
    assert_eq!(u[8], Unit::Elementwise { a: X, b: O, out: X, op: Elementwise::Add, rows: 1 });
}

#[test]
fn a_prompt_chunk_on_matrix_units_converts_each_input_once_and_sets_products_side_by_side() {
    let plan = plan_step(&llama(), &llama_facts(GgmlType::Q8_0, h100(), 128)).unwrap();
    let p = products(&plan);
    // Q, K and V: one dispatch on the half copy of the norm's 8-bit output.
    assert_eq!(p[0].products, vec![(2, Q), (3, K), (4, V)], "{plan}");
    assert_eq!(p[0].read, ProductInput::Half { quantize: false, convert: true });
    // RoPE, the KV store and attention as one unit.
    assert!(matches!(plan.units[3], Unit::Prelude { rows: 128, .. }), "{plan}");
    assert_eq!(p[1].read, ProductInput::Half { quantize: false, convert: true });
    assert_eq!(p[2].products, vec![(7, FF), (8, FF2)]);
    // No epilogue folds beyond one row.
    assert!(p.iter().all(|p| p.epilogue == Epilogue::Store), "{plan}");
}

#[test]
fn an_input_is_quantized_once_by_the_first_product_that_reads_it() {
    // A GELU gate (Gemma's) writes no 8-bit copy: the first product of its output quantizes
    // it, a second product over weights of another type reads that copy.
    let mut program = llama();
    let mut ops: Vec<Op> = program.ops.to_vec();
    ops[13] = Op::GeluGlu { gate: FF, up: FF2, out: FF };
    ops.insert(15, Op::MatMul { input: FF, weight: 12, out: FF2 });
    program.ops = ops.into();
    let mut facts = llama_facts(GgmlType::Q4_0, lavapipe(), 64);
    facts.tensors.push(Some(TensorFacts { dtype: GgmlType::Q8_0, row_len: 512, rows_per_matrix: 512 }));
    let plan = plan_step(&program, &facts).unwrap();
    assert!(plan.units.contains(&Unit::Elementwise { a: FF, b: FF2, out: FF, op: Elementwise::GeluGlu, rows: 64 }));
    let of_ff: Vec<&Products> = products(&plan).into_iter().filter(|p| p.input == FF).collect();
    assert_eq!(of_ff.len(), 2, "{plan}");
    assert_eq!(of_ff[0].read, ProductInput::Q8 { quantize: true }, "{plan}");
    assert_eq!(of_ff[1].read, ProductInput::Q8 { quantize: false }, "{plan}");
    // The norm before Q, K and V wrote their input's copy; 64 rows take the tiled kernel, so
    // the three are three dispatches.
    let of_xn: Vec<&Products> = products(&plan).into_iter().filter(|p| p.input == XN).collect();
    assert_eq!(of_xn.len(), 5, "{plan}");
    assert!(of_xn.iter().all(|p| p.read == ProductInput::Q8 { quantize: false } && p.products.len() == 1));
}

#[test]
fn q_k_and_v_of_two_types_take_a_dispatch_per_type_with_the_norm_folded_into_each() {
    use GgmlType::{Q4_K, Q6_K, Q8_0};
    assert_eq!(qkv_dispatches([Q4_K, Q4_K, Q4_K]), vec![0..3]);
    assert_eq!(qkv_dispatches([Q4_K, Q4_K, Q6_K]), vec![0..2, 2..3]);
    assert_eq!(qkv_dispatches([Q4_K, Q6_K, Q6_K]), vec![0..1, 1..3]);
    assert_eq!(qkv_dispatches([Q4_K, Q6_K, Q8_0]), vec![0..1, 1..2, 2..3]);
    // A Q4_K_M layer whose V is Q6_K: the attention norm still folds into Q, K and V.
    let mut facts = llama_facts(Q4_K, h100(), 1);
    facts.tensors[4] = Some(TensorFacts { dtype: Q6_K, row_len: 256, rows_per_matrix: 128 });
    let plan = plan_step(&llama(), &facts).unwrap();
    assert_eq!(plan.units.len(), 7, "{plan}");
    assert!(matches!(plan.units[1], Unit::QkvRope { read: ProductInput::Norm(_), .. }), "{plan}");
}

#[test]
fn k_quant_decode_products_read_8_bit_activations_and_float_weights_read_f32() {
    let plan = plan_step(&llama(), &llama_facts(GgmlType::Q4_K, h100(), 1)).unwrap();
    assert!(matches!(plan.units[1], Unit::QkvRope { read: ProductInput::Norm(_), .. }), "{plan}");
    let plan = plan_step(&llama(), &llama_facts(GgmlType::F16, h100(), 1)).unwrap();
    // No 8-bit kernels: nothing folds or goes side by side; RoPE and attention take the
    // prelude unit.
    assert_eq!(plan.units[1], Unit::Norm { input: X, add: None, weight: 1, out: XN, rows: 1 }, "{plan}");
    let p = products(&plan);
    assert!(p.iter().all(|p| p.read == ProductInput::F32 && p.epilogue == Epilogue::Store && p.products.len() == 1));
    assert!(matches!(plan.units[5], Unit::Prelude { .. }), "{plan}");
}

/// An MoE block between a norm and the residual add. Tensors: 0 embedding, 1 norm, 2 router,
/// 3–5 experts' gate, up, down, 6 output norm.
fn moe_program() -> ModelProgram {
    let ops = vec![
        Op::Embed { table: 0, out: X },
        Op::RmsNorm { input: X, weight: 1, out: XN },
        Op::Moe { input: XN, router: 2, gate_exps: 3, up_exps: 4, down_exps: 5, n_used: 2, out: O },
        Op::Add { a: X, b: O, out: X },
        Op::RmsNorm { input: X, weight: 6, out: XN },
        Op::Output { input: XN },
    ];
    ModelProgram {
        arch: "qwen3moe".into(),
        hparams: hparams(),
        tensors: Default::default(),
        activation_widths: vec![256, 256, 256, 128, 128, 256, 256].into(),
        ops: ops.into(),
    }
}

fn moe_facts(router: GgmlType, caps: Capabilities, rows: u32) -> PlanFacts {
    let e = |row_len, rows_per_matrix| Some(TensorFacts { dtype: GgmlType::Q4_0, row_len, rows_per_matrix });
    let v = Some(TensorFacts { dtype: GgmlType::F32, row_len: 256, rows_per_matrix: 1 });
    let r = Some(TensorFacts { dtype: router, row_len: 256, rows_per_matrix: 8 });
    let shape = StepShape {
        rows,
        logit_rows: rows,
        top_rows: 0,
        split_keys: false,
        one_sequence: true,
        one_row_per_sequence: true,
    };
    PlanFacts {
        tensors: vec![v, v, r, e(256, 128), e(256, 128), e(128, 256), v],
        q8: HashSet::from([XN]),
        half_acts: caps.coopmat,
        caps,
        shape,
    }
}

#[test]
fn an_moe_block_takes_the_residual_add_only_where_its_down_products_are_one_dispatch() {
    let plan = plan_step(&moe_program(), &moe_facts(GgmlType::F32, h100(), 1)).unwrap();
    // One row, f32 router: the norm folds into the router; the combined down products add to
    // the residual, and the next norm stands alone.
    let Unit::Moe(m) = &plan.units[1] else { panic!("{plan}") };
    assert_eq!((m.norm, m.quantize, m.add_to), (Some(NormFold { source: X, weight: 1 }), false, Some(X)));
    assert_eq!(plan.units[2], Unit::Norm { input: X, add: None, weight: 6, out: XN, rows: 1 });
    // 8-wide subgroups still have subgroup arithmetic: the same path without the norm fold.
    let plan = plan_step(&moe_program(), &moe_facts(GgmlType::Q8_0, lavapipe(), 1)).unwrap();
    let Unit::Moe(m) = &plan.units[2] else { panic!("{plan}") };
    assert_eq!((m.norm, m.quantize, m.add_to), (None, false, Some(X)));
    // Many slots group by expert: the down products are per expert, the add its own dispatch.
    let plan = plan_step(&moe_program(), &moe_facts(GgmlType::Q8_0, h100(), 64)).unwrap();
    let Unit::Moe(m) = &plan.units[2] else { panic!("{plan}") };
    assert_eq!(m.add_to, None, "{plan}");
    assert_eq!(plan.units[3], Unit::Norm { input: X, add: Some(O), weight: 6, out: XN, rows: 64 });
}

#[test]
fn the_moe_path_follows_slots_weights_and_subgroups() {
    let q = |dtype| TensorFacts { dtype, row_len: 256, rows_per_matrix: 128 };
    let experts = [q(GgmlType::Q4_0); 3];
    let path = moe_path(8, experts, h100());
    assert!(!path.grouped && path.swiglu_epilogue && path.route_in_experts && path.down_combined);
    assert!(moe_path(16, experts, h100()).grouped);
    // Float experts never group and have no 8-bit expert kernels.
    let path = moe_path(64, [q(GgmlType::F16); 3], h100());
    assert!(!path.grouped && !path.swiglu_epilogue && !path.down_combined);
    // Without subgroup arithmetic: the SwiGLU epilogue on the row kernel, top-k and sums apart.
    let mut caps = lavapipe();
    caps.subgroup_width = None;
    let path = moe_path(8, experts, caps);
    assert!(path.swiglu_epilogue && !path.route_in_experts && !path.down_combined);
}

#[test]
fn the_printed_plan_names_every_unit_with_its_prologue_and_epilogue() {
    let text = plan_step(&llama(), &llama_facts(GgmlType::Q4_0, h100(), 1)).unwrap().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "{text}");
    assert!(lines[1].contains("qkv of a1 (norm of a0 by t1 folded in)"), "{text}");
    assert!(lines[2].contains("products of a5 (q8): t5 -> a6; added to a0 [1 rows]"), "{text}");
    assert!(lines[3].contains("t7 -> a7, t8 -> a8; swiglu -> a7 + q8"), "{text}");
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
