//! Sixteen weight rows side by side, one per 32-bit lane, for prompt-sized products on CPUs
//! with AVX-512 VNNI ([`super::panel`]).
//!
//! A panel stores each run of four weights of the sixteen rows as one 512-bit register: lane
//! `o` holds row `o`'s four bytes. `dpbusd` of that register with four activation bytes
//! broadcast to every lane adds 64 products into the sixteen rows' sums, so an activation row
//! meets sixteen weight rows with no horizontal sums and no shuffles.
//!
//! Two layouts, one per activation form:
//! * super-blocks (K-quants and IQ4_XS, against [`Q8KRow`]): after each run of weights that
//!   share a scale, the integer sums are converted once and multiplied by the rows'
//!   `d · scale` (floats stored per lane). Formats with minimums (Q2_K, Q4_K, Q5_K) store
//!   their weights unsigned against the signed activations, and the minimums are one more
//!   integer dot of the rows' sub-block minimums with the activation's per-16 sums (`dpwssd`,
//!   two sub-blocks per instruction). Formats whose values are signed around a fixed offset
//!   (Q3_K, Q6_K, IQ4_XS) store them signed and meet the activations plus 128
//!   ([`Q8KRow::biased`]); the 128 · Σ weights that this adds is a constant of each row,
//!   computed when the panel is filled and taken off once per super-block, so these formats
//!   need no per-activation minimum term;
//! * blocks of 32 (Q4_0 to Q8_0 and IQ4_NL, against [`Q8Row`]): per block the sums are
//!   converted and multiplied by `d` times the activation's scale, and the minimum term is
//!   the rows' `m` times the activation's `d · Σ q`. Weights are stored unsigned; those with
//!   signed values (Q8_0, IQ4_NL) plus 128, which comes back off through the minimum term.

use super::{
    panel::PANEL_ROWS,
    q8::Q8Row,
    q8k::{Q8KRow, QK_K},
    x86_kquant::{prefetch_ahead, zmm, Unpacked},
};
use std::arch::x86_64::*;
use zinc_formats::GgmlType;

/// Bytes of one super-block of a panel: 64 runs of four weights × 16 rows, then 16 sub-block
/// scales × 16 rows (f32), 8 pairs of sub-block minimums × 16 rows (i16 pairs), and the 16
/// rows' `dmin` (f32); for the signed formats ([`signed_offset`]) the minimums are unused and
/// the last line holds each row's `128 · Σ d · scale · Σ q` instead of `dmin`.
pub const PANEL_SB_BYTES: usize = QUANTS + SCALES + MINS + 64;
const QUANTS: usize = 64 * 64;
const SCALES: usize = 16 * 64;
const MINS: usize = 8 * 64;

/// For the formats whose values are an unsigned code minus a fixed offset (what the unpackers
/// express as a minimum of `offset · scale`), that offset: their panels hold the signed values.
fn signed_offset(ty: GgmlType) -> Option<i8> {
    match ty {
        GgmlType::Q3_K => Some(4),
        GgmlType::Q6_K => Some(32),
        // Stored plus 128 by `iq4_xs`; minus 128 wraps back to the table's signed bytes.
        GgmlType::IQ4_XS => Some(-128),
        _ => None,
    }
}

