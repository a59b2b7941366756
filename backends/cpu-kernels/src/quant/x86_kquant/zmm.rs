//! The K-quant and IQ4_XS loops on 512-bit registers, for CPUs with AVX-512 VNNI.
//!
//! A register holds 64 weights, two of the unpacked 32-weight chunks. `maddubs` multiplies
//! them with the activation's bytes into 16-bit pair sums, which are multiplied by their
//! sub-block's scale and added to the super-block's 32-bit sums (`dpwssd`; the compiler may
//! emit it as a multiply-add and an add, which measured no slower here): three instructions
//! per 64 weights and activation row, where the 256-bit loop spends six.
//!
//! These kernels read each weight once per pass, for decode and small batches; prompt chunks
//! take the panel layout ([`super::panel`]), which shares the unpackers.

use super::{prefetch_ahead, Unpacked};
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
        prefetch_ahead(b.as_ptr(), size);
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
        prefetch_ahead(b as *const BlockIQ4XS as *const u8, size_of::<BlockIQ4XS>());
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
