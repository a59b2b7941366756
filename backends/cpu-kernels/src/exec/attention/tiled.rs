//! The attention task for prompt chunks (x86-64, AVX2 + FMA + F16C): keys and values are
//! converted from f16 once per tile of 16 positions, not once per (position, query lane).
//!
//! Scores: the tile's keys are transposed (`kt[d][t]`), so one broadcast query element times
//! one vector of keys advances 8 positions' scores; four query lanes share each key load.
//! Values: each lane's output accumulates `p[t] · v[t]` over the tile in registers. Deep in a
//! long prompt this is most of a step's time; the row-by-row task (`task_avx2`) converted
//! every key and value once per lane (48 times for a 16-row block of SmolLM2).

use super::{SharedOut, Task, TaskArgs};
use std::arch::x86_64::*;

/// Positions per tile.
pub const TILE: usize = 16;

/// Rows `t0..t0 + TILE` of K (`which` 0) or V (1) for the task's head, as f32 rows of `hd`
/// in `out`; rows past `ctx` are zero.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn load_tile(args: &TaskArgs, task: &Task, which: usize, t0: usize, ctx: usize, out: &mut [f32]) {
    let s = &args.step.seqs[task.seq];
    let (hd, head) = (args.hd, task.kv_head * args.hd);
    for t in 0..TILE {
        let dst = out.as_mut_ptr().add(t * hd);
        if t0 + t < ctx {
            let src = args.kv.row(s, args.layer, which, t0 + t)[head..head + hd].as_ptr();
            for d in (0..hd).step_by(8) {
                _mm256_storeu_ps(dst.add(d), _mm256_cvtph_ps(_mm_loadu_si128(src.add(d) as *const __m128i)));
            }
        } else {
            for d in (0..hd).step_by(8) {
                _mm256_storeu_ps(dst.add(d), _mm256_setzero_ps());
            }
        }
    }
}

/// `kt[d * TILE + t] = rows[t * hd + d]` for one 8 × 8 block (rows `t0..t0+8`, columns
/// `d0..d0+8`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn transpose8(rows: &[f32], hd: usize, t0: usize, d0: usize, kt: &mut [f32]) {
    let r: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(rows.as_ptr().add((t0 + i) * hd + d0)));
    let a0 = _mm256_unpacklo_ps(r[0], r[1]);
    let a1 = _mm256_unpackhi_ps(r[0], r[1]);
    let a2 = _mm256_unpacklo_ps(r[2], r[3]);
    let a3 = _mm256_unpackhi_ps(r[2], r[3]);
    let a4 = _mm256_unpacklo_ps(r[4], r[5]);
    let a5 = _mm256_unpackhi_ps(r[4], r[5]);
    let a6 = _mm256_unpacklo_ps(r[6], r[7]);
    let a7 = _mm256_unpackhi_ps(r[6], r[7]);
    let b0 = _mm256_shuffle_ps::<0x44>(a0, a2);
    let b1 = _mm256_shuffle_ps::<0xEE>(a0, a2);
    let b2 = _mm256_shuffle_ps::<0x44>(a1, a3);
    let b3 = _mm256_shuffle_ps::<0xEE>(a1, a3);
    let b4 = _mm256_shuffle_ps::<0x44>(a4, a6);
    let b5 = _mm256_shuffle_ps::<0xEE>(a4, a6);
    let b6 = _mm256_shuffle_ps::<0x44>(a5, a7);
    let b7 = _mm256_shuffle_ps::<0xEE>(a5, a7);
    let cols = [
        _mm256_permute2f128_ps::<0x20>(b0, b4),
        _mm256_permute2f128_ps::<0x20>(b1, b5),
        _mm256_permute2f128_ps::<0x20>(b2, b6),
        _mm256_permute2f128_ps::<0x20>(b3, b7),
        _mm256_permute2f128_ps::<0x31>(b0, b4),
        _mm256_permute2f128_ps::<0x31>(b1, b5),
        _mm256_permute2f128_ps::<0x31>(b2, b6),
        _mm256_permute2f128_ps::<0x31>(b3, b7),
    ];
    for (i, c) in cols.iter().enumerate() {
        _mm256_storeu_ps(kt.as_mut_ptr().add((d0 + i) * TILE + t0), *c);
    }
}