/// Writes one panel super-block: `rows` holds one super-block of `ty` for each of up to
/// sixteen weight rows (lane `o` is `rows[o]`; lanes past them read as zero), `sb` the panel's
/// bytes for that super-block (`PANEL_SB_BYTES`); `false` for other formats.
///
/// Each row is unpacked into registers, and the sixteen rows are turned into lanes with
/// register transposes, so the panel is written in whole lines.
///
/// # Safety
/// The CPU has AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn fill_block_k(ty: GgmlType, rows: &[&[u8]], sb: &mut [u8]) -> bool {
    use zinc_formats::GgmlType::*;
    assert!(rows.len() <= PANEL_ROWS && sb.len() == PANEL_SB_BYTES);
    // `quants[c][o]`: runs 16c..16c+16 of row o, one run of four weights per 32-bit lane.
    let mut quants = [[_mm512_setzero_si512(); PANEL_ROWS]; 4];
    let mut scales = [_mm512_setzero_si512(); PANEL_ROWS];
    let mut mins = [_mm512_setzero_si512(); PANEL_ROWS];
    let mut dmin = [0f32; PANEL_ROWS];
    let offset = signed_offset(ty).map(|o| _mm256_set1_epi8(o));
    for (o, w) in rows.iter().enumerate() {
        assert_eq!(w.len(), ty.block_bytes());
        let p = w.as_ptr();
        // Each lane's row is its own stream from memory.
        prefetch_ahead(p, w.len());
        let u = match ty {
            Q2_K => zmm::q2_k(p),
            Q3_K => zmm::q3_k(p),
            Q4_K => zmm::q4_k(p),
            Q5_K => zmm::q5_k(p),
            Q6_K => zmm::q6_k(p),
            IQ4_XS => iq4_xs(&*(p as *const zinc_formats::blocks::BlockIQ4XS)),
            _ => return false,
        };
        let q = match offset {
            Some(off) => u.q.map(|v| _mm256_sub_epi8(v, off)),
            None => u.q,
        };
        for (c, run) in quants.iter_mut().enumerate() {
            run[o] = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(q[2 * c]), q[2 * c + 1]);
        }
        let wide = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(u.scales));
        scales[o] = _mm512_castps_si512(_mm512_mul_ps(wide, _mm512_set1_ps(u.d)));
        // Pairs of 16-bit minimums, as `dpwssd` reads them.
        mins[o] = _mm512_zextsi256_si512(u.mins);
        dmin[o] = u.dmin;
    }
    let mut line = |at: usize, v: __m512i| _mm512_storeu_si512(sb.as_mut_ptr().add(at) as *mut _, v);
    for (c, run) in quants.iter_mut().enumerate() {
        transpose_16(run);
        for (j, v) in run.iter().enumerate() {
            line((16 * c + j) * 64, *v);
        }
    }
    transpose_16(&mut scales);
    for (s, v) in scales.iter().enumerate() {
        line(QUANTS + s * 64, *v);
    }
    if offset.is_some() {
        // 128 · Σ over sub-blocks of d · scale · Σ q, per lane: what the biased activations add.
        let ones = _mm512_set1_epi8(1);
        let mut bias = _mm512_setzero_ps();
        for (s, scale) in scales.iter().enumerate() {
            let mut sum = _mm512_setzero_si512();
            for run in 4 * s..4 * s + 4 {
                sum = _mm512_dpbusd_epi32(sum, ones, quants[run / 16][run % 16]);
            }
            bias = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_castsi512_ps(*scale), bias);
        }
        line(QUANTS + SCALES + MINS, _mm512_castps_si512(_mm512_mul_ps(bias, _mm512_set1_ps(128.0))));
        return true;
    }
    transpose_16(&mut mins);
    for (t, v) in mins[..8].iter().enumerate() {
        line(QUANTS + SCALES + t * 64, *v);
    }
    line(QUANTS + SCALES + MINS, _mm512_loadu_si512(dmin.as_ptr() as *const _));
    true
}

/// Transposes a 16 × 16 matrix of 32-bit values held one row per register: afterwards
/// register `j` holds column `j`, its lane `i` the old row `i`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn transpose_16(m: &mut [__m512i; 16]) {
    // Within each 128-bit lane: after these two steps `b[4g + c]` holds, in lane k, rows
    // 4g..4g+4 of column 4k + c.
    let mut a = [_mm512_setzero_si512(); 16];
    for p in 0..8 {
        a[2 * p] = _mm512_unpacklo_epi32(m[2 * p], m[2 * p + 1]);
        a[2 * p + 1] = _mm512_unpackhi_epi32(m[2 * p], m[2 * p + 1]);
    }
    let mut b = [_mm512_setzero_si512(); 16];
    for g in 0..4 {
        let (a0, a1, a2, a3) = (a[4 * g], a[4 * g + 1], a[4 * g + 2], a[4 * g + 3]);
        b[4 * g] = _mm512_unpacklo_epi64(a0, a2);
        b[4 * g + 1] = _mm512_unpackhi_epi64(a0, a2);
        b[4 * g + 2] = _mm512_unpacklo_epi64(a1, a3);
        b[4 * g + 3] = _mm512_unpackhi_epi64(a1, a3);
    }
    // Then a 4 × 4 transpose of 128-bit lanes for each c: column 4k + c gathers lane k of
    // b[c], b[4 + c], b[8 + c], b[12 + c].
    for c in 0..4 {
        let (b0, b1, b2, b3) = (b[c], b[4 + c], b[8 + c], b[12 + c]);
        let e0 = _mm512_shuffle_i32x4::<0x88>(b0, b1);
        let e1 = _mm512_shuffle_i32x4::<0xdd>(b0, b1);
        let e2 = _mm512_shuffle_i32x4::<0x88>(b2, b3);
        let e3 = _mm512_shuffle_i32x4::<0xdd>(b2, b3);
        m[c] = _mm512_shuffle_i32x4::<0x88>(e0, e2);
        m[8 + c] = _mm512_shuffle_i32x4::<0xdd>(e0, e2);
        m[4 + c] = _mm512_shuffle_i32x4::<0x88>(e1, e3);
        m[12 + c] = _mm512_shuffle_i32x4::<0xdd>(e1, e3);
    }
}

