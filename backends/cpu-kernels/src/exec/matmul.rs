//! Matrix × activation rows, split across threads by output feature.

use super::weights::Weight;
use crate::{
    pool::ThreadPool,
    quant::{
        dot,
        packed::{Packed, GROUP},
        q8::Q8Row,
        uses_q8_activations,
    },
};

/// Activation rows, quantized or not.
pub enum Rows<'a> {
    /// 8-bit rows (for 32-element weight formats).
    Q8(Vec<&'a Q8Row>),
    /// Float rows.
    F32(Vec<&'a [f32]>),
}

/// A raw output pointer shared by threads that write disjoint elements.
#[derive(Clone, Copy)]
pub struct SharedOut(pub *mut f32);
// SAFETY: every user writes a disjoint set of indices, and the pool joins before return.
unsafe impl Send for SharedOut {}
unsafe impl Sync for SharedOut {}

/// `out[r * n_out + o] = w.row(first_row + o) · rows[r]` for `o < n_out`.
pub fn matmul(pool: &ThreadPool, w: &Weight, first_row: usize, n_out: usize, rows: &Rows, out: &mut [f32]) {
    let n_rows = match rows {
        Rows::Q8(r) => r.len(),
        Rows::F32(r) => r.len(),
    };
    assert!(out.len() >= n_rows * n_out, "matmul output too small");
    assert!(first_row + n_out <= w.rows(), "matmul reads past {}", w.name);
    if let (Rows::Q8(q), Some(p)) = (rows, &w.packed) {
        // Whole groups, or a range that ends at the tensor's last (padded) group.
        if first_row.is_multiple_of(GROUP) && (n_out.is_multiple_of(GROUP) || first_row + n_out == w.rows()) {
            return matmul_packed(pool, p, first_row / GROUP, n_out, q, out);
        }
    }
    let dst = SharedOut(out.as_mut_ptr());
    let ty = w.dtype;
    pool.for_ranges(n_out, &|range| {
        let dst = dst;
        let mut scratch = vec![0f32; 2048];
        // SAFETY: (r, o) pairs are disjoint across threads; bounds asserted above.
        let put = |r: usize, o: usize, v: f32| unsafe { *dst.0.add(r * n_out + o) = v };
        for o in range {
            let wrow = w.row(first_row + o);
            match rows {
                Rows::Q8(q) => {
                    let mut r = 0;
                    // Four activation rows per pass over the weight row where a kernel exists
                    // (the weight block is loaded and unpacked once per pass). Small batches
                    // (batched decode, 8 to 15 rows) take eight per pass: they are bound by
                    // reading weights, and one pass fewer pays. Large prefill chunks are
                    // compute-bound and measured faster with four (register pressure).
                    while r + 8 <= n_rows && n_rows < 16 {
                        let mut out = [0f32; 8];
                        let a = [q[r], q[r + 1], q[r + 2], q[r + 3], q[r + 4], q[r + 5], q[r + 6], q[r + 7]];
                        if !dot::dot_q8_rows(ty, wrow, &a, &mut out) {
                            break;
                        }
                        for (i, v) in out.iter().enumerate() {
                            put(r + i, o, *v);
                        }
                        r += 8;
                    }
                    while r + 4 <= n_rows {
                        let mut out = [0f32; 4];
                        if !dot::dot_q8_rows(ty, wrow, &[q[r], q[r + 1], q[r + 2], q[r + 3]], &mut out) {
                            break;
                        }
                        for (i, v) in out.iter().enumerate() {
                            put(r + i, o, *v);
                        }
                        r += 4;
                    }
                    for r in r..n_rows {
                        put(r, o, dot::dot_q8(ty, wrow, q[r]));
                    }
                }
                Rows::F32(x) => {
                    for r in 0..n_rows {
                        put(r, o, dot::dot_f32(ty, wrow, x[r], &mut scratch));
                    }
                }
            }
        }
    });
}

/// [`matmul`] over repacked rows: groups of four outputs split across threads; each group's
/// blocks (a few KiB, in L1) are read once per eight, four or one activation rows.
fn matmul_packed(pool: &ThreadPool, p: &Packed, first_group: usize, n_out: usize, q: &[&Q8Row], out: &mut [f32]) {
    let n_rows = q.len();
    let dst = SharedOut(out.as_mut_ptr());
    pool.for_ranges(n_out.div_ceil(GROUP), &|range| {
        let dst = dst;
        // SAFETY: (r, o) pairs are disjoint across threads (each owns its groups' outputs);
        // `o < n_out` and `r < n_rows` keep writes inside `out`, asserted by the caller.
        let put = |r: usize, g: usize, v: &[f32; GROUP]| {
            for (j, &x) in v.iter().enumerate() {
                let o = g * GROUP + j;
                if o < n_out {
                    unsafe { *dst.0.add(r * n_out + o) = x };
                }
            }
        };
        for g in range {
            let mut r = 0;
            while r + 8 <= n_rows {
                let mut o = [[0f32; GROUP]; 8];
                p.dot_group(first_group + g, &std::array::from_fn(|i| q[r + i]), &mut o);
                o.iter().enumerate().for_each(|(i, v)| put(r + i, g, v));
                r += 8;
            }
            while r + 4 <= n_rows {
                let mut o = [[0f32; GROUP]; 4];
                p.dot_group(first_group + g, &std::array::from_fn(|i| q[r + i]), &mut o);
                o.iter().enumerate().for_each(|(i, v)| put(r + i, g, v));
                r += 4;
            }
            for r in r..n_rows {
                let mut o = [[0f32; GROUP]; 1];
                p.dot_group(first_group + g, &[q[r]], &mut o);
                put(r, g, &o[0]);
            }
        }
    });
}

/// Whether `w` wants 8-bit activations.
pub fn wants_q8(w: &Weight) -> bool {
    uses_q8_activations(w.dtype)
}

/// Quantizes `n` rows of width `width` from `x`, in parallel.
pub fn quantize_rows(pool: &ThreadPool, x: &[f32], width: usize, n: usize) -> Vec<Q8Row> {
    let mut rows: Vec<Q8Row> = (0..n).map(|_| Q8Row::default()).collect();
    let ptr = SharedRows(rows.as_mut_ptr());
    pool.for_ranges(n, &|range| {
        let ptr = ptr;
        for r in range {
            // SAFETY: each row index is handled by exactly one thread.
            unsafe { (*ptr.0.add(r)).quantize_from(&x[r * width..(r + 1) * width]) };
        }
    });
    rows
}

#[derive(Clone, Copy)]
struct SharedRows(*mut Q8Row);
// SAFETY: disjoint rows per thread; joined before return.
unsafe impl Send for SharedRows {}
unsafe impl Sync for SharedRows {}
