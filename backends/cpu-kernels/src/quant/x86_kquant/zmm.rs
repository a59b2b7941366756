//! The K-quant and IQ4_XS loops on 512-bit registers, for CPUs with AVX-512 VNNI.
//!
//! A register holds 64 weights, two of the unpacked 32-weight chunks. `maddubs` multiplies
//! them with the activation's bytes into 16-bit pair sums, which are multiplied by their
//! sub-block's scale and added to the super-block's 32-bit sums (`dpwssd`; the compiler may
//! emit it as a multiply-add and an add, which measured no slower here): three instructions
//! per 64 weights and activation row, where the 256-bit loop spends six.
//!
//! Decode reads each weight once (`dot_rows`). Prompt chunks unpack a tile of weight rows
//! once (`unpack_row`, `quant::unpacked`) and meet it with many activation rows
//! (`unpacked_eight`, `unpacked_rows`).

use super::{Unpacked, PREFETCH_AHEAD};
use crate::quant::q8k::{Q8KRow, QK_K};
use std::{arch::x86_64::*, mem::size_of};
use zinc_formats::GgmlType;

k_family!("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni");

/// For each 16-bit lane of a `maddubs` result over 64 weights, the 16-weight sub-block its
/// pair of weights belongs to (relative to the group's first).
const LANE_SUB_BLOCK: [i16; 32] = {
    let mut t = [0i16; 32];
    let mut l = 0;
    while l < 32 {
        t[l] = (l / 8) as i16;
        l += 1;
    }
    t
};

/// The scales of 64-weight group `g` (sub-blocks `4g..4g+4`), one per 16-bit lane as
/// `dpwssd` pairs them.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn group_scales(scales: __m256i, g: usize) -> __m512i {
    let lanes = _mm512_loadu_si512(LANE_SUB_BLOCK.as_ptr() as *const _);
    let idx = _mm512_add_epi16(lanes, _mm512_set1_epi16(4 * g as i16));
    _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(scales))
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn load64(p: *const u8) -> __m512i {
    _mm512_loadu_si512(p as *const _)
}

/// One row of K-quant super-blocks (`size` bytes each, unpacked by `unpack`) · R rows.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn rows<const R: usize>(
    w: &[u8],
    size: usize,
    unpack: impl Fn(*const u8) -> Unpacked,
    a: &[&Q8KRow; R],
    out: &mut [f32; R],
) {
    let mut acc = [_mm512_setzero_ps(); R];
    let qa: [*const u8; R] = std::array::from_fn(|r| a[r].qs.as_ptr() as *const u8);
    let bs: [*const u8; R] = std::array::from_fn(|r| a[r].bsums.as_ptr() as *const u8);
    let da: [*const f32; R] = std::array::from_fn(|r| a[r].d.as_ptr());
    for (i, b) in w.chunks_exact(size).enumerate() {
        let next = b.as_ptr().wrapping_add(PREFETCH_AHEAD);
        for line in (0..size).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line) as *const i8);
        }
        let u = unpack(b.as_ptr());
        let mut sums = [_mm512_setzero_si512(); R];
        for g in 0..4 {
            let q = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(u.q[2 * g]), u.q[2 * g + 1]);
            let sc = group_scales(u.scales, g);
            for r in 0..R {
                let p = _mm512_maddubs_epi16(q, load64(qa[r].add(i * QK_K + 64 * g)));
                sums[r] = _mm512_dpwssd_epi32(sums[r], p, sc);
            }
        }
        for r in 0..R {
            let mins = _mm256_madd_epi16(u.mins, load(bs[r].add(32 * i)));
            let d = *da[r].add(i);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]), _mm512_set1_ps(u.d * d), acc[r]);
            let mins = _mm512_cvtepi32_ps(_mm512_zextsi256_si512(mins));
            acc[r] = _mm512_fnmadd_ps(mins, _mm512_set1_ps(u.dmin * d), acc[r]);
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
}

/// 16-bit lane shifts that bring 64 IQ4_XS indices to the low nibbles: each 128-bit lane
/// holds 16 quant bytes, the low nibbles (elements 0..16 of a sub-block) in lanes 0 and 2,
/// the high ones (elements 16..32) in lanes 1 and 3.
const NIBBLE_SHIFTS: [u16; 32] = {
    let mut t = [0u16; 32];
    let mut l = 0;
    while l < 32 {
        t[l] = if (l / 8) % 2 == 1 { 4 } else { 0 };
        l += 1;
    }
    t
};

