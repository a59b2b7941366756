//! x86-64 kernels: one weight row against up to four 8-bit activation rows at once, so each
//! weight block is loaded and unpacked once per four rows (prompt chunks, batched decode).
//!
//! Two instruction sets: AVX2 + FMA + F16C (`maddubs` then `madd`), and AVX-512 VNNI with VL
//! (`vpdpbusd` on 256-bit vectors, one instruction for the u8 × i8 sums). Both are tested
//! against the plain version in `dot.rs`.

use super::q8::Q8Row;
use std::arch::x86_64::*;
use std::sync::OnceLock;
use zinc_formats::{
    blocks::{as_blocks, BlockIQ4XS},
    GgmlType,
};

/// Which x86 kernel family this CPU can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// AVX2, FMA and F16C.
    Avx2,
    /// Those plus AVX-512 VNNI and VL.
    Avx512Vnni,
}

/// The best level available, checked once.
pub fn level() -> Option<Level> {
    static L: OnceLock<Option<Level>> = OnceLock::new();
    *L.get_or_init(|| {
        let avx2 =
            is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
        let vnni = is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512bw");
        if std::env::var_os("ZINC_CPU_NO_VNNI").is_some() {
            return avx2.then_some(Level::Avx2);
        }
        match (avx2, vnni) {
            (true, true) => Some(Level::Avx512Vnni),
            (true, false) => Some(Level::Avx2),
            _ => None,
        }
    })
}

