//! Paged causal attention with grouped-query heads, reading K and V through page tables.

use super::{kv::KvPool, matmul::SharedOut, ops::softmax};
use crate::{pool::ThreadPool, quant::dot};
use zinc_plugin_api::Step;

/// Shapes of one attention op.
pub struct AttnShape {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head width.
    pub head_dim: usize,
}

/// Writes this step's K and V rows into `layer`'s pages.
pub fn store_kv(kv: &mut KvPool, step: &Step, layer: usize, k: &[f32], v: &[f32], kv_dim: usize) {
    for s in step.seqs.iter() {
        for i in 0..s.n_rows as usize {
            let row = s.first_row as usize + i;
            let pos = s.n_past as usize + i;
            kv.row_mut(&s.page_table, layer, 0, pos).copy_from_slice(&k[row * kv_dim..(row + 1) * kv_dim]);
            kv.row_mut(&s.page_table, layer, 1, pos).copy_from_slice(&v[row * kv_dim..(row + 1) * kv_dim]);
        }
    }
}

/// `out[row, head] = softmax(q·Kᵀ / √d) · V` over positions `0..=pos(row)` of the row's
/// sequence. `row_seq[row]` is the index of the row's chunk in `step.seqs`.
pub fn attend(
    pool: &ThreadPool,
    kv: &KvPool,
    step: &Step,
    row_seq: &[usize],
    layer: usize,
    shape: &AttnShape,
    q: &[f32],
    out: &mut [f32],
) {
    let (nh, hd) = (shape.n_head, shape.head_dim);
    let group = nh / shape.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let n_rows = row_seq.len();
    let dst = SharedOut(out.as_mut_ptr());
    let max_ctx = step.seqs.iter().map(|s| (s.n_past + s.n_rows) as usize).max().unwrap_or(0);
    // Later rows attend over more positions: deal tasks round-robin so threads stay even.
    let threads = pool.threads();
    pool.run(&|ti| {
        let dst = dst;
        let mut scores = vec![0f32; max_ctx];
        let mut acc = vec![0f32; hd];
        for task in (ti..n_rows * nh).step_by(threads) {
            let (row, h) = (task / nh, task % nh);
            let s = &step.seqs[row_seq[row]];
            let pos = s.n_past as usize + (row - s.first_row as usize);
            let kvh = h / group;
            let qh = &q[row * nh * hd + h * hd..row * nh * hd + (h + 1) * hd];
            let sc = &mut scores[..=pos];
            for (t, score) in sc.iter_mut().enumerate() {
                let k = &kv.row(&s.page_table, layer, 0, t)[kvh * hd..(kvh + 1) * hd];
                *score = dot::dot_f32_plain(qh, k) * scale;
            }
            softmax(sc);
            acc.iter_mut().for_each(|a| *a = 0.0);
            for (t, &p) in sc.iter().enumerate() {
                let v = &kv.row(&s.page_table, layer, 1, t)[kvh * hd..(kvh + 1) * hd];
                dot::axpy(&mut acc, p, v);
            }
            let base = row * nh * hd + h * hd;
            for (j, a) in acc.iter().enumerate() {
                // SAFETY: each (row, head) slice is written by exactly one task.
                unsafe { *dst.0.add(base + j) = *a };
            }
        }
    });
}