/// IQ4_XS row · R super-block activation rows, two 32-element sub-blocks per register. Its
/// values are signed table entries (−127..113): `maddubs` takes their magnitudes, and the
/// activation is negated where the weight is negative (|a| ≤ 127, so the pair sums stay
/// within 16 bits).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn iq4_xs_rows<const R: usize>(w: &[u8], a: &[&Q8KRow; R], out: &mut [f32; R]) {
    use zinc_formats::blocks::{as_blocks, BlockIQ4XS};
    let mut acc = [_mm512_setzero_ps(); R];
    let qa: [*const u8; R] = std::array::from_fn(|r| a[r].qs.as_ptr() as *const u8);
    let da: [*const f32; R] = std::array::from_fn(|r| a[r].d.as_ptr());
    let table = _mm512_broadcast_i32x4(_mm_loadu_si128(zinc_formats::dequant::IQ4_VALUES.as_ptr() as *const __m128i));
    let shifts = _mm512_loadu_si512(NIBBLE_SHIFTS.as_ptr() as *const _);
    let m4 = _mm512_set1_epi8(0xf);
    for (i, b) in as_blocks::<BlockIQ4XS>(w).expect("whole super-blocks").iter().enumerate() {
        let next = (b as *const BlockIQ4XS as *const u8).wrapping_add(PREFETCH_AHEAD);
        for line in (0..size_of::<BlockIQ4XS>()).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line) as *const i8);
        }
        let mut sums = [_mm512_setzero_si512(); R];
        for pair in 0..4 {
            // Sub-blocks 2·pair and 2·pair + 1: their 16 quant bytes each, every byte twice.
            let x = _mm512_castsi256_si512(_mm256_loadu_si256(b.qs.as_ptr().add(32 * pair) as *const __m256i));
            let x = _mm512_shuffle_i64x2::<0b0101_0000>(x, x);
            let idx = _mm512_and_si512(_mm512_srlv_epi16(x, shifts), m4);
            let v = _mm512_shuffle_epi8(table, idx);
            let magnitude = _mm512_abs_epi8(v);
            let negative = _mm512_movepi8_mask(v);
            let scale = _mm512_mask_blend_epi16(
                0xffff_0000,
                _mm512_set1_epi16(b.scale(2 * pair) as i16),
                _mm512_set1_epi16(b.scale(2 * pair + 1) as i16),
            );
            for r in 0..R {
                let act = load64(qa[r].add(i * QK_K + 64 * pair));
                let signed = _mm512_mask_sub_epi8(act, negative, _mm512_setzero_si512(), act);
                sums[r] = _mm512_dpwssd_epi32(sums[r], _mm512_maddubs_epi16(magnitude, signed), scale);
            }
        }
        let d = b.d.to_f32();
        for r in 0..R {
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]), _mm512_set1_ps(d * *da[r].add(i)), acc[r]);
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
}

/// Bytes one super-block takes once unpacked for a prompt tile ([`unpack_row`]): 256 weights
/// (a byte each, the first at a cache line's start), sixteen 16-bit scales, `d` as f32, and
/// in the last cache line the sixteen minimums as floats already multiplied by `dmin`.
pub const UNPACKED_BYTES: usize = 384;
const SCALES_AT: usize = 256;
const D_AT: usize = 288;
const MINS_AT: usize = 320;

/// Stores one unpacked super-block at `o`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn store(u: &Unpacked, o: *mut u8) {
    for (c, q) in u.q.iter().enumerate() {
        _mm256_storeu_si256(o.add(32 * c) as *mut __m256i, *q);
    }
    _mm256_storeu_si256(o.add(SCALES_AT) as *mut __m256i, u.scales);
    (o.add(D_AT) as *mut f32).write_unaligned(u.d);
    let mins = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(u.mins));
    _mm512_storeu_ps(o.add(MINS_AT) as *mut f32, _mm512_mul_ps(mins, _mm512_set1_ps(u.dmin)));
}

