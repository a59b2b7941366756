//! Every kernel the recorder can ask for exists in the catalogue (and so as SPIR-V), on every
//! combination of capabilities a device can report: a missing variant fails here, not in a
//! user's run.

use super::ops::{norm_kernel, q8_row_kernel};
use crate::{
    catalogue::{q8_activations, CoopmatTile, Dot, ExpertEpilogue, KernelId, RowEpilogue},
    context::{Capabilities, DeviceFacts},
    kernels::Kernels,
};
use std::collections::HashSet;
use zinc_formats::GgmlType;

/// Capabilities for every combination of the facts that decide them.
fn every_device() -> Vec<Capabilities> {
    let mut out = Vec::new();
    for bits in 0..64u32 {
        let on = |i: u32| bits & (1 << i) != 0;
        for subgroup_size in [16, 32, 64] {
            for shared_memory in [16 << 10, 32 << 10, 48 << 10] {
                out.push(Capabilities::from_facts(DeviceFacts {
                    int_dot: on(0),
                    subgroup_arithmetic: on(1),
                    subgroup_size,
                    clustered: on(2),
                    coopmat: on(3),
                    shared_memory,
                    timestamps: on(4),
                    timestamp_period: 1.0,
                }));
            }
        }
    }
    out
}

/// What the recorder asks for on a device with `caps` for weights of `ty`.
fn asked_for(caps: Capabilities, ty: GgmlType) -> Vec<KernelId> {
    let mut ids = vec![KernelId::Embed(ty)];
    if q8_activations(ty) {
        ids.push(q8_row_kernel(ty, caps, false, RowEpilogue::Plain));
        ids.push(q8_row_kernel(ty, caps, false, RowEpilogue::RopeKv));
        if caps.shared_x {
            for e in [RowEpilogue::Plain, RowEpilogue::RopeKv, RowEpilogue::Glu] {
                ids.push(q8_row_kernel(ty, caps, true, e));
            }
        }
        ids.push(KernelId::MatmulQ8Tiled { ty, dot: Dot::of(caps.int_dot) });
        if caps.subgroup_width.is_some() {
            for epilogue in [ExpertEpilogue::Plain, ExpertEpilogue::Swiglu, ExpertEpilogue::Combine] {
                ids.push(KernelId::MatvecQ8 { ty, dot: Dot::of(caps.int_dot), epilogue });
            }
        }
        if caps.coopmat {
            for tile in CoopmatTile::ALL {
                ids.push(KernelId::MatmulCoopmat { ty, tile });
            }
            ids.push(KernelId::SplitSum);
        }
    } else {
        ids.push(KernelId::Matmul { ty, subgroup: false });
        ids.push(KernelId::MatmulFloatTiled { ty, low_mem: caps.float_tiles_unpadded });
    }
    let subgroups = caps.subgroup_width.is_some();
    ids.push(norm_kernel(caps));
    ids.push(KernelId::Matmul { ty: GgmlType::F32, subgroup: subgroups });
    ids.push(KernelId::Attention { subgroup: subgroups, prelude: false });
    ids.push(KernelId::Attention { subgroup: subgroups, prelude: true });
    ids.push(KernelId::AttentionTiled { matrix_units: caps.coopmat });
    ids
}

#[test]
fn every_kernel_the_recorder_asks_for_exists_on_every_device() {
    let built: HashSet<KernelId> = KernelId::all().into_iter().collect();
    let devices = every_device();
    assert!(devices.iter().any(|c| c.shared_x) && devices.iter().any(|c| !c.int_dot && c.coopmat));
    for caps in devices {
        for ty in GgmlType::ALL {
            for id in asked_for(caps, ty) {
                assert!(built.contains(&id), "{} ({id:?}) is not built; asked for on {caps:?}", id.name());
            }
        }
    }
}

#[test]
fn the_catalogue_is_exactly_the_embedded_spirv() {
    let ids = KernelId::all();
    let names: HashSet<String> = ids.iter().map(|k| k.name()).collect();
    assert_eq!(names.len(), ids.len(), "two kernels share a name");
    let embedded: HashSet<String> = Kernels::module_names().map(String::from).collect();
    assert_eq!(names, embedded);
}

#[test]
fn names_follow_one_grammar() {
    use KernelId::*;
    let q6 = GgmlType::Q6_K;
    let row = |reduce, epilogue| MatmulQ8 { ty: q6, dot: Dot::Integer, reduce, epilogue };
    use crate::catalogue::RowReduce;
    assert_eq!(row(RowReduce::SharedX, RowEpilogue::RopeKv).name(), "matmul_q8.q6_k.idot.sgx.rope");
    assert_eq!(row(RowReduce::Workgroup, RowEpilogue::Plain).name(), "matmul_q8.q6_k.idot");
    assert_eq!(RmsNorm { low_mem: true }.name(), "rms_norm.lowmem");
    assert_eq!(Attention { subgroup: true, prelude: true }.name(), "attention.sg.prelude");
    assert_eq!(
        MatvecQ8 { ty: q6, dot: Dot::Widened, epilogue: ExpertEpilogue::Combine }.name(),
        "matvec_q8.q6_k.combine"
    );
    // Every name: a family of lower-case words, then the type and options, each a `.` part.
    for id in KernelId::all() {
        let name = id.name();
        let parts: Vec<&str> = name.split('.').collect();
        assert!(
            parts
                .iter()
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')),
            "{name}"
        );
        if let Some(ty) = id.ty() {
            assert_eq!(parts[1], ty.name(), "{name}: the type follows the family");
        }
    }
}

/// The rules hold: a combination no device takes is not built, so the test above can fail.
#[test]
fn kernels_outside_the_rules_are_not_built() {
    use crate::catalogue::RowReduce;
    let glu_without_staging = KernelId::MatmulQ8 {
        ty: GgmlType::Q4_0,
        dot: Dot::Integer,
        reduce: RowReduce::Subgroup,
        epilogue: RowEpilogue::Glu,
    };
    assert!(!glu_without_staging.is_built());
    let subgroup_sums_without_int_dot = KernelId::MatmulQ8 {
        ty: GgmlType::Q4_0,
        dot: Dot::Widened,
        reduce: RowReduce::Subgroup,
        epilogue: RowEpilogue::Plain,
    };
    assert!(!subgroup_sums_without_int_dot.is_built());
    assert!(!KernelId::MatmulQ8Tiled { ty: GgmlType::Q8_K, dot: Dot::Integer }.is_built());
    assert!(!KernelId::Matmul { ty: GgmlType::Q4_0, subgroup: false }.is_built());
}