/// One task (a block of query rows of one sequence and KV head). `scores` rows are
/// `args.stride` long (a multiple of [`TILE`]); `tile` holds `2 · TILE · hd` floats.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn task_tiled(
    args: &TaskArgs,
    task: &Task,
    scores: &mut [f32],
    acc: &mut [f32],
    tile: &mut [f32],
    dst: SharedOut,
) {
    let TaskArgs { step, nh, hd, group, scale, stride, q, .. } = *args;
    debug_assert!(hd % 8 == 0 && stride % TILE == 0);
    let s = &step.seqs[task.seq];
    let first_pos = s.n_past as usize + (task.row0 - s.first_row as usize);
    let ctx = first_pos + task.rows;
    let lanes = task.rows * group;
    let (kt, vf) = tile.split_at_mut(TILE * hd);
    let q_of = |lane: usize| {
        let (i, j) = (lane / group, lane % group);
        let base = (task.row0 + i) * nh * hd + (task.kv_head * group + j) * hd;
        &q[base..base + hd]
    };
    let scale_v = _mm256_set1_ps(scale);
    // Lane `l` reads positions lo(l)..=its own; scores are indexed by position, and tiles
    // start at the whole tile holding the block's first key.
    let lo = |lane: usize| args.first_key(first_pos + lane / group);
    let tile0 = lo(0) / TILE * TILE;
    let mut t0 = tile0;
    while t0 < ctx {
        load_tile(args, task, 0, t0, ctx, vf);
        for d0 in (0..hd).step_by(8) {
            transpose8(vf, hd, 0, d0, kt);
            transpose8(vf, hd, 8, d0, kt);
        }
        let mut l0 = 0;
        while l0 < lanes {
            // Four lanes at a time; past the last lane, repeat it (its scores are not stored).
            let qs: [&[f32]; 4] = std::array::from_fn(|j| q_of((l0 + j).min(lanes - 1)));
            let mut a = [[_mm256_setzero_ps(); 2]; 4];
            for d in 0..hd {
                let k0 = _mm256_loadu_ps(kt.as_ptr().add(d * TILE));
                let k1 = _mm256_loadu_ps(kt.as_ptr().add(d * TILE + 8));
                for j in 0..4 {
                    let qv = _mm256_set1_ps(*qs[j].get_unchecked(d));
                    a[j][0] = _mm256_fmadd_ps(qv, k0, a[j][0]);
                    a[j][1] = _mm256_fmadd_ps(qv, k1, a[j][1]);
                }
            }
            for (j, aj) in a.iter().enumerate().take(lanes - l0) {
                let out = scores.as_mut_ptr().add((l0 + j) * stride + t0);
                _mm256_storeu_ps(out, _mm256_mul_ps(aj[0], scale_v));
                _mm256_storeu_ps(out.add(8), _mm256_mul_ps(aj[1], scale_v));
            }
            l0 += 4;
        }
        t0 += TILE;
    }
    // Scores outside a lane's span (past its own position: the causal mask; before its
    // window) are left as computed and never read: the softmax and the value pass cover the
    // lane's span only.
    for lane in 0..lanes {
        let valid = first_pos + lane / group + 1;
        args.softmax(&mut scores[lane * stride + lo(lane)..lane * stride + valid]);
    }
    acc[..lanes * hd].iter_mut().for_each(|a| *a = 0.0);
    let mut t0 = tile0;
    while t0 < ctx {
        load_tile(args, task, 1, t0, ctx, vf);
        for lane in 0..lanes {
            let (from, to) = (lo(lane).max(t0), (first_pos + lane / group + 1).min(t0 + TILE));
            if from >= to {
                continue;
            }
            let p = &scores[lane * stride + from..lane * stride + to];
            let out = acc.as_mut_ptr().add(lane * hd);
            for dc in (0..hd).step_by(8) {
                let mut r = _mm256_loadu_ps(out.add(dc));
                for (t, &pt) in p.iter().enumerate() {
                    let v = vf.as_ptr().add((from - t0 + t) * hd + dc);
                    r = _mm256_fmadd_ps(_mm256_set1_ps(pt), _mm256_loadu_ps(v), r);
                }
                _mm256_storeu_ps(out.add(dc), r);
            }
        }
        t0 += TILE;
    }
    for lane in 0..lanes {
        let (i, j) = (lane / group, lane % group);
        let base = (task.row0 + i) * nh * hd + (task.kv_head * group + j) * hd;
        for (x, a) in acc[lane * hd..(lane + 1) * hd].iter().enumerate() {
            // SAFETY: each (row, head) slice belongs to exactly one task.
            *dst.0.add(base + x) = *a;
        }
    }
}