/// An IQ4_XS super-block unpacked as unsigned values: its table values plus 128, each
/// 32-element sub-block's scale on both of its 16-element halves, and the 128 taken back off
/// as a minimum of `128 · scale` with `dmin = d`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn iq4_xs(b: &zinc_formats::blocks::BlockIQ4XS) -> Unpacked {
    let values = _mm_loadu_si128(zinc_formats::dequant::IQ4_VALUES.as_ptr() as *const __m128i);
    let table = _mm256_broadcastsi128_si256(_mm_xor_si128(values, _mm_set1_epi8(-128)));
    let m4 = _mm_set1_epi8(0xf);
    let q = std::array::from_fn(|ib| {
        // Elements 0..16 are the low nibbles, 16..32 the high ones.
        let x = _mm_loadu_si128(b.qs.as_ptr().add(16 * ib) as *const __m128i);
        let idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
        _mm256_shuffle_epi8(table, idx)
    });
    let s: [i16; 16] = std::array::from_fn(|j| b.scale(j / 2) as i16);
    let scales = _mm256_loadu_si256(s.as_ptr() as *const __m256i);
    let d = b.d.to_f32();
    Unpacked { q, scales, mins: _mm256_slli_epi16(scales, 7), d, dmin: d }
}

/// `out[r][o] += ` panel row `o` · activation row `r` over super-blocks `sbs`, for R rows of
/// a panel of `ty` filled by [`fill_block_k`].
///
/// # Safety
/// The CPU has AVX-512 VNNI; `panel` holds at least `sbs.end` super-blocks and every
/// activation row at least `sbs.end` super-blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn dot_k<const R: usize>(
    ty: GgmlType,
    panel: *const u8,
    sbs: std::ops::Range<usize>,
    a: &[&Q8KRow; R],
    out: &mut [[f32; PANEL_ROWS]; R],
) {
    use zinc_formats::GgmlType::*;
    // Q4_K, Q5_K and IQ4_XS share each scale over 32 weights: half the conversions.
    match ty {
        Q4_K | Q5_K => dot_k_runs::<R, 32, false>(panel, sbs, a, out),
        IQ4_XS => dot_k_runs::<R, 32, true>(panel, sbs, a, out),
        Q3_K | Q6_K => dot_k_runs::<R, 16, true>(panel, sbs, a, out),
        _ => dot_k_runs::<R, 16, false>(panel, sbs, a, out),
    }
}

