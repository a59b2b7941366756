//! Paged causal attention with grouped-query heads, reading K and V through page tables.
//!
//! Work is split into tasks of (sequence chunk, KV head, block of up to ROW_BLOCK query
//! rows). Within a task every K and V row is loaded once and used by all the block's rows and
//! the query heads sharing that KV head, instead of once per (row, head): long prompts are
//! bound by arithmetic, not by re-reading the cache.

use super::{kv::KvPool, matmul::SharedOut, ops};
use crate::{pool::ThreadPool, quant::dot};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use zinc_plugin_api::{AttentionSpan, Step};

#[cfg(target_arch = "x86_64")]
mod tiled;

/// Query rows per task.
const ROW_BLOCK: usize = 16;

/// Shapes of one attention op, and how far back it reads.
pub struct AttnShape {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head width.
    pub head_dim: usize,
    /// The whole context or a sliding window.
    pub span: AttentionSpan,
    /// Soft cap on the scaled scores (Gemma 2; 0 for none).
    pub softcap: f32,
    /// Every row through the prompt kernel, also a task's lone row, so that a row's result
    /// does not depend on the rows beside it (how the scheduler chunked its prompt). The
    /// backend's `panels = false` mode; otherwise a lone row (decode) takes the one-row
    /// kernel, faster for wide heads (Gemma 3's 256) but rounding differently.
    pub row_invariant: bool,
}

/// Writes this step's K and V rows into `layer`'s pages.
pub fn store_kv(kv: &mut KvPool, step: &Step, layer: usize, k: &[f32], v: &[f32], kv_dim: usize) {
    for s in step.seqs.iter() {
        for i in 0..s.n_rows as usize {
            let row = s.first_row as usize + i;
            let pos = s.n_past as usize + i;
            dot::to_f16(&k[row * kv_dim..(row + 1) * kv_dim], kv.row_mut(s, layer, 0, pos));
            dot::to_f16(&v[row * kv_dim..(row + 1) * kv_dim], kv.row_mut(s, layer, 1, pos));
        }
    }
}

/// One unit of work.
struct Task {
    seq: usize,
    kv_head: usize,
    /// First row of the block (index into the step's rows).
    row0: usize,
    rows: usize,
}

/// `out[row, head] = softmax(q·Kᵀ / √d) · V` over the positions `span` gives a query at
/// `pos(row)` of the row's sequence (`0..=pos(row)`, or its sliding window).
pub fn attend(
    pool: &ThreadPool,
    kv: &KvPool,
    step: &Step,
    layer: usize,
    shape: &AttnShape,
    q: &[f32],
    out: &mut [f32],
) {
    let (nh, hd) = (shape.n_head, shape.head_dim);
    let group = nh / shape.n_head_kv;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut tasks = Vec::new();
    for (si, s) in step.seqs.iter().enumerate() {
        for g in 0..shape.n_head_kv {
            let mut r = 0;
            while r < s.n_rows as usize {
                let rows = ROW_BLOCK.min(s.n_rows as usize - r);
                tasks.push(Task { seq: si, kv_head: g, row0: s.first_row as usize + r, rows });
                r += rows;
            }
        }
    }
    // Heavier tasks (longer contexts) first, each claimed by the next thread free (a thread
    // the host slows takes fewer), keeps threads even.
    tasks.sort_by_key(|t| std::cmp::Reverse(step.seqs[t.seq].n_past as usize + t.row0 + t.rows));
    let dst = SharedOut(out.as_mut_ptr());
    let next_task = AtomicUsize::new(0);
    let max_ctx = step.seqs.iter().map(|s| (s.n_past + s.n_rows) as usize).max().unwrap_or(0);
    // Score rows padded to whole tiles of 16 positions (the tiled task stores whole tiles).
    let stride = max_ctx.div_ceil(16) * 16;
    pool.run(&|_| {
        let dst = dst;
        let mut scores = vec![0f32; ROW_BLOCK * group * stride];
        let mut acc = vec![0f32; ROW_BLOCK * group * hd];
        #[cfg(target_arch = "x86_64")]
        let mut tile = vec![0f32; 2 * tiled::TILE * hd];
        let args =
            TaskArgs { kv, step, layer, nh, hd, group, scale, stride, span: shape.span, softcap: shape.softcap, q };
        while let Some(task) = tasks.get(next_task.fetch_add(1, Relaxed)) {
            #[cfg(target_arch = "x86_64")]
            if crate::quant::x86::float::available() {
                // SAFETY: AVX2, FMA and F16C checked.
                unsafe {
                    if (task.rows > 1 || shape.row_invariant) && hd % 8 == 0 {
                        // Prompt chunks: K and V converted once per tile for all the block's lanes.
                        tiled::task_tiled(&args, task, &mut scores, &mut acc, &mut tile, dst);
                    } else {
                        task_avx2(&args, task, &mut scores, &mut acc, dst);
                    }
                }
                continue;
            }
            task_plain(&args, task, &mut scores, &mut acc, dst);
        }
    });
}