macro_rules! kernels {
    ($feature:literal, $mod:ident, |$u:ident, $s:ident| $sum_u8i8:expr) => {
        /// Kernels for one instruction-set level.
        pub mod $mod {
            use super::*;

            /// Σ u8 × i8 over 32 lanes as eight partial sums in f32.
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn sum_u8_i8($u: __m256i, $s: __m256i) -> __m256 {
                _mm256_cvtepi32_ps($sum_u8i8)
            }
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn hsum(v: __m256) -> f32 {
                let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
                let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
                let s = _mm_add_ss(s, _mm_movehdup_ps(s));
                _mm_cvtss_f32(s)
            }

            /// Two f16 values at `p` (d and m of a block) as f32.
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn f16x2(p: *const u8) -> (f32, f32) {
                let v = _mm_cvtph_ps(_mm_cvtsi32_si128((p as *const i32).read_unaligned()));
                (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_movehdup_ps(v)))
            }

            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn nibbles(p: *const u8) -> __m256i {
                let x = _mm_loadu_si128(p as *const __m128i);
                let mask = _mm_set1_epi8(0x0f);
                _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(x, 4), mask), _mm_and_si128(x, mask))
            }

            /// The 32 high bits of a Q5 block (bit j for value j) as bytes of 16 or 0.
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn high_bits(qh: u32) -> __m256i {
                // Byte j takes byte j / 8 of qh, then keeps bit j % 8.
                #[rustfmt::skip]
                let spread = _mm256_setr_epi8(
                    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                    2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
                );
                let bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(qh as i32), spread);
                let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
                _mm256_and_si256(set, _mm256_set1_epi8(16))
            }

            /// A row of 4-bit blocks (Q4_0, Q4_1, and with `HIGH` a fifth bit, Q5_0, Q5_1) · R
            /// activation rows. A block is its f16 `d`, with `MIN` an f16 minimum `m`, with
            /// `HIGH` 32 high bits, then 16 bytes of nibbles; values without a minimum are
            /// offset by 8 (16 with the fifth bit).
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn nibble_blocks<const R: usize, const HIGH: bool, const MIN: bool>(
                w: &[u8],
                a: &[&Q8Row; R],
                out: &mut [f32; R],
            ) {
                let qh_at = if MIN { 4 } else { 2 };
                let qs_at = qh_at + if HIGH { 4 } else { 0 };
                let mut acc = [_mm256_setzero_ps(); R];
                // Σ m·s with a minimum, Σ d·s without (the offset's term).
                let mut terms = [0f32; R];
                for (i, b) in w.chunks_exact(qs_at + 16).enumerate() {
                    let (d, m) = if MIN {
                        f16x2(b.as_ptr())
                    } else {
                        (_mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes([b[0], b[1]]) as i32))), 0.0)
                    };
                    let mut qw = nibbles(b.as_ptr().add(qs_at));
                    if HIGH {
                        let qh = u32::from_le_bytes([b[qh_at], b[qh_at + 1], b[qh_at + 2], b[qh_at + 3]]);
                        qw = _mm256_or_si256(qw, high_bits(qh));
                    }
                    for r in 0..R {
                        let qa = _mm256_loadu_si256(a[r].qs.as_ptr().add(i * 32) as *const __m256i);
                        acc[r] = _mm256_fmadd_ps(sum_u8_i8(qw, qa), _mm256_set1_ps(d * a[r].d[i]), acc[r]);
                        terms[r] += if MIN { m } else { d } * a[r].s[i];
                    }
                }
                let offset = if HIGH { 16.0 } else { 8.0 };
                for r in 0..R {
                    out[r] = hsum(acc[r]) + if MIN { terms[r] } else { -offset * terms[r] };
                }
            }

            /// Q4_0 row · R activation rows.
            #[target_feature(enable = $feature)]
            pub unsafe fn q4_0<const R: usize>(w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) {
                nibble_blocks::<R, false, false>(w, a, out)
            }

            /// Q4_1 row · R activation rows.
            #[target_feature(enable = $feature)]
            pub unsafe fn q4_1<const R: usize>(w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) {
                nibble_blocks::<R, false, true>(w, a, out)
            }

            /// Q5_0 row · R activation rows.
            #[target_feature(enable = $feature)]
            pub unsafe fn q5_0<const R: usize>(w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) {
                nibble_blocks::<R, true, false>(w, a, out)
            }

            /// Q5_1 row · R activation rows.
            #[target_feature(enable = $feature)]
            pub unsafe fn q5_1<const R: usize>(w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) {
                nibble_blocks::<R, true, true>(w, a, out)
            }

            /// 32 IQ4 values (signed bytes) from 16 bytes of indices at `p`.
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn iq4_values(p: *const u8) -> __m256i {
                let table = _mm_loadu_si128(zinc_formats::dequant::IQ4_VALUES.as_ptr() as *const __m128i);
                _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(table), nibbles(p))
            }

            /// Σ signed weights · signed activations of one block (no weight is zero) as eight
            /// partial sums in f32.
            #[inline]
            #[target_feature(enable = $feature)]
            unsafe fn signed_dot(v: __m256i, qa: __m256i) -> __m256 {
                sum_u8_i8(_mm256_sign_epi8(v, v), _mm256_sign_epi8(qa, v))
            }

            /// IQ4_NL row · R activation rows.
            #[target_feature(enable = $feature)]
            pub unsafe fn iq4_nl<const R: usize>(w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) {
                let mut acc = [_mm256_setzero_ps(); R];
                for (i, b) in w.chunks_exact(18).enumerate() {
                    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes([b[0], b[1]]) as i32)));
                    let v = iq4_values(b.as_ptr().add(2));
                    for r in 0..R {
                        let qa = _mm256_loadu_si256(a[r].qs.as_ptr().add(i * 32) as *const __m256i);
                        acc[r] = _mm256_fmadd_ps(signed_dot(v, qa), _mm256_set1_ps(d * a[r].d[i]), acc[r]);
                    }
                }
                for r in 0..R {
                    out[r] = hsum(acc[r]);
                }
            }

            /// IQ4_XS row · R activation rows: eight 32-element sub-blocks per 256.
            #[target_feature(enable = $feature)]
            pub unsafe fn iq4_xs<const R: usize>(w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) {
                let mut acc = [_mm256_setzero_ps(); R];
                for (i, b) in as_blocks::<BlockIQ4XS>(w).expect("whole blocks").iter().enumerate() {
                    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes(b.d.0) as i32)));
                    for ib in 0..8 {
                        let dl = d * b.scale(ib) as f32;
                        let v = iq4_values(b.qs.as_ptr().add(16 * ib));
                        let bi = 8 * i + ib;
                        for r in 0..R {
                            let qa = _mm256_loadu_si256(a[r].qs.as_ptr().add(bi * 32) as *const __m256i);
                            acc[r] = _mm256_fmadd_ps(signed_dot(v, qa), _mm256_set1_ps(dl * a[r].d[bi]), acc[r]);
                        }
                    }
                }
                for r in 0..R {
                    out[r] = hsum(acc[r]);
                }
            }

            /// Q8_0 row · R activation rows.
            #[target_feature(enable = $feature)]
            pub unsafe fn q8_0<const R: usize>(w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) {
                let mut acc = [_mm256_setzero_ps(); R];
                for (i, b) in w.chunks_exact(34).enumerate() {
                    let d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u16::from_le_bytes([b[0], b[1]]) as i32)));
                    let qw = _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i);
                    let aw = _mm256_sign_epi8(qw, qw);
                    for r in 0..R {
                        let qa = _mm256_loadu_si256(a[r].qs.as_ptr().add(i * 32) as *const __m256i);
                        let p = sum_u8_i8(aw, _mm256_sign_epi8(qa, qw));
                        acc[r] = _mm256_fmadd_ps(p, _mm256_set1_ps(d * a[r].d[i]), acc[r]);
                    }
                }
                for r in 0..R {
                    out[r] = hsum(acc[r]);
                }
            }
        }
    };
}

