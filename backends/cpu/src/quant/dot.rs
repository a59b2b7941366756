//! Dot products of one weight row with one activation row.
//!
//! [`dot_q8`] picks the fastest variant the CPU has at run time; the `*_scalar` functions
//! are the plain versions every SIMD path is tested against.

use super::{block_layout, ids::*, q8::Q8Row};
use zinc_formats::{dequant::dequantize_row, half::read_f16};

/// Weight row (32-element format) · 8-bit activation row, plain Rust.
pub fn dot_q8_scalar(ty: u32, w: &[u8], a: &Q8Row) -> f32 {
    let (_, size) = block_layout(ty).expect("q8 dot on a supported type");
    let mut sum = 0f32;
    for (i, b) in w.chunks_exact(size).enumerate() {
        let q = &a.qs[i * 32..i * 32 + 32];
        let (da, sa) = (a.d[i], a.s[i]);
        sum += match ty {
            Q4_0 => {
                let qs = &b[2..18];
                let mut acc = 0i32;
                for j in 0..16 {
                    acc += (qs[j] & 0xf) as i32 * q[j] as i32 + (qs[j] >> 4) as i32 * q[j + 16] as i32;
                }
                read_f16(b) * (da * acc as f32 - 8.0 * sa)
            }
            Q4_1 => {
                let qs = &b[4..20];
                let mut acc = 0i32;
                for j in 0..16 {
                    acc += (qs[j] & 0xf) as i32 * q[j] as i32 + (qs[j] >> 4) as i32 * q[j + 16] as i32;
                }
                read_f16(b) * da * acc as f32 + read_f16(&b[2..]) * sa
            }
            Q5_0 | Q5_1 => {
                let (off, base) = if ty == Q5_0 { (2, 6) } else { (4, 8) };
                let qh = u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]]);
                let qs = &b[base..base + 16];
                let mut acc = 0i32;
                for j in 0..16 {
                    let lo = (qs[j] & 0xf) as i32 | ((((qh >> j) & 1) << 4) as i32);
                    let hi = (qs[j] >> 4) as i32 | ((((qh >> (j + 16)) & 1) << 4) as i32);
                    acc += lo * q[j] as i32 + hi * q[j + 16] as i32;
                }
                if ty == Q5_0 {
                    read_f16(b) * (da * acc as f32 - 16.0 * sa)
                } else {
                    read_f16(b) * da * acc as f32 + read_f16(&b[2..]) * sa
                }
            }
            Q8_0 => {
                let mut acc = 0i32;
                for j in 0..32 {
                    acc += b[2 + j] as i8 as i32 * q[j] as i32;
                }
                read_f16(b) * da * acc as f32
            }
            _ => unreachable!("type {ty} is not dotted against q8 activations"),
        };
    }
    sum
}

/// Weight row (any type) · f32 activation row, dequantizing block by block into `scratch`
/// (at least one block long). Used for K-quants and float weights.
pub fn dot_f32(ty: u32, w: &[u8], x: &[f32], scratch: &mut [f32]) -> f32 {
    match ty {
        F32 => {
            return w.chunks_exact(4).zip(x).map(|(b, v)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v).sum()
        }
        _ => {}
    }
    let (block, size) = block_layout(ty).expect("supported type");
    // Dequantize several blocks at a time so the float dot below vectorises.
    let per = (scratch.len() / block).max(1);
    let mut sum = 0f32;
    for (wb, xb) in w.chunks(size * per).zip(x.chunks(block * per)) {
        let n = xb.len();
        let ok = dequantize_row(ty, wb, &mut scratch[..n]);
        debug_assert!(ok);
        sum += dot_plain(&scratch[..n], xb);
    }
    sum
}

/// Plain float dot product, written so the compiler vectorises it.
#[inline]
pub fn dot_plain(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}

/// Weight row · 8-bit activation row with the best variant this CPU has.
#[inline]
pub fn dot_q8(ty: u32, w: &[u8], a: &Q8Row) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if avx2::available() {
            // SAFETY: the CPU has AVX2 and FMA (checked above); lengths come from the row.
            unsafe {
                match ty {
                    Q4_0 => return avx2::dot_q4_0(w, a),
                    Q4_1 => return avx2::dot_q4_1(w, a),
                    Q8_0 => return avx2::dot_q8_0(w, a),
                    _ => {}
                }
            }
        }
    }
    dot_q8_scalar(ty, w, a)
}

/// AVX2 + FMA variants.
#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    use super::{read_f16, Q8Row};
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    /// Whether this CPU has AVX2 and FMA (checked once).
    pub fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// 16 packed nibbles → 32 bytes: low nibbles (elements 0..16), then high (16..32).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn nibbles(p: *const u8) -> __m256i {
        let x = _mm_loadu_si128(p as *const __m128i);
        let mask = _mm_set1_epi8(0x0f);
        let lo = _mm_and_si128(x, mask);
        let hi = _mm_and_si128(_mm_srli_epi16(x, 4), mask);
        _mm256_set_m128i(hi, lo)
    }

    /// Σ u8 × i8 over 32 lanes, as eight i32 partial sums converted to float.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn mul_sum_u8_i8(u: __m256i, s: __m256i) -> __m256 {
        let p16 = _mm256_maddubs_epi16(u, s);
        _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)))
    }

    /// Q4_0 · Q8.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q4_0(w: &[u8], a: &Q8Row) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut offset = 0f32;
        for (i, b) in w.chunks_exact(18).enumerate() {
            let dw = read_f16(b);
            let qw = nibbles(b.as_ptr().add(2));
            let qa = _mm256_loadu_si256(a.qs.as_ptr().add(i * 32) as *const __m256i);
            acc = _mm256_fmadd_ps(mul_sum_u8_i8(qw, qa), _mm256_set1_ps(dw * a.d[i]), acc);
            offset += dw * a.s[i];
        }
        hsum(acc) - 8.0 * offset
    }

    /// Q4_1 · Q8.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q4_1(w: &[u8], a: &Q8Row) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let mut mins = 0f32;
        for (i, b) in w.chunks_exact(20).enumerate() {
            let dw = read_f16(b);
            let qw = nibbles(b.as_ptr().add(4));
            let qa = _mm256_loadu_si256(a.qs.as_ptr().add(i * 32) as *const __m256i);
            acc = _mm256_fmadd_ps(mul_sum_u8_i8(qw, qa), _mm256_set1_ps(dw * a.d[i]), acc);
            mins += read_f16(&b[2..]) * a.s[i];
        }
        hsum(acc) + mins
    }

    /// Q8_0 · Q8.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_q8_0(w: &[u8], a: &Q8Row) -> f32 {
        let mut acc = _mm256_setzero_ps();
        for (i, b) in w.chunks_exact(34).enumerate() {
            let dw = read_f16(b);
            let qw = _mm256_loadu_si256(b.as_ptr().add(2) as *const __m256i);
            let qa = _mm256_loadu_si256(a.qs.as_ptr().add(i * 32) as *const __m256i);
            // |w| × (a with w's sign) keeps maddubs' first operand unsigned.
            let prod = mul_sum_u8_i8(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qa, qw));
            acc = _mm256_fmadd_ps(prod, _mm256_set1_ps(dw * a.d[i]), acc);
        }
        hsum(acc)
    }
}
