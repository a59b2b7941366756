//! Facts about the committed SPIR-V that no lavapipe run would reveal, checked without a GPU.
//!
//! Matrix-unit accumulators must stay in registers: a kernel that indexes its array of
//! cooperative matrices with a loop the compiler left rolled keeps the whole array in local
//! (Function-storage) memory; on an H100 a build of `matmul_coopmat.comp` with such a loop ran
//! every product four to five times slower while computing the same values
//! (docs/measurements/coopmat-ksplit-2026-12-08/). lavapipe has no matrix units, so CI would
//! never run that kernel; the SPIR-V says it all the same.

use std::collections::HashSet;

// SPIR-V opcodes and the storage class read here (SPIR-V specification, section 3, and
// SPV_KHR_cooperative_matrix).
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_POINTER: u32 = 32;
const OP_VARIABLE: u32 = 59;
const OP_TYPE_COOPERATIVE_MATRIX: u32 = 4456;
const STORAGE_FUNCTION: u32 = 7;

/// Whether the module declares a cooperative matrix type, and the result ids of its
/// Function-storage variables whose type is an array (of arrays) of cooperative matrices.
fn local_matrix_arrays(code: &[u32]) -> (bool, Vec<u32>) {
    let (mut matrices, mut arrays, mut pointers) = (HashSet::new(), HashSet::new(), HashSet::new());
    let mut found = Vec::new();
    let mut at = 5;
    while at < code.len() {
        let (len, op) = ((code[at] >> 16) as usize, code[at] & 0xffff);
        let ins = code.get(at..at + len.max(1)).expect("a truncated instruction");
        let arg = |i: usize| ins.get(i).copied().unwrap_or(0);
        match op {
            OP_TYPE_COOPERATIVE_MATRIX => {
                matrices.insert(arg(1));
            }
            OP_TYPE_ARRAY if matrices.contains(&arg(2)) || arrays.contains(&arg(2)) => {
                arrays.insert(arg(1));
            }
            OP_TYPE_POINTER if arg(2) == STORAGE_FUNCTION && arrays.contains(&arg(3)) => {
                pointers.insert(arg(1));
            }
            OP_VARIABLE if pointers.contains(&arg(1)) => found.push(arg(2)),
            _ => {}
        }
        at += len.max(1);
    }
    (!matrices.is_empty(), found)
}

/// Modules known to keep their accumulators in local memory: the test demands that each
/// still does, so the list is emptied as they are fixed.
const KNOWN: [&str; 1] = [
    // The rescale and output loops over groups of four output fragments index the array
    // by the group; docs/measurements/coopmat-ksplit-2026-12-08/ says where the fix waits
    // for a GPU to measure it.
    "attention_tiled.cm",
];

#[test]
fn matrix_unit_accumulators_stay_out_of_local_memory() {
    let mut checked = 0;
    for (name, words) in crate::kernels::all_modules() {
        let (declares, arrays) = local_matrix_arrays(&words);
        checked += usize::from(declares);
        if KNOWN.contains(&name) {
            assert!(!arrays.is_empty(), "{name} no longer keeps accumulators in local memory: take it off KNOWN");
            continue;
        }
        assert!(
            arrays.is_empty(),
            "{name}: {} array(s) of cooperative matrices in Function storage (ids {arrays:?}): a loop \
             over the accumulators was left rolled; keep its bounds compile-time constants chosen \
             by the preprocessor, then `bash scripts/shaders.sh`",
            arrays.len()
        );
    }
    // The check saw the matrix-unit kernels (products, grouped experts, prompt attention).
    assert!(checked >= 40, "only {checked} modules declare cooperative matrices");
}

#[test]
fn a_rolled_accumulator_loop_is_found() {
    // A minimal module: an array of two cooperative matrices in Function storage.
    let ins = |op: u32, args: &[u32]| {
        let mut v = vec![((args.len() as u32 + 1) << 16) | op];
        v.extend_from_slice(args);
        v
    };
    let mut code = vec![0x0723_0203, 0x0001_0600, 0, 100, 0];
    code.extend(ins(OP_TYPE_COOPERATIVE_MATRIX, &[10, 1, 2, 3, 4, 5]));
    code.extend(ins(OP_TYPE_ARRAY, &[11, 10, 12]));
    code.extend(ins(OP_TYPE_POINTER, &[13, STORAGE_FUNCTION, 11]));
    code.extend(ins(OP_VARIABLE, &[13, 14, STORAGE_FUNCTION]));
    assert_eq!(local_matrix_arrays(&code), (true, vec![14]));
    // The same array in Workgroup storage (4) is shared memory, not a spill.
    let n = code.len();
    code[n - 6] = 4;
    assert_eq!(local_matrix_arrays(&code), (true, vec![]));
}
