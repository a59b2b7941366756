//! x86-64 kernels for K-quant rows (Q2_K to Q6_K) and IQ4_XS rows against up to eight 8-bit
//! super-block activation rows ([`Q8KRow`]); each weight super-block is unpacked once per pass.
//!
//! Every format unpacks a super-block into the shape [`super::kquant`] describes: eight
//! vectors of 32 unsigned weights, sixteen 16-bit scales and sixteen 16-bit minimums (the
//! fixed offsets of Q3_K and Q6_K become minimums of `offset · scale`). One shared loop then
//! sums `maddubs` (u8 × i8 pairs) weighted by the scales with `madd`, in 32-bit integers per
//! super-block, and takes the minimums off with the activation's per-16 sums.
//!
//! Two families share the unpackers (`k_family!`): [`avx2`] (AVX2 + FMA + F16C, 256-bit
//! loops) and [`zmm`] (AVX-512 VNNI, the same loop on 512-bit registers; IQ4_XS keeps the
//! 256-bit loop there). Both serve decode and small batches; prompt chunks take the weight
//! panels (`quant::panel`).

use super::q8k::{Q8KRow, QK_K};
use std::{arch::x86_64::*, mem::size_of};
use zinc_formats::GgmlType;

/// Bytes ahead of the current super-block that the kernels prefetch: a few super-blocks, far
/// enough that one row's decode, a stream from memory, does not wait on each line (measured
/// in docs/measurements/kquants-2026-12-04/).
const PREFETCH_AHEAD: usize = 1024;

/// Asks for the cache lines of the `size`-byte block [`PREFETCH_AHEAD`] bytes past `block`:
/// the weights stream from memory once per pass (past a row's end the hint is harmless).
#[inline(always)]
pub(crate) fn prefetch_ahead(block: *const u8, size: usize) {
    prefetch_at(block, size, PREFETCH_AHEAD);
}

/// Asks for the cache lines of the `size`-byte block `ahead` bytes past `block`.
#[inline(always)]
pub(crate) fn prefetch_at(block: *const u8, size: usize, ahead: usize) {
    let next = block.wrapping_add(ahead);
    for line in (0..size).step_by(64) {
        // SAFETY: a prefetch is a hint; it never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line) as *const i8) };
    }
}

/// A K-quant super-block unpacked for the shared loop.
pub(crate) struct Unpacked {
    /// 32 unsigned weights per vector, elements `32c..32c+32` in vector `c`.
    pub q: [__m256i; 8],
    /// Scale per 16 elements, as 16-bit lanes.
    pub scales: __m256i,
    /// Minimum per 16 elements, as 16-bit lanes.
    pub mins: __m256i,
    /// Factor of the scales.
    pub d: f32,
    /// Factor of the minimums.
    pub dmin: f32,
}