kernels!("avx2,fma,f16c", avx2, |u, s| _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
kernels!("avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni", vnni, |u, s| _mm256_dpbusd_epi32(
    _mm256_setzero_si256(),
    u,
    s
));

/// Dispatches one weight row against R rows to the best kernel; `false` when this type or
/// CPU has no x86 kernel (the caller then uses the plain version).
#[inline]
pub fn dot_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) -> bool {
    use zinc_formats::GgmlType::*;
    let Some(l) = level() else { return false };
    // SAFETY: `level` checked the features each family is compiled for.
    unsafe {
        match (l, ty) {
            (Level::Avx2, Q4_0) => avx2::q4_0(w, a, out),
            (Level::Avx2, Q4_1) => avx2::q4_1(w, a, out),
            (Level::Avx2, Q5_0) => avx2::q5_0(w, a, out),
            (Level::Avx2, Q5_1) => avx2::q5_1(w, a, out),
            (Level::Avx2, Q8_0) => avx2::q8_0(w, a, out),
            (Level::Avx2, IQ4_NL) => avx2::iq4_nl(w, a, out),
            (Level::Avx2, IQ4_XS) => avx2::iq4_xs(w, a, out),
            (Level::Avx512Vnni, Q4_0) => vnni::q4_0(w, a, out),
            (Level::Avx512Vnni, Q4_1) => vnni::q4_1(w, a, out),
            (Level::Avx512Vnni, Q5_0) => vnni::q5_0(w, a, out),
            (Level::Avx512Vnni, Q5_1) => vnni::q5_1(w, a, out),
            (Level::Avx512Vnni, Q8_0) => vnni::q8_0(w, a, out),
            (Level::Avx512Vnni, IQ4_NL) => vnni::iq4_nl(w, a, out),
            (Level::Avx512Vnni, IQ4_XS) => vnni::iq4_xs(w, a, out),
            _ => return false,
        }
    }
    true
}

/// Float kernels (AVX2 + FMA): dot products, `acc += p · v`, and 8-bit row quantization.
pub mod float {
    use super::*;

    /// Whether AVX2 + FMA are present.
    pub fn available() -> bool {
        level().is_some()
    }