/// What every task of one attention op shares.
struct TaskArgs<'a> {
    kv: &'a KvPool,
    step: &'a Step,
    layer: usize,
    nh: usize,
    hd: usize,
    group: usize,
    scale: f32,
    /// Length of one lane's row of scores (the longest context, padded to 16).
    stride: usize,
    /// Which earlier positions a query reads.
    span: AttentionSpan,
    /// Soft cap on the scaled scores (0: none).
    softcap: f32,
    q: &'a [f32],
}

impl TaskArgs<'_> {
    /// The first position a query at `pos` reads.
    fn first_key(&self, pos: usize) -> usize {
        self.span.first_key(pos as u32) as usize
    }

    /// One lane's scaled scores to probabilities: soft-capped first where the model says so.
    fn softmax(&self, scores: &mut [f32]) {
        if self.softcap > 0.0 {
            ops::soft_cap(scores, self.softcap);
        }
        ops::softmax(scores);
    }
}

/// One task's body, instantiated once per instruction set so that the dot products and
/// `acc += p · v` updates inline into the loops (a call per 64-element head costs as much as
/// the arithmetic).
macro_rules! task_body {
    ($args:ident, $task:ident, $scores:ident, $acc:ident, $dst:ident, $dot:path, $axpy:path) => {{
        let TaskArgs { kv, step, layer, nh, hd, group, scale, stride, q, .. } = *$args;
        let s = &step.seqs[$task.seq];
        let first_pos = s.n_past as usize + ($task.row0 - s.first_row as usize);
        let ctx = first_pos + $task.rows;
        let lanes = $task.rows * group;
        // Row i reads positions lo(i)..=pos(i); scores are indexed by position.
        let lo = |i: usize| $args.first_key(first_pos + i);
        for t in lo(0)..ctx {
            let k = &kv.row(s, layer, 0, t)[$task.kv_head * hd..($task.kv_head + 1) * hd];
            for i in 0..$task.rows {
                if t > first_pos + i || t < lo(i) {
                    continue;
                }
                let row = $task.row0 + i;
                for j in 0..group {
                    let h = $task.kv_head * group + j;
                    let qh = &q[row * nh * hd + h * hd..row * nh * hd + (h + 1) * hd];
                    $scores[(i * group + j) * stride + t] = $dot(qh, k) * scale;
                }
            }
        }
        for lane in 0..lanes {
            let valid = first_pos + lane / group + 1;
            $args.softmax(&mut $scores[lane * stride + lo(lane / group)..lane * stride + valid]);
        }
        $acc[..lanes * hd].iter_mut().for_each(|a| *a = 0.0);
        for t in lo(0)..ctx {
            let v = &kv.row(s, layer, 1, t)[$task.kv_head * hd..($task.kv_head + 1) * hd];
            for lane in 0..lanes {
                if t > first_pos + lane / group || t < lo(lane / group) {
                    continue;
                }
                let p = $scores[lane * stride + t];
                $axpy(&mut $acc[lane * hd..(lane + 1) * hd], p, v);
            }
        }
        for lane in 0..lanes {
            let (i, j) = (lane / group, lane % group);
            let row = $task.row0 + i;
            let h = $task.kv_head * group + j;
            let base = row * nh * hd + h * hd;
            for (x, a) in $acc[lane * hd..(lane + 1) * hd].iter().enumerate() {
                // SAFETY: each (row, head) slice belongs to exactly one task.
                unsafe { *$dst.0.add(base + x) = *a };
            }
        }
    }};
}

fn axpy_plain(acc: &mut [f32], p: f32, v: &[u16]) {
    for (a, &x) in acc.iter_mut().zip(v) {
        *a += p * zinc_formats::half::f16_to_f32(x);
    }
}