/// The unpackers and the per-type dispatch of one kernel family, compiled for `$feature`; the
/// module that expands it defines or imports `rows` (a K-quant row · R rows over an
/// unpacker) and `iq4_xs_rows`.
macro_rules! k_family {
    ($feature:literal) => {
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn f16(p: *const u8) -> f32 {
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128((p as *const u16).read_unaligned() as i32)))
        }

        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn load(p: *const u8) -> __m256i {
            _mm256_loadu_si256(p as *const __m256i)
        }

        /// Bytes shifted right by `s` bits (within each byte), masked with `mask`.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn bits(x: __m256i, s: i32, mask: i8) -> __m256i {
            _mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(s)), _mm256_set1_epi8(mask))
        }

        /// Sixteen 8-bit values at `p` as 16-bit lanes, signed or not.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn widen(x: __m128i, signed: bool) -> __m256i {
            if signed {
                _mm256_cvtepi8_epi16(x)
            } else {
                _mm256_cvtepu8_epi16(x)
            }
        }

        /// Eight values in the low bytes of `x`, each repeated twice, as 16-bit lanes.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn doubled(x: __m128i) -> __m256i {
            let w = _mm_cvtepu8_epi16(x);
            _mm256_set_m128i(_mm_unpackhi_epi16(w, w), _mm_unpacklo_epi16(w, w))
        }

        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn q2_k(p: *const u8) -> Unpacked {
            let sc = _mm_loadu_si128(p as *const __m128i);
            let m4 = _mm_set1_epi8(0xf);
            let mut q = [_mm256_setzero_si256(); 8];
            for n in 0..2 {
                let x = load(p.add(16 + 32 * n));
                for s in 0..4 {
                    q[4 * n + s] = bits(x, 2 * s as i32, 3);
                }
            }
            Unpacked {
                q,
                scales: widen(_mm_and_si128(sc, m4), false),
                mins: widen(_mm_and_si128(_mm_srli_epi16(sc, 4), m4), false),
                d: f16(p.add(80)),
                dmin: f16(p.add(82)),
            }
        }

        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn q3_k(p: *const u8) -> Unpacked {
            let hmask = load(p);
            let mut q = [_mm256_setzero_si256(); 8];
            for n in 0..2 {
                let x = load(p.add(32 + 32 * n));
                for s in 0..4 {
                    let high = bits(hmask, (4 * n + s) as i32, 1);
                    q[4 * n + s] = _mm256_or_si256(bits(x, 2 * s as i32, 3), _mm256_slli_epi16(high, 2));
                }
            }
            // Sixteen 6-bit scales: low nibbles in bytes 0..8, two high bits each in 8..12.
            let w = |i: usize| (p.add(96 + 4 * i) as *const u32).read_unaligned();
            let (a0, a1, hi) = (w(0), w(1), w(2));
            let (lo4, hi2) = (0x0f0f_0f0fu32, 0x0303_0303u32);
            let words = [
                (a0 & lo4) | ((hi & hi2) << 4),
                (a1 & lo4) | (((hi >> 2) & hi2) << 4),
                ((a0 >> 4) & lo4) | (((hi >> 4) & hi2) << 4),
                ((a1 >> 4) & lo4) | (((hi >> 6) & hi2) << 4),
            ];
            let raw = _mm_setr_epi32(words[0] as i32, words[1] as i32, words[2] as i32, words[3] as i32);
            let scales = widen(_mm_sub_epi8(raw, _mm_set1_epi8(32)), true);
            // q − 4 with q in 0..8: the offset is a minimum of 4 · scale.
            Unpacked { q, scales, mins: _mm256_slli_epi16(scales, 2), d: f16(p.add(108)), dmin: f16(p.add(108)) }
        }

        /// Q4_K and Q5_K's eight 6-bit scales and minimums from their 12 bytes at `p`.
        #[inline]
        #[target_feature(enable = $feature)]
        unsafe fn scales_mins_k4(p: *const u8) -> (__m256i, __m256i) {
            let w = |i: usize| (p.add(4 * i) as *const u32).read_unaligned();
            let (u0, u1, u2) = (w(0), w(1), w(2));
            let (lo6, lo4, hi2) = (0x3f3f_3f3fu32, 0x0f0f_0f0fu32, 0x0303_0303u32);
            let sc_lo = u0 & lo6;
            let sc_hi = (u2 & lo4) | (((u0 >> 6) & hi2) << 4);
            let m_lo = u1 & lo6;
            let m_hi = ((u2 >> 4) & lo4) | (((u1 >> 6) & hi2) << 4);
            let sc = _mm_setr_epi32(sc_lo as i32, sc_hi as i32, 0, 0);
            let m = _mm_setr_epi32(m_lo as i32, m_hi as i32, 0, 0);
            (doubled(sc), doubled(m))
        }

        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn q4_k(p: *const u8) -> Unpacked {
            let (scales, mins) = scales_mins_k4(p.add(4));
            let mut q = [_mm256_setzero_si256(); 8];
            for k in 0..4 {
                let x = load(p.add(16 + 32 * k));
                q[2 * k] = bits(x, 0, 0xf);
                q[2 * k + 1] = bits(x, 4, 0xf);
            }
            Unpacked { q, scales, mins, d: f16(p), dmin: f16(p.add(2)) }
        }

        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn q5_k(p: *const u8) -> Unpacked {
            let (scales, mins) = scales_mins_k4(p.add(4));
            let qh = load(p.add(16));
            let mut q = [_mm256_setzero_si256(); 8];
            for k in 0..4 {
                let x = load(p.add(48 + 32 * k));
                let h0 = _mm256_slli_epi16(bits(qh, 2 * k as i32, 1), 4);
                let h1 = _mm256_slli_epi16(bits(qh, 2 * k as i32 + 1, 1), 4);
                q[2 * k] = _mm256_or_si256(bits(x, 0, 0xf), h0);
                q[2 * k + 1] = _mm256_or_si256(bits(x, 4, 0xf), h1);
            }
            Unpacked { q, scales, mins, d: f16(p), dmin: f16(p.add(2)) }
        }

        #[inline]
        #[target_feature(enable = $feature)]
        pub(crate) unsafe fn q6_k(p: *const u8) -> Unpacked {
            let mut q = [_mm256_setzero_si256(); 8];
            for n in 0..2 {
                let (l0, l1) = (load(p.add(64 * n)), load(p.add(64 * n + 32)));
                let h = load(p.add(128 + 32 * n));
                let hi = |s: i32| _mm256_slli_epi16(bits(h, s, 3), 4);
                q[4 * n] = _mm256_or_si256(bits(l0, 0, 0xf), hi(0));
                q[4 * n + 1] = _mm256_or_si256(bits(l1, 0, 0xf), hi(2));
                q[4 * n + 2] = _mm256_or_si256(bits(l0, 4, 0xf), hi(4));
                q[4 * n + 3] = _mm256_or_si256(bits(l1, 4, 0xf), hi(6));
            }
            let scales = widen(_mm_loadu_si128(p.add(192) as *const __m128i), true);
            // q − 32 with q in 0..64: the offset is a minimum of 32 · scale.
            Unpacked { q, scales, mins: _mm256_slli_epi16(scales, 5), d: f16(p.add(208)), dmin: f16(p.add(208)) }
        }

        /// K-quant row of type `ty` · R activation rows; `false` for other types.
        ///
        /// # Safety
        /// The CPU has this family's features; every activation row is at least as long as
        /// the weight row.
        #[target_feature(enable = $feature)]
        pub unsafe fn dot_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Q8KRow; R], out: &mut [f32; R]) -> bool {
            use zinc_formats::GgmlType::*;
            match ty {
                Q2_K => rows(w, Q2_K.block_bytes(), |p| q2_k(p), a, out),
                Q3_K => rows(w, Q3_K.block_bytes(), |p| q3_k(p), a, out),
                Q4_K => rows(w, Q4_K.block_bytes(), |p| q4_k(p), a, out),
                Q5_K => rows(w, Q5_K.block_bytes(), |p| q5_k(p), a, out),
                Q6_K => rows(w, Q6_K.block_bytes(), |p| q6_k(p), a, out),
                IQ4_XS => iq4_xs_rows(w, a, out),
                _ => return false,
            }
            true
        }
    };
}