/// An IQ4_XS super-block unpacked: its table values as signed bytes, each 32-element
/// sub-block's scale on both of its 16-element halves, no minimums.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
unsafe fn iq4_xs(b: &zinc_formats::blocks::BlockIQ4XS) -> Unpacked {
    let table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(zinc_formats::dequant::IQ4_VALUES.as_ptr() as *const __m128i));
    let m4 = _mm_set1_epi8(0xf);
    let q = std::array::from_fn(|ib| {
        let x = _mm_loadu_si128(b.qs.as_ptr().add(16 * ib) as *const __m128i);
        let idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
        _mm256_shuffle_epi8(table, idx)
    });
    let s: [i16; 16] = std::array::from_fn(|j| b.scale(j / 2) as i16);
    let scales = _mm256_loadu_si256(s.as_ptr() as *const __m256i);
    Unpacked { q, scales, mins: _mm256_setzero_si256(), d: b.d.to_f32(), dmin: 0.0 }
}

/// Unpacks weight row `w` of type `ty` to `dst`, [`UNPACKED_BYTES`] per super-block; `false`
/// for types without an unpacker.
///
/// # Safety
/// The CPU has AVX-512 VNNI; `dst` has room for the row's super-blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn unpack_row(ty: GgmlType, w: &[u8], dst: *mut u8) -> bool {
    use zinc_formats::GgmlType::*;
    let each = |size: usize, unpack: &dyn Fn(*const u8) -> Unpacked| {
        for (i, b) in w.chunks_exact(size).enumerate() {
            store(&unpack(b.as_ptr()), dst.add(i * UNPACKED_BYTES));
        }
    };
    match ty {
        Q2_K => each(Q2_K.block_bytes(), &|p| q2_k(p)),
        Q3_K => each(Q3_K.block_bytes(), &|p| q3_k(p)),
        Q4_K => each(Q4_K.block_bytes(), &|p| q4_k(p)),
        Q5_K => each(Q5_K.block_bytes(), &|p| q5_k(p)),
        Q6_K => each(Q6_K.block_bytes(), &|p| q6_k(p)),
        IQ4_XS => {
            let blocks =
                zinc_formats::blocks::as_blocks::<zinc_formats::blocks::BlockIQ4XS>(w).expect("whole super-blocks");
            for (i, b) in blocks.iter().enumerate() {
                store(&iq4_xs(b), dst.add(i * UNPACKED_BYTES));
            }
        }
        _ => return false,
    }
    true
}

/// An unpacked row at `u` · R activation rows over super-blocks `sbs`, one row at a time
/// (IQ4_XS, and the rows a prompt chunk has beyond its groups of eight). `SIGNED` rows
/// (IQ4_XS) hold signed weights: `maddubs` takes their magnitudes and the activation their
/// signs.
///
/// # Safety
/// The CPU has AVX-512 VNNI; `u` holds at least `sbs.end` unpacked super-blocks and every
/// activation row at least `sbs.end` super-blocks.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn unpacked_rows<const SIGNED: bool, const R: usize>(
    u: *const u8,
    sbs: std::ops::Range<usize>,
    a: &[&Q8KRow; R],
    out: &mut [f32; R],
) {
    let mut acc = [_mm512_setzero_ps(); R];
    let qa: [*const u8; R] = std::array::from_fn(|r| a[r].qs.as_ptr() as *const u8);
    for i in sbs {
        let p = u.add(i * UNPACKED_BYTES);
        let scales = load(p.add(SCALES_AT));
        let mut sums = [_mm512_setzero_si512(); R];
        for g in 0..4 {
            let q = load64(p.add(64 * g));
            let sc = group_scales(scales, g);
            if SIGNED {
                let (magnitude, negative) = (_mm512_abs_epi8(q), _mm512_movepi8_mask(q));
                for r in 0..R {
                    let act = load64(qa[r].add(i * QK_K + 64 * g));
                    let signed = _mm512_mask_sub_epi8(act, negative, _mm512_setzero_si512(), act);
                    sums[r] = _mm512_dpwssd_epi32(sums[r], _mm512_maddubs_epi16(magnitude, signed), sc);
                }
            } else {
                for r in 0..R {
                    let prod = _mm512_maddubs_epi16(q, load64(qa[r].add(i * QK_K + 64 * g)));
                    sums[r] = _mm512_dpwssd_epi32(sums[r], prod, sc);
                }
            }
        }
        let d = (p.add(D_AT) as *const f32).read_unaligned();
        for r in 0..R {
            let da = *a[r].d.get_unchecked(i);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[r]), _mm512_set1_ps(d * da), acc[r]);
            if !SIGNED {
                let bsums = _mm512_cvtepi16_epi32(load(a[r].bsums.as_ptr().add(16 * i) as *const u8));
                let mins = _mm512_mul_ps(_mm512_loadu_ps(p.add(MINS_AT) as *const f32), _mm512_set1_ps(da));
                acc[r] = _mm512_fnmadd_ps(mins, _mm512_cvtepi32_ps(bsums), acc[r]);
            }
        }
    }
    for r in 0..R {
        out[r] = _mm512_reduce_add_ps(acc[r]);
    }
}