/// [`dot_k`] for one shape: `RUN` is the weights that share one scale (16, or 32 where each
/// pair of sub-block scales is equal), `SIGNED` whether the panel holds signed weights
/// ([`signed_offset`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn dot_k_runs<const R: usize, const RUN: usize, const SIGNED: bool>(
    panel: *const u8,
    sbs: std::ops::Range<usize>,
    a: &[&Q8KRow; R],
    out: &mut [[f32; PANEL_ROWS]; R],
) {
    debug_assert!(RUN == 16 || RUN == 32);
    let mut total = [_mm512_setzero_ps(); R];
    let qa: [*const u8; R] = std::array::from_fn(|r| match SIGNED {
        true => a[r].biased.as_ptr(),
        false => a[r].qs.as_ptr() as *const u8,
    });
    for i in sbs {
        let sb = panel.add(i * PANEL_SB_BYTES);
        let mut sum = [_mm512_setzero_ps(); R];
        for s in 0..QK_K / RUN {
            let mut acc = [_mm512_setzero_si512(); R];
            for e in 0..RUN / 4 {
                let w = _mm512_loadu_si512(sb.add((RUN / 4 * s + e) * 64) as *const _);
                let at = i * QK_K + RUN * s + 4 * e;
                for r in 0..R {
                    let x = _mm512_set1_epi32((qa[r].add(at) as *const i32).read_unaligned());
                    acc[r] = match SIGNED {
                        true => _mm512_dpbusd_epi32(acc[r], x, w),
                        false => _mm512_dpbusd_epi32(acc[r], w, x),
                    };
                }
            }
            // The scale of the run's first 16 weights (the second's is the same).
            let scale = _mm512_loadu_ps(sb.add(QUANTS + 64 * (RUN / 16) * s) as *const f32);
            for r in 0..R {
                sum[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), scale, sum[r]);
            }
        }
        let last = _mm512_loadu_ps(sb.add(QUANTS + SCALES + MINS) as *const f32);
        if SIGNED {
            // `last` is what the activations' 128 added.
            for r in 0..R {
                let v = _mm512_sub_ps(sum[r], last);
                total[r] = _mm512_fmadd_ps(v, _mm512_set1_ps(*a[r].d.get_unchecked(i)), total[r]);
            }
            continue;
        }
        let mut mins = [_mm512_setzero_si512(); R];
        for t in 0..8 {
            let m = _mm512_loadu_si512(sb.add(QUANTS + SCALES + 64 * t) as *const _);
            for r in 0..R {
                let b = (a[r].bsums.as_ptr().add(16 * i + 2 * t) as *const i32).read_unaligned();
                mins[r] = _mm512_dpwssd_epi32(mins[r], m, _mm512_set1_epi32(b));
            }
        }
        // `last` is the rows' dmin.
        for r in 0..R {
            let v = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(mins[r]), last, sum[r]);
            total[r] = _mm512_fmadd_ps(v, _mm512_set1_ps(*a[r].d.get_unchecked(i)), total[r]);
        }
    }
    for r in 0..R {
        let o = _mm512_loadu_ps(out[r].as_ptr());
        _mm512_storeu_ps(out[r].as_mut_ptr(), _mm512_add_ps(o, total[r]));
    }
}

/// Bytes of one 32-element block of a panel: 8 runs of four weights × 16 rows, the 16 rows'
/// `d` and their minimum term `m` (f32): a row's weight is `d · q + m`.
pub const PANEL_BLOCK_BYTES: usize = 8 * 64 + 2 * 64;

/// One 32-element block of a row as 32 unsigned quants (in element order) and the factors of
/// `d · q + m`; `None` for formats that are not 32-element blocks.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn block_32(ty: GgmlType, b: &[u8]) -> Option<(__m256i, f32, f32)> {
    use zinc_formats::blocks::*;
    use zinc_formats::GgmlType::*;
    // Elements 0..16 are the low nibbles of the 16 quant bytes, 16..32 the high ones.
    let nibbles = |qs: &[u8; 16]| {
        let x = _mm_loadu_si128(qs.as_ptr() as *const __m128i);
        let m4 = _mm_set1_epi8(0xf);
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4))
    };
    // Bit j of `qh` as 16 in byte j.
    let fifth = |qh: [u8; 4]| {
        let x = _mm256_set1_epi32(i32::from_le_bytes(qh));
        #[rustfmt::skip]
        let spread = _mm256_setr_epi8(
            0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
            2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        );
        let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(x, spread), bit), bit);
        _mm256_and_si256(set, _mm256_set1_epi8(16))
    };
    let flip = _mm256_set1_epi8(-128);
    Some(match ty {
        Q4_0 => {
            let b = block_at::<BlockQ4_0>(b);
            let d = b.d.to_f32();
            (nibbles(&b.qs), d, -8.0 * d)
        }
        Q4_1 => {
            let b = block_at::<BlockQ4_1>(b);
            (nibbles(&b.qs), b.d.to_f32(), b.m.to_f32())
        }
        Q5_0 => {
            let b = block_at::<BlockQ5_0>(b);
            let d = b.d.to_f32();
            (_mm256_or_si256(nibbles(&b.qs), fifth(b.qh)), d, -16.0 * d)
        }
        Q5_1 => {
            let b = block_at::<BlockQ5_1>(b);
            (_mm256_or_si256(nibbles(&b.qs), fifth(b.qh)), b.d.to_f32(), b.m.to_f32())
        }
        Q8_0 => {
            let b = block_at::<BlockQ8_0>(b);
            let d = b.d.to_f32();
            (_mm256_xor_si256(_mm256_loadu_si256(b.qs.as_ptr() as *const __m256i), flip), d, -128.0 * d)
        }
        IQ4_NL => {
            let b = block_at::<BlockIQ4NL>(b);
            let d = b.d.to_f32();
            let values = _mm_loadu_si128(zinc_formats::dequant::IQ4_VALUES.as_ptr() as *const __m128i);
            let table = _mm256_xor_si256(_mm256_broadcastsi128_si256(values), flip);
            (_mm256_shuffle_epi8(table, nibbles(&b.qs)), d, -128.0 * d)
        }
        _ => return None,
    })
}