fn dot_plain_f16(q: &[f32], k: &[u16]) -> f32 {
    q.iter().zip(k).map(|(a, &b)| a * zinc_formats::half::f16_to_f32(b)).sum()
}

fn task_plain(args: &TaskArgs, task: &Task, scores: &mut [f32], acc: &mut [f32], dst: SharedOut) {
    task_body!(args, task, scores, acc, dst, dot_plain_f16, axpy_plain)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn task_avx2(args: &TaskArgs, task: &Task, scores: &mut [f32], acc: &mut [f32], dst: SharedOut) {
    use crate::quant::x86::float;
    task_body!(args, task, scores, acc, dst, float::dot_f16, float::axpy_f16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zinc_formats::random::Rng;
    use zinc_plugin_api::{LogitRows, SeqChunk};

    /// Every task of the step through the plain body: the reference for the SIMD tasks.
    fn plain_attention(kv: &KvPool, step: &Step, shape: &AttnShape, q: &[f32]) -> Vec<f32> {
        let (nh, hd) = (shape.n_head, shape.head_dim);
        let group = nh / shape.n_head_kv;
        let max_ctx = step.seqs.iter().map(|s| (s.n_past + s.n_rows) as usize).max().unwrap();
        let stride = max_ctx.div_ceil(16) * 16;
        let mut out = vec![0f32; step.tokens.len() * nh * hd];
        let dst = SharedOut(out.as_mut_ptr());
        let mut scores = vec![0f32; ROW_BLOCK * group * stride];
        let mut acc = vec![0f32; ROW_BLOCK * group * hd];
        let scale = 1.0 / (hd as f32).sqrt();
        let args =
            TaskArgs { kv, step, layer: 0, nh, hd, group, scale, stride, span: shape.span, softcap: shape.softcap, q };
        for (si, s) in step.seqs.iter().enumerate() {
            for g in 0..shape.n_head_kv {
                let mut r = 0;
                while r < s.n_rows as usize {
                    let rows = ROW_BLOCK.min(s.n_rows as usize - r);
                    let task = Task { seq: si, kv_head: g, row0: s.first_row as usize + r, rows };
                    task_plain(&args, &task, &mut scores, &mut acc, dst);
                    r += rows;
                }
            }
        }
        out
    }

    /// Adds a sequence to `step`: `past` cached positions of random K and V in `pages`, then
    /// `rows` new rows. Returns the sequence's first row.
    fn add_sequence(
        kv: &mut KvPool,
        kv_dim: usize,
        step: &mut Step,
        rng: &mut Rng,
        pages: &[u32],
        past: u32,
        rows: u32,
    ) -> u32 {
        let first_row = step.tokens.len() as u32;
        let chunk = SeqChunk {
            seq_id: step.seqs.len() as u64,
            first_row,
            n_rows: rows,
            n_past: past,
            page_table: pages.to_vec().into(),
            window_table: Default::default(),
            logits: LogitRows::Last,
        };
        for pos in 0..past as usize {
            for which in 0..2 {
                let x: Vec<f32> = (0..kv_dim).map(|_| rng.sym(1.0)).collect();
                dot::to_f16(&x, kv.row_mut(&chunk, 0, which, pos));
            }
        }
        step.seqs.push(chunk);
        step.tokens.extend((0..rows).map(|_| 0));
        step.positions.extend(past..past + rows);
        first_row
    }

    /// A pool of `n_pages` pages of 16 tokens for one layer.
    fn plain_pool(n_pages: u32, kv_dim: usize) -> KvPool {
        let spec = zinc_plugin_api::KvPoolSpec { n_pages, page_size: 16, window_pages: 0 };
        KvPool::new(spec, zinc_plugin_api::KvLayout::uniform(1), kv_dim, 0).unwrap()
    }

    /// Stores random K and V for every row of `step`.
    fn store_random_kv(kv: &mut KvPool, kv_dim: usize, step: &Step, rng: &mut Rng) {
        let n = step.tokens.len();
        let k: Vec<f32> = (0..n * kv_dim).map(|_| rng.sym(1.0)).collect();
        let v: Vec<f32> = (0..n * kv_dim).map(|_| rng.sym(1.0)).collect();
        store_kv(kv, step, 0, &k, &v, kv_dim);
    }

    /// Attention written out for one (row, head): softmax of the scaled dots over the
    /// positions `lo..=pos`, then the weighted sum of values. Independent of the task code.
    fn naive_head(kv: &KvPool, s: &SeqChunk, kv_head: usize, hd: usize, q: &[f32], lo: usize, pos: usize) -> Vec<f32> {
        let f = |x: &[u16]| x.iter().map(|&h| zinc_formats::half::f16_to_f32(h)).collect::<Vec<f32>>();
        let head = |which: usize, t: usize| f(&kv.row(s, 0, which, t)[kv_head * hd..(kv_head + 1) * hd]);
        let dots: Vec<f32> = (lo..=pos)
            .map(|t| head(0, t).iter().zip(q).map(|(k, q)| k * q).sum::<f32>() / (hd as f32).sqrt())
            .collect();
        let max = dots.iter().cloned().fold(f32::MIN, f32::max);
        let e: Vec<f32> = dots.iter().map(|d| (d - max).exp()).collect();
        let sum: f32 = e.iter().sum();
        let mut out = vec![0f32; hd];
        for (t, w) in (lo..=pos).zip(&e) {
            for (o, v) in out.iter_mut().zip(head(1, t)) {
                *o += w / sum * v;
            }
        }
        out
    }

    /// A sliding window reads exactly the last `keys` positions: prompt chunks (the tiled
    /// task) and decode rows against the attention written out, for windows narrower than,
    /// equal to and wider than the context, and not aligned to the 16-position tiles.
    #[test]
    fn sliding_windows_read_only_their_last_keys() {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let mut rng = Rng::new(seed);
        let pool = ThreadPool::new(2);
        let (hd, nh, nkv) = (32, 4, 2);
        for keys in [1u32, 7, 20, 45, 200] {
            let shape = AttnShape {
                n_head: nh,
                n_head_kv: nkv,
                head_dim: hd,
                span: AttentionSpan::Window { keys },
                softcap: 0.0,
                row_invariant: false,
            };
            let kv_dim = nkv * hd;
            let mut kv = plain_pool(16, kv_dim);
            let mut step = Step::default();
            // A prompt chunk of 21 rows after 40 cached positions, and a decode row at 52.
            let mut tables = Vec::new();
            for (id, (past, rows)) in [(40u32, 21u32), (52, 1)].into_iter().enumerate() {
                let pages: Vec<u32> = (0..4).map(|p| id as u32 * 4 + p).collect();
                let row = add_sequence(&mut kv, kv_dim, &mut step, &mut rng, &pages, past, rows);
                tables.push((id, past, rows, row));
            }
            store_random_kv(&mut kv, kv_dim, &step, &mut rng);
            let n = step.tokens.len();
            let q: Vec<f32> = (0..n * nh * hd).map(|_| rng.sym(2.0)).collect();
            let mut got = vec![0f32; n * nh * hd];
            attend(&pool, &kv, &step, 0, &shape, &q, &mut got);
            for &(id, past, rows, row0) in &tables {
                let (past, rows, row0) = (&past, &rows, &row0);
                for i in 0..*rows as usize {
                    let pos = *past as usize + i;
                    let lo = (pos + 1).saturating_sub(keys as usize);
                    let r = *row0 as usize + i;
                    for h in 0..nh {
                        let qh = &q[(r * nh + h) * hd..(r * nh + h + 1) * hd];
                        let want = naive_head(&kv, &step.seqs[id], h / (nh / nkv), hd, qh, lo, pos);
                        let g = &got[(r * nh + h) * hd..(r * nh + h + 1) * hd];
                        for (a, b) in g.iter().zip(&want) {
                            assert!(
                                (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                                "window {keys} pos {pos} head {h}: {a} vs {b} (seed {seed})"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn prompt_chunk_attention_matches_the_plain_task() {
        let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
        let mut rng = Rng::new(seed);
        let pool = ThreadPool::new(2);
        // (head_dim, query heads, KV heads, span): SmolLM2's, a 4:1 group of 128-wide heads,
        // no grouping, one KV head for all; sliding windows inside and across tiles.
        let cases = [
            (64, 9, 3, AttentionSpan::Full),
            (128, 8, 2, AttentionSpan::Full),
            (64, 4, 4, AttentionSpan::Window { keys: 9 }),
            (32, 6, 1, AttentionSpan::Window { keys: 37 }),
        ];
        for (hd, nh, nkv, span) in cases {
            let shape =
                AttnShape { n_head: nh, n_head_kv: nkv, head_dim: hd, span, softcap: 0.0, row_invariant: false };
            let kv_dim = nkv * hd;
            let mut kv = plain_pool(64, kv_dim);
            // Two prompt chunks at different depths (one longer than a row block) and a decode.
            let shapes = [
                (rng.next_u64() % 70, 1 + rng.next_u64() % 20),
                (rng.next_u64() % 40, 2 + rng.next_u64() % 15),
                (30, 1),
            ];
            let mut free: Vec<u32> = (0..64).collect();
            for i in (1..free.len()).rev() {
                free.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            let mut step = Step::default();
            for &(past, rows) in &shapes {
                let (past, rows) = (past as u32, rows as u32);
                let pages: Vec<u32> = (0..(past + rows).div_ceil(16)).map(|_| free.pop().unwrap()).collect();
                add_sequence(&mut kv, kv_dim, &mut step, &mut rng, &pages, past, rows);
            }
            store_random_kv(&mut kv, kv_dim, &step, &mut rng);
            let n = step.tokens.len();
            let q: Vec<f32> = (0..n * nh * hd).map(|_| rng.sym(2.0)).collect();
            let want = plain_attention(&kv, &step, &shape, &q);
            let mut got = vec![0f32; n * nh * hd];
            attend(&pool, &kv, &step, 0, &shape, &q, &mut got);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "hd {hd} heads {nh}/{nkv} value {i}: {g} vs {w} (seed {seed})"
                );
            }
        }
    }

    /// With `row_invariant`, a row's attention is the same to the bit whichever rows share its
    /// step: a prompt split into chunks by the scheduler (so a row may be a block's only row,
    /// or share a block with others) gives what the whole prompt in one chunk gives. The
    /// server's greedy answers alone and among other requests (with `panels = false`) depend
    /// on it; without it a lone row took the one-row kernel and this failed at position 20.
    #[test]
    fn a_rows_attention_does_not_depend_on_how_its_prompt_was_chunked() {
        let mut rng = Rng::new(7);
        let pool = ThreadPool::new(2);
        for (hd, nh, nkv) in [(64, 9, 3), (128, 8, 2)] {
            let shape = AttnShape {
                n_head: nh,
                n_head_kv: nkv,
                head_dim: hd,
                span: AttentionSpan::Full,
                softcap: 0.0,
                row_invariant: true,
            };
            let kv_dim = nkv * hd;
            let mut kv = plain_pool(8, kv_dim);
            let pages: Vec<u32> = vec![5, 2, 7, 0];
            // K and V of positions 0..48, then rows for positions 20..48 in different chunkings.
            add_sequence(&mut kv, kv_dim, &mut Step::default(), &mut rng, &pages, 48, 0);
            let q_at: Vec<Vec<f32>> = (0..48).map(|_| (0..nh * hd).map(|_| rng.sym(2.0)).collect()).collect();
            let run = |chunks: &[(u32, u32)]| -> Vec<Vec<f32>> {
                let mut rows = Vec::new();
                for &(past, n) in chunks {
                    let step = Step {
                        tokens: vec![0; n as usize].into(),
                        positions: (past..past + n).collect::<Vec<u32>>().into(),
                        seqs: vec![SeqChunk {
                            seq_id: 0,
                            first_row: 0,
                            n_rows: n,
                            n_past: past,
                            page_table: pages.clone().into(),
                            window_table: Default::default(),
                            logits: LogitRows::Last,
                        }]
                        .into(),
                        ..Default::default()
                    };
                    let q: Vec<f32> = (past..past + n).flat_map(|p| q_at[p as usize].clone()).collect();
                    let mut out = vec![0f32; q.len()];
                    attend(&pool, &kv, &step, 0, &shape, &q, &mut out);
                    rows.extend(out.chunks(nh * hd).map(|r| r.to_vec()));
                }
                rows
            };
            let whole = run(&[(20, 28)]);
            for chunks in [&[(20, 1), (21, 16), (37, 11)][..], &[(20, 7), (27, 1), (28, 20)], &[(20, 27), (47, 1)]] {
                let got = run(chunks);
                for (i, (a, b)) in got.iter().zip(&whole).enumerate() {
                    let same = a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "hd {hd}: position {} differs when chunked as {chunks:?}", 20 + i);
                }
            }
        }
    }
}