/// Floats per super-block that [`unpacked_eight`] reads beside eight activation rows
/// ([`eight_factors`]): for each pair of rows its scale in the kernel's lane order (16), then
/// for each row its per-16 sums times its scale (16).
pub const EIGHT_FACTORS: usize = 4 * 16 + 8 * 16;

/// Fills `f` with [`EIGHT_FACTORS`] floats per super-block of the eight rows `a`.
pub fn eight_factors(a: &[&Q8KRow; 8], n_sb: usize, f: &mut Vec<f32>) {
    f.clear();
    for i in 0..n_sb {
        for k in 0..4 {
            // Lanes 4j, 4j + 1 of the paired sums belong to row 2k, lanes 4j + 2, 4j + 3 to 2k + 1.
            f.extend((0..16).map(|l| a[2 * k + (l % 4) / 2].d[i]));
        }
        for row in a {
            f.extend(row.bsums[16 * i..16 * i + 16].iter().map(|&s| s as f32 * row.d[i]));
        }
    }
}

/// An unpacked row of unsigned K-quant super-blocks · eight activation rows, two at a time:
/// VNNI's `dpbusd` sums four weight × activation products into 32-bit lanes (at most
/// 4 · 63 · 127, so they fit 16 bits), `packs` puts two rows' lanes in one register, and one
/// `dpwssd` applies the scales to both: three multiplies per 64 weights and two rows where
/// [`unpacked_rows`] spends four. Each 128-bit lane of a group covers one 16-weight
/// sub-block, so the scales are `group_scales`'s; the 32-bit sums alternate between the two
/// rows in pairs of lanes. The activation scales and minimum sums come ready in `factors`
/// ([`eight_factors`]). Only super-blocks `sbs` are summed, so that a caller can keep the
/// activations it walks within the L1 cache.
///
/// # Safety
/// As [`unpacked_rows`]; `factors` holds [`EIGHT_FACTORS`] floats
/// per super-block.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn unpacked_eight(
    u: *const u8,
    sbs: std::ops::Range<usize>,
    a: &[&Q8KRow; 8],
    factors: *const f32,
    out: &mut [f32; 8],
) {
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut acc_min = [_mm512_setzero_ps(); 8];
    let qa: [*const u8; 8] = std::array::from_fn(|r| a[r].qs.as_ptr() as *const u8);
    let zero = _mm512_setzero_si512();
    for i in sbs {
        let p = u.add(i * UNPACKED_BYTES);
        let f = factors.add(i * EIGHT_FACTORS);
        let scales = load(p.add(SCALES_AT));
        let mut sums = [_mm512_setzero_si512(); 4];
        for g in 0..4 {
            let q = load64(p.add(64 * g));
            let sc = group_scales(scales, g);
            let at = i * QK_K + 64 * g;
            for k in 0..4 {
                let d0 = _mm512_dpbusd_epi32(zero, q, load64(qa[2 * k].add(at)));
                let d1 = _mm512_dpbusd_epi32(zero, q, load64(qa[2 * k + 1].add(at)));
                sums[k] = _mm512_dpwssd_epi32(sums[k], _mm512_packs_epi32(d0, d1), sc);
            }
        }
        let d = _mm512_set1_ps((p.add(D_AT) as *const f32).read_unaligned());
        let mins = _mm512_loadu_ps(p.add(MINS_AT) as *const f32);
        for k in 0..4 {
            let scale = _mm512_mul_ps(d, _mm512_loadu_ps(f.add(16 * k)));
            acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums[k]), scale, acc[k]);
        }
        for r in 0..8 {
            acc_min[r] = _mm512_fmadd_ps(mins, _mm512_loadu_ps(f.add(64 + 16 * r)), acc_min[r]);
        }
    }
    for k in 0..4 {
        out[2 * k] = _mm512_mask_reduce_add_ps(0x3333, acc[k]) - _mm512_reduce_add_ps(acc_min[2 * k]);
        out[2 * k + 1] = _mm512_mask_reduce_add_ps(0xcccc, acc[k]) - _mm512_reduce_add_ps(acc_min[2 * k + 1]);
    }
}
