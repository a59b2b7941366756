//! x86-64 kernels for the four-row interleaved layout ([`super::packed`]): one pass over a
//! group's blocks yields four weight rows · R activation rows.
//!
//! Two 256-bit halves carry rows 0–1 and 2–3; in each, a 128-bit lane is one row's 16 quants
//! against the activation's matching 16 values broadcast to both lanes, so an integer
//! multiply-add leaves four partial sums per row and one f16 conversion plus two permutes
//! give every lane its row's scale. Same two instruction-set levels as [`super::x86`].

use super::{
    packed::{PackedKind, GROUP},
    q8::Q8Row,
    x86::{level, Level},
    x86_kquant::prefetch_at,
};
use std::arch::x86_64::*;

/// Bytes ahead of the current group block that the kernels prefetch: a decode reads each
/// weight once, a stream from memory, and the hardware prefetcher alone leaves it waiting.
const PREFETCH_AHEAD: usize = 2048;

macro_rules! packed_kernels {
    ($feature:literal, $mod:ident, |$u:ident, $s:ident| $sum1:expr, |$u1:ident, $s1:ident, $u2:ident, $s2:ident| $sum2:expr) => {
        /// Kernels for one instruction-set level.
        pub mod $mod {
            use super::*;

            /// Σ u8 × i8 over 4-byte groups, as i32 lanes.
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn sum1($u: __m256i, $s: __m256i) -> __m256i {
                $sum1
            }

            /// Σ u1 × s1 + u2 × s2 for 4-bit `u` (the sums stay within 16 bits on every level).
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn sum2_small($u1: __m256i, $s1: __m256i, $u2: __m256i, $s2: __m256i) -> __m256i {
                $sum2
            }

            /// Σ of signed bytes `w` × `a`, as i32 lanes (|w| times a with w's sign).
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn signed(w: __m256i, a: __m256i) -> __m256i {
                sum1(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w))
            }

            /// 0x10 in byte `e` of each 128-bit lane where bit `e` (bit `16 + e` for `high`) of
            /// the lane's repeated 32-bit word is set.
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn fifth_bits(words: __m256i, high: bool) -> __m256i {
                let (b0, b1) = if high { (2, 3) } else { (0, 1) };
                let pick = _mm256_setr_epi8(
                    b0, b0, b0, b0, b0, b0, b0, b0, b1, b1, b1, b1, b1, b1, b1, b1, b0, b0, b0, b0, b0, b0, b0, b0, b1,
                    b1, b1, b1, b1, b1, b1, b1,
                );
                let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(words, pick), bit), bit);
                _mm256_and_si256(set, _mm256_set1_epi8(0x10))
            }

            /// One group: `out[r][j]` = row j · `a[r]`. `g` holds `blocks` group blocks of
            /// bytes (`BYTES`), nibbles, or nibbles with fifth bits (`FIFTH`).
            ///
            /// # Safety
            /// The CPU has this family's features, and `g` and every activation row hold
            /// `blocks` blocks (`Packed::check_lengths`).
            #[target_feature(enable = $feature)]
            pub unsafe fn group<const BYTES: bool, const FIFTH: bool, const R: usize>(
                g: &[u8],
                blocks: usize,
                min_scale: f32,
                a: &[&Q8Row; R],
                out: &mut [[f32; GROUP]; R],
            ) {
                let gb = if BYTES {
                    136
                } else if FIFTH {
                    96
                } else {
                    80
                };
                debug_assert!(g.len() >= blocks * gb);
                let mut acc01 = [_mm256_setzero_ps(); R];
                let mut acc23 = [_mm256_setzero_ps(); R];
                let mask = _mm256_set1_epi8(0x0f);
                let i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
                let i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
                for k in 0..blocks {
                    let p = g.as_ptr().add(k * gb);
                    // One line more than the block: blocks are not line-aligned.
                    prefetch_at(p, gb + 63, PREFETCH_AHEAD);
                    let ld = |o: usize| _mm256_loadu_si256(p.add(o) as *const __m256i);
                    let (lo01, lo23, hi01, hi23, sc);
                    if BYTES {
                        (lo01, lo23, hi01, hi23) = (ld(0), ld(32), ld(64), ld(96));
                        sc = _mm256_cvtph_ps(_mm_loadl_epi64(p.add(128) as *const __m128i));
                    } else {
                        let (x01, x23) = (ld(0), ld(32));
                        lo01 = _mm256_and_si256(x01, mask);
                        lo23 = _mm256_and_si256(x23, mask);
                        hi01 = _mm256_and_si256(_mm256_srli_epi16(x01, 4), mask);
                        hi23 = _mm256_and_si256(_mm256_srli_epi16(x23, 4), mask);
                        sc = _mm256_cvtph_ps(_mm_loadu_si128(p.add(64) as *const __m128i));
                    }
                    let (lo01, lo23, hi01, hi23) = if FIFTH {
                        // Each row's word of fifth bits: rows 0 and 1 (2 and 3) to the two
                        // 128-bit lanes, each bit to a byte of 0x10 at its element.
                        let qh = _mm256_castsi128_si256(_mm_loadu_si128(p.add(80) as *const __m128i));
                        let q01 = _mm256_permutevar8x32_epi32(qh, i01);
                        let q23 = _mm256_permutevar8x32_epi32(qh, i23);
                        let (f0_15, f16_31) = (fifth_bits(q01, false), fifth_bits(q01, true));
                        let (g0_15, g16_31) = (fifth_bits(q23, false), fifth_bits(q23, true));
                        (
                            _mm256_or_si256(lo01, f0_15),
                            _mm256_or_si256(lo23, g0_15),
                            _mm256_or_si256(hi01, f16_31),
                            _mm256_or_si256(hi23, g16_31),
                        )
                    } else {
                        (lo01, lo23, hi01, hi23)
                    };
                    let d01 = _mm256_permutevar8x32_ps(sc, i01);
                    let d23 = _mm256_permutevar8x32_ps(sc, i23);
                    for r in 0..R {
                        let q = a[r].qs.as_ptr().add(k * 32);
                        let alo = _mm256_broadcastsi128_si256(_mm_loadu_si128(q as *const __m128i));
                        let ahi = _mm256_broadcastsi128_si256(_mm_loadu_si128(q.add(16) as *const __m128i));
                        let (s01, s23) = if BYTES {
                            (
                                _mm256_add_epi32(signed(lo01, alo), signed(hi01, ahi)),
                                _mm256_add_epi32(signed(lo23, alo), signed(hi23, ahi)),
                            )
                        } else {
                            (sum2_small(lo01, alo, hi01, ahi), sum2_small(lo23, alo, hi23, ahi))
                        };
                        let da = _mm256_set1_ps(*a[r].d.get_unchecked(k));
                        acc01[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s01), _mm256_mul_ps(d01, da), acc01[r]);
                        acc23[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s23), _mm256_mul_ps(d23, da), acc23[r]);
                    }
                }
                let mut mins = [_mm_setzero_ps(); R];
                if !BYTES {
                    // The offset terms, Σ m · s over blocks, in a second short pass over the
                    // scales (they are in L1), which keeps the main loop's registers free. Four
                    // sums per row in turn (one chain of dependent multiply-adds took a decode's
                    // group as long as a quarter of its products), a row at a time: every row
                    // is summed in the same order whatever R, so a sequence's logits do not
                    // depend on how many others share its step.
                    let scales =
                        |k: usize| _mm_cvtph_ps(_mm_loadl_epi64(g.as_ptr().add(k * gb + 72) as *const __m128i));
                    for r in 0..R {
                        let s = |k: usize| _mm_set1_ps(*a[r].s.get_unchecked(k));
                        let mut part = [_mm_setzero_ps(); 4];
                        let mut k = 0;
                        while k + 4 <= blocks {
                            for (c, p) in part.iter_mut().enumerate() {
                                *p = _mm_fmadd_ps(scales(k + c), s(k + c), *p);
                            }
                            k += 4;
                        }
                        let [p0, p1, p2, p3] = part;
                        let mut sum = _mm_add_ps(_mm_add_ps(p0, p1), _mm_add_ps(p2, p3));
                        for k in k..blocks {
                            sum = _mm_fmadd_ps(scales(k), s(k), sum);
                        }
                        mins[r] = sum;
                    }
                }
                let ms = _mm_set1_ps(min_scale);
                for r in 0..R {
                    // Lanes 4j..4j+4 of (acc01, acc23) are row j's partial sums.
                    let h = _mm256_hadd_ps(acc01[r], acc23[r]);
                    let h = _mm256_hadd_ps(h, h);
                    // h lanes: [r0, r2, r0, r2 | r1, r3, r1, r3].
                    let lo = _mm256_castps256_ps128(h);
                    let hi = _mm256_extractf128_ps(h, 1);
                    let rows = _mm_unpacklo_ps(lo, hi); // [r0, r1, r2, r3]
                    let rows = _mm_fmadd_ps(ms, mins[r], rows);
                    _mm_storeu_ps(out[r].as_mut_ptr(), rows);
                }
            }
        }
    };
}