/// Writes one panel block of 32 elements: `rows` holds one block of `ty` for each of up to
/// sixteen weight rows (lanes past them read as zero), `blk` the panel's bytes for that block
/// (`PANEL_BLOCK_BYTES`); `false` for other formats. Transposed in registers like
/// [`fill_block_k`].
///
/// # Safety
/// The CPU has AVX-512 VNNI.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn fill_block_32(ty: GgmlType, rows: &[&[u8]], blk: &mut [u8]) -> bool {
    assert!(rows.len() <= PANEL_ROWS && blk.len() == PANEL_BLOCK_BYTES);
    let mut quants = [_mm512_setzero_si512(); PANEL_ROWS];
    let (mut d, mut m) = ([0f32; PANEL_ROWS], [0f32; PANEL_ROWS]);
    for (o, w) in rows.iter().enumerate() {
        assert_eq!(w.len(), ty.block_bytes());
        prefetch_ahead(w.as_ptr(), w.len());
        let Some((v, scale, min)) = block_32(ty, w) else { return false };
        quants[o] = _mm512_zextsi256_si512(v);
        (d[o], m[o]) = (scale, min);
    }
    transpose_16(&mut quants);
    let mut line = |at: usize, v: __m512i| _mm512_storeu_si512(blk.as_mut_ptr().add(at) as *mut _, v);
    for (run, v) in quants[..8].iter().enumerate() {
        line(run * 64, *v);
    }
    line(512, _mm512_loadu_si512(d.as_ptr() as *const _));
    line(576, _mm512_loadu_si512(m.as_ptr() as *const _));
    true
}

/// `out[r][o] += ` panel row `o` · activation row `r` over 32-element blocks `blocks`.
///
/// # Safety
/// The CPU has AVX-512 VNNI; `panel` holds at least `blocks.end` blocks and every activation
/// row at least `blocks.end` blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn dot_32<const R: usize>(
    panel: *const u8,
    blocks: std::ops::Range<usize>,
    a: &[&Q8Row; R],
    out: &mut [[f32; PANEL_ROWS]; R],
) {
    let mut sum = [_mm512_setzero_ps(); R];
    let qa: [*const u8; R] = std::array::from_fn(|r| a[r].qs.as_ptr() as *const u8);
    for k in blocks {
        let blk = panel.add(k * PANEL_BLOCK_BYTES);
        let mut acc = [_mm512_setzero_si512(); R];
        for e in 0..8 {
            let w = _mm512_loadu_si512(blk.add(64 * e) as *const _);
            for r in 0..R {
                let x = _mm512_set1_epi32((qa[r].add(32 * k + 4 * e) as *const i32).read_unaligned());
                acc[r] = _mm512_dpbusd_epi32(acc[r], w, x);
            }
        }
        let d = _mm512_loadu_ps(blk.add(512) as *const f32);
        let m = _mm512_loadu_ps(blk.add(576) as *const f32);
        for r in 0..R {
            let da = _mm512_set1_ps(*a[r].d.get_unchecked(k));
            sum[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r]), _mm512_mul_ps(d, da), sum[r]);
            sum[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(*a[r].s.get_unchecked(k)), sum[r]);
        }
    }
    for r in 0..R {
        let o = _mm512_loadu_ps(out[r].as_ptr());
        _mm512_storeu_ps(out[r].as_mut_ptr(), _mm512_add_ps(o, sum[r]));
    }
}
