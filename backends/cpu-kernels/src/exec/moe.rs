//! Mixture-of-experts feed-forward: softmax router, top-k, renormalised weights, and each
//! expert's SwiGLU FFN run over the rows that chose it.

use super::{
    gated::{gated, Gate},
    matmul::{matmul, wants, QuantizedCopies},
    ops::softmax,
    weights::Weight,
};
use crate::pool::ThreadPool;

/// The expert tensors of one layer.
pub struct Experts<'a> {
    /// Router (n_embd → n_expert).
    pub router: &'a Weight,
    /// Gate projections, experts × ff × n_embd.
    pub gate: &'a Weight,
    /// Up projections.
    pub up: &'a Weight,
    /// Down projections, experts × n_embd × ff.
    pub down: &'a Weight,
    /// Experts used per token.
    pub n_used: usize,
}

/// Top `k` of `probs` (index, weight), weights renormalised to sum to 1.
pub fn top_k(probs: &[f32], k: usize) -> Vec<(usize, f32)> {
    let mut idx: Vec<usize> = (0..probs.len()).collect();
    idx.sort_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    idx.truncate(k);
    let sum: f32 = idx.iter().map(|&i| probs[i]).sum();
    idx.into_iter().map(|i| (i, probs[i] / sum)).collect()
}

/// Runs the MoE FFN on `n` rows of `x` (width `n_embd`), writing `out` (n × n_embd).
pub fn moe(pool: &ThreadPool, e: &Experts, x: &[f32], n: usize, n_embd: usize, out: &mut [f32]) {
    let n_expert = e.router.rows();
    let ff = e.gate.dims[1] as usize;
    let mut x_copies = QuantizedCopies::default();
    let mut logits = vec![0f32; n * n_expert];
    matmul(pool, e.router, 0, n_expert, &x_copies.rows(pool, x, n_embd, n, wants(e.router)), &mut logits);
    let mut chosen: Vec<Vec<(usize, f32)>> = vec![Vec::new(); n_expert];
    for r in 0..n {
        let p = &mut logits[r * n_expert..(r + 1) * n_expert];
        softmax(p);
        for (ex, w) in top_k(p, e.n_used) {
            chosen[ex].push((r, w));
        }
    }
    out[..n * n_embd].iter_mut().for_each(|v| *v = 0.0);
    for (ex, users) in chosen.iter().enumerate().filter(|(_, u)| !u.is_empty()) {
        let idx: Vec<usize> = users.iter().map(|&(r, _)| r).collect();
        let m = idx.len();
        let (mut g, mut u, mut h) = (vec![0f32; m * ff], vec![0f32; m * ff], vec![0f32; m * ff]);
        matmul(pool, e.gate, ex * ff, ff, &x_copies.rows(pool, x, n_embd, n, wants(e.gate)).select(&idx), &mut g);
        matmul(pool, e.up, ex * ff, ff, &x_copies.rows(pool, x, n_embd, n, wants(e.up)).select(&idx), &mut u);
        gated(&mut h, Some(&g), Some(&u), Gate::Silu);
        let mut d = vec![0f32; m * n_embd];
        let mut h_copies = QuantizedCopies::default();
        let down_in = h_copies.rows(pool, &h, ff, m, wants(e.down));
        matmul(pool, e.down, ex * n_embd, n_embd, &down_in, &mut d);
        for (i, &(r, w)) in users.iter().enumerate() {
            for (o, v) in out[r * n_embd..(r + 1) * n_embd].iter_mut().zip(&d[i * n_embd..(i + 1) * n_embd]) {
                *o += w * v;
            }
        }
    }
}
