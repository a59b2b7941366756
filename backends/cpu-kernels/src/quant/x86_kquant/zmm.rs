//! The K-quant and IQ4_XS loops on 512-bit registers, for CPUs with AVX-512 VNNI.
//!
//! A register holds 64 weights, two of the unpacked 32-weight chunks. `maddubs` multiplies
//! them with the activation's bytes into 16-bit pair sums, which are multiplied by their
//! sub-block's scale and added to the super-block's 32-bit sums (`dpwssd`; the compiler may
//! emit it as a multiply-add and an add, which measured no slower here): three instructions
//! per 64 weights and activation row, where the 256-bit loop spends six.
//!
//! These kernels read each weight once per pass, for decode and small batches; prompt chunks
//! take the weight panels (`quant::panel`), which share the unpackers.

// IQ4_XS decode keeps the 256-bit loop: measured 5–7% faster here than a 512-bit one.
use super::{avx2::iq4_xs_rows, prefetch_ahead, Unpacked};
use crate::quant::q8k::{Q8KRow, QK_K};
use std::arch::x86_64::*;
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