packed_kernels!(
    "avx2,fma,f16c",
    avx2,
    |u, s| _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)),
    |u1, s1, u2, s2| _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_maddubs_epi16(u1, s1), _mm256_maddubs_epi16(u2, s2)),
        _mm256_set1_epi16(1)
    )
);
packed_kernels!(
    "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni",
    vnni,
    |u, s| _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s),
    |u1, s1, u2, s2| _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u1, s1), u2, s2)
);

/// Runs one group on the best kernel; `false` when this CPU has none (the caller then uses
/// the plain version).
#[inline]
pub fn dot_group<const R: usize>(
    kind: PackedKind,
    g: &[u8],
    blocks: usize,
    a: &[&Q8Row; R],
    out: &mut [[f32; GROUP]; R],
) -> bool {
    let Some(l) = level() else { return false };
    super::packed::Packed::check_lengths(kind, g, blocks, a);
    // SAFETY: `level` checked the features each family is compiled for; lengths checked above.
    unsafe {
        match (l, kind) {
            (Level::Avx2, PackedKind::Nibbles { min_scale }) => {
                avx2::group::<false, false, R>(g, blocks, min_scale, a, out)
            }
            (Level::Avx2, PackedKind::Nibbles5 { min_scale }) => {
                avx2::group::<false, true, R>(g, blocks, min_scale, a, out)
            }
            (Level::Avx2, PackedKind::Bytes) => avx2::group::<true, false, R>(g, blocks, 0.0, a, out),
            (Level::Avx512Vnni, PackedKind::Nibbles { min_scale }) => {
                vnni::group::<false, false, R>(g, blocks, min_scale, a, out)
            }
            (Level::Avx512Vnni, PackedKind::Nibbles5 { min_scale }) => {
                vnni::group::<false, true, R>(g, blocks, min_scale, a, out)
            }
            (Level::Avx512Vnni, PackedKind::Bytes) => vnni::group::<true, false, R>(g, blocks, 0.0, a, out),
        }
    }
    true
}