    /// Σ a·b.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= n {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), _mm256_loadu_ps(b.as_ptr().add(i)), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i + 8)), _mm256_loadu_ps(b.as_ptr().add(i + 8)), s1);
            i += 16;
        }
        if i + 8 <= n {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a.as_ptr().add(i)), _mm256_loadu_ps(b.as_ptr().add(i)), s0);
            i += 8;
        }
        let v = _mm256_add_ps(s0, s1);
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let mut sum = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
        while i < n {
            sum += a[i] * b[i];
            i += 1;
        }
        sum
    }

    /// acc += p · v.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn axpy(acc: &mut [f32], p: f32, v: &[f32]) {
        let n = acc.len().min(v.len());
        let pv = _mm256_set1_ps(p);
        let mut i = 0;
        while i + 8 <= n {
            let a = _mm256_loadu_ps(acc.as_ptr().add(i));
            _mm256_storeu_ps(acc.as_mut_ptr().add(i), _mm256_fmadd_ps(pv, _mm256_loadu_ps(v.as_ptr().add(i)), a));
            i += 8;
        }
        while i < n {
            acc[i] += p * v[i];
            i += 1;
        }
    }

    /// Σ q·k for f16 keys.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_f16(q: &[f32], k: &[u16]) -> f32 {
        let n = q.len().min(k.len());
        let (mut s0, mut s1) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let mut i = 0;
        while i + 16 <= n {
            let k0 = _mm256_cvtph_ps(_mm_loadu_si128(k.as_ptr().add(i) as *const __m128i));
            let k1 = _mm256_cvtph_ps(_mm_loadu_si128(k.as_ptr().add(i + 8) as *const __m128i));
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(i)), k0, s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(q.as_ptr().add(i + 8)), k1, s1);
            i += 16;
        }
        let v = _mm256_add_ps(s0, s1);
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let mut sum = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
        while i < n {
            sum += q[i] * zinc_formats::half::f16_to_f32(k[i]);
            i += 1;
        }
        sum
    }

    /// acc += p · v for f16 values.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy_f16(acc: &mut [f32], p: f32, v: &[u16]) {
        let n = acc.len().min(v.len());
        let pv = _mm256_set1_ps(p);
        let mut i = 0;
        while i + 8 <= n {
            let x = _mm256_cvtph_ps(_mm_loadu_si128(v.as_ptr().add(i) as *const __m128i));
            let a = _mm256_loadu_ps(acc.as_ptr().add(i));
            _mm256_storeu_ps(acc.as_mut_ptr().add(i), _mm256_fmadd_ps(pv, x, a));
            i += 8;
        }
        while i < n {
            acc[i] += p * zinc_formats::half::f16_to_f32(v[i]);
            i += 1;
        }
    }

    /// f32 → f16 bits, round to nearest even.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn to_f16(src: &[f32], dst: &mut [u16]) {
        let n = src.len().min(dst.len());
        let mut i = 0;
        while i + 8 <= n {
            let h = _mm256_cvtps_ph::<0>(_mm256_loadu_ps(src.as_ptr().add(i)));
            _mm_storeu_si128(dst.as_mut_ptr().add(i) as *mut __m128i, h);
            i += 8;
        }
        while i < n {
            dst[i] = zinc_formats::half::f32_to_f16(src[i]);
            i += 1;
        }
    }

    /// Quantizes 32 floats to i8 with scale `amax / 127`; returns (d, Σq).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_block(x: &[f32], q: &mut [i8]) -> (f32, i32) {
        let d = abs_max(&x[..32]) / 127.0;
        let (lo, hi) = quantize_scaled(x, if d > 0.0 { 1.0 / d } else { 0.0 }, q);
        (d, lo + hi)
    }

    /// The largest |x| (`x.len()` a multiple of 8).
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA ([`available`]).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn abs_max(x: &[f32]) -> f32 {
        debug_assert!(x.len().is_multiple_of(8));
        let sign = _mm256_set1_ps(-0.0);
        let mut m = _mm256_setzero_ps();
        for j in 0..x.len() / 8 {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x.as_ptr().add(j * 8))));
        }
        let s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let s = _mm_max_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)))
    }

    /// Writes the 32 values `x · id` rounded to i8 into `q`; returns the sums of their first
    /// and last 16.
    ///
    /// # Safety
    /// The CPU has AVX2 and FMA ([`available`]).
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn quantize_scaled(x: &[f32], id: f32, q: &mut [i8]) -> (i32, i32) {
        assert!(x.len() >= 32 && q.len() >= 32);
        let id = _mm256_set1_ps(id);
        let mut ints = [_mm256_setzero_si256(); 4];
        for (j, v) in ints.iter_mut().enumerate() {
            // Round to nearest (even on ties), as the MXCSR default mode does.
            *v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x.as_ptr().add(j * 8)), id));
        }
        let p01 = _mm256_packs_epi32(ints[0], ints[1]);
        let p23 = _mm256_packs_epi32(ints[2], ints[3]);
        let bytes = _mm256_packs_epi16(p01, p23);
        // packs interleaves 128-bit lanes; restore element order.
        let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.as_mut_ptr() as *mut __m256i, ordered);
        let lanes = |v: __m256i| {
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
            _mm_cvtsi128_si32(s)
        };
        (lanes(_mm256_add_epi32(ints[0], ints[1])), lanes(_mm256_add_epi32(ints[2], ints[3])))
    }
}