/// The 256-bit family: AVX2, FMA and F16C.
pub mod avx2 {
    use super::*;

    k_family!("avx2,fma,f16c");

    /// The scales of chunk `c` (elements `32c..32c+32`): sub-block `2c`'s scale in the
    /// low eight 16-bit lanes, `2c + 1`'s in the high eight, as `madd` pairs them.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn chunk_scales(scales: __m256i, c: i32) -> __m256i {
        let pair = _mm256_permutevar8x32_epi32(scales, _mm256_set1_epi32(c));
        #[rustfmt::skip]
        let pick = _mm256_setr_epi8(
            0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
            2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
        );
        _mm256_shuffle_epi8(pair, pick)
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// One row of K-quant super-blocks (`size` bytes each, unpacked by `unpack`) · R rows.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows<const R: usize>(
        w: &[u8],
        size: usize,
        unpack: impl Fn(*const u8) -> Unpacked,
        a: &[&Q8KRow; R],
        out: &mut [f32; R],
    ) {
        let mut acc = [_mm256_setzero_ps(); R];
        // Each activation row's values, scales and per-16 sums, read without going
        // through its Vecs in the loop.
        let qa: [*const u8; R] = std::array::from_fn(|r| a[r].qs.as_ptr() as *const u8);
        let bs: [*const u8; R] = std::array::from_fn(|r| a[r].bsums.as_ptr() as *const u8);
        let da: [*const f32; R] = std::array::from_fn(|r| a[r].d.as_ptr());
        for (i, b) in w.chunks_exact(size).enumerate() {
            prefetch_ahead(b.as_ptr(), size);
            let u = unpack(b.as_ptr());
            // Chunk by chunk, every row: one chunk's weights and scales are live at a
            // time, so more rows fit the registers.
            let mut sums = [_mm256_setzero_si256(); R];
            for c in 0..8 {
                let sc = chunk_scales(u.scales, c as i32);
                for r in 0..R {
                    let p = _mm256_maddubs_epi16(u.q[c], load(qa[r].add(i * QK_K + 32 * c)));
                    sums[r] = _mm256_add_epi32(sums[r], _mm256_madd_epi16(p, sc));
                }
            }
            for r in 0..R {
                let mins = _mm256_madd_epi16(u.mins, load(bs[r].add(32 * i)));
                let d = *da[r].add(i);
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r]), _mm256_set1_ps(u.d * d), acc[r]);
                acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(u.dmin * d), acc[r]);
            }
        }
        for r in 0..R {
            out[r] = hsum(acc[r]);
        }
    }

    /// IQ4_XS row · R super-block activation rows. Its values are signed table entries
    /// (−127..113), so each product takes the weight's sign onto the activation
    /// (`maddubs` of |w| and ±a cannot saturate: 2 · 127 · 127 < 2¹⁵), then the
    /// sub-block's signed 6-bit scale as a `madd`, summed in 32-bit integers per
    /// super-block and converted to float once.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn iq4_xs_rows<const R: usize>(w: &[u8], a: &[&Q8KRow; R], out: &mut [f32; R]) {
        use zinc_formats::blocks::{as_blocks, BlockIQ4XS};
        let mut acc = [_mm256_setzero_ps(); R];
        let qa: [*const u8; R] = std::array::from_fn(|r| a[r].qs.as_ptr() as *const u8);
        let da: [*const f32; R] = std::array::from_fn(|r| a[r].d.as_ptr());
        let table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(zinc_formats::dequant::IQ4_VALUES.as_ptr() as *const __m128i));
        let m4 = _mm_set1_epi8(0xf);
        for (i, b) in as_blocks::<BlockIQ4XS>(w).expect("whole super-blocks").iter().enumerate() {
            prefetch_ahead(b as *const BlockIQ4XS as *const u8, size_of::<BlockIQ4XS>());
            let mut sums = [_mm256_setzero_si256(); R];
            for ib in 0..8 {
                // Elements 0..16 are the low nibbles, 16..32 the high ones.
                let x = _mm_loadu_si128(b.qs.as_ptr().add(16 * ib) as *const __m128i);
                let idx = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), m4), _mm_and_si128(x, m4));
                let v = _mm256_shuffle_epi8(table, idx);
                let magnitude = _mm256_sign_epi8(v, v);
                let scale = _mm256_set1_epi16(b.scale(ib) as i16);
                for r in 0..R {
                    let signed = _mm256_sign_epi8(load(qa[r].add(i * QK_K + 32 * ib)), v);
                    let p = _mm256_maddubs_epi16(magnitude, signed);
                    sums[r] = _mm256_add_epi32(sums[r], _mm256_madd_epi16(p, scale));
                }
            }
            let d = b.d.to_f32();
            for r in 0..R {
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[r]), _mm256_set1_ps(d * *da[r].add(i)), acc[r]);
            }
        }
        for r in 0..R {
            out[r] = hsum(acc[r]);
        }
    }
}

/// The 512-bit family: AVX-512 VNNI.
pub mod zmm;

/// Dispatches one K-quant row against R rows to the best kernel; `false` when this type or
/// CPU has none (the caller then uses the plain version).
#[inline]
pub fn dot_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Q8KRow; R], out: &mut [f32; R]) -> bool {
    use super::x86::{level, Level};
    // SAFETY: `level` checked the features each family is compiled for.
    unsafe {
        match level() {
            Some(Level::Avx512Vnni) => zmm::dot_rows(ty, w, a, out),
            Some(Level::Avx2) => avx2::dot_rows(ty, w, a, out),
            None => false,
        }
    }
}
