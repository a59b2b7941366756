//! Dot products of one weight row with one activation row.
//!
//! [`dot_q8`] picks the fastest variant the CPU has at run time; the `*_scalar` functions
//! are the plain versions every SIMD path is tested against.

use super::{kquant, q8::Q8Row, q8k::Q8KRow};
use zinc_formats::GgmlType::{self, *};
use zinc_formats::{
    blocks::*,
    dequant::{dequantize_row, IQ4_VALUES},
};

/// Weight row (32-element format, or a K-quant read as blocks of 32) · 8-bit
/// activation row, plain Rust.
pub fn dot_q8_scalar(ty: GgmlType, w: &[u8], a: &Q8Row) -> f32 {
    match ty {
        Q4_0 => {
            blocks32(w, a, |b: &BlockQ4_0, q, da, sa| b.d.to_f32() * (da * nibbles(&b.qs, |_| 0, q) as f32 - 8.0 * sa))
        }
        Q4_1 => blocks32(w, a, |b: &BlockQ4_1, q, da, sa| {
            b.d.to_f32() * da * nibbles(&b.qs, |_| 0, q) as f32 + b.m.to_f32() * sa
        }),
        Q5_0 => blocks32(w, a, |b: &BlockQ5_0, q, da, sa| {
            let qh = u32::from_le_bytes(b.qh);
            b.d.to_f32() * (da * nibbles(&b.qs, |j| ((qh >> j) & 1) << 4, q) as f32 - 16.0 * sa)
        }),
        Q5_1 => blocks32(w, a, |b: &BlockQ5_1, q, da, sa| {
            let qh = u32::from_le_bytes(b.qh);
            b.d.to_f32() * da * nibbles(&b.qs, |j| ((qh >> j) & 1) << 4, q) as f32 + b.m.to_f32() * sa
        }),
        Q8_0 => blocks32(w, a, |b: &BlockQ8_0, q, da, _| {
            let acc: i32 = b.qs.iter().zip(q).map(|(&x, &y)| x as i32 * y as i32).sum();
            b.d.to_f32() * da * acc as f32
        }),
        IQ4_NL => blocks32(w, a, |b: &BlockIQ4NL, q, da, _| b.d.to_f32() * da * iq4_run(&b.qs, q) as f32),
        IQ4_XS => iq4_xs_scalar(w, a),
        t if t.is_k_quant() => kquant::dot_blocks_scalar(ty, w, a),
        _ => unreachable!("type {ty} is not dotted against q8 activations"),
    }
}

/// Σ over 32-element blocks of `f(block, its 32 activations, their scale, their scaled sum)`.
fn blocks32<B: Block>(w: &[u8], a: &Q8Row, f: impl Fn(&B, &[i8], f32, f32) -> f32) -> f32 {
    let blocks = as_blocks::<B>(w).expect("whole blocks");
    blocks.iter().enumerate().map(|(i, b)| f(b, &a.qs[i * 32..i * 32 + 32], a.d[i], a.s[i])).sum()
}

/// Σ q · activation over 16 bytes of 4-bit values (low nibbles are elements 0..16), with
/// `high(j)` added to element j's value (Q5's fifth bit).
fn nibbles(qs: &[u8; 16], high: impl Fn(usize) -> u32, q: &[i8]) -> i32 {
    (0..16)
        .map(|j| {
            let lo = ((qs[j] & 0xf) as u32 | high(j)) as i32;
            let hi = ((qs[j] >> 4) as u32 | high(j + 16)) as i32;
            lo * q[j] as i32 + hi * q[j + 16] as i32
        })
        .sum()
}

/// Σ value · activation over one run of 16 bytes of IQ4 indices (32 values).
fn iq4_run(qs: &[u8], q: &[i8]) -> i32 {
    let v = |i: u8| IQ4_VALUES[i as usize] as i32;
    (0..16).map(|j| v(qs[j] & 0xf) * q[j] as i32 + v(qs[j] >> 4) * q[j + 16] as i32).sum()
}

/// IQ4_XS row · 8-bit activation row, plain Rust: each 32-element sub-block's signed scale
/// times its IQ4 run.
fn iq4_xs_scalar(w: &[u8], a: &Q8Row) -> f32 {
    let mut sum = 0f32;
    for (i, b) in as_blocks::<BlockIQ4XS>(w).expect("whole blocks").iter().enumerate() {
        let d = b.d.to_f32();
        for (ib, qs) in b.qs.chunks_exact(16).enumerate() {
            let bi = 8 * i + ib;
            let acc = iq4_run(qs, &a.qs[32 * bi..32 * bi + 32]);
            sum += d * b.scale(ib) as f32 * a.d[bi] * acc as f32;
        }
    }
    sum
}

/// Weight row (any type) · f32 activation row, dequantizing block by block into `scratch`
/// (at least one block long). Used for K-quants and float weights.
pub fn dot_f32(ty: GgmlType, w: &[u8], x: &[f32], scratch: &mut [f32]) -> f32 {
    match ty {
        F32 => return w.chunks_exact(4).zip(x).map(|(b, v)| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * v).sum(),
        _ => {}
    }
    let (block, size) = (ty.block_elements(), ty.block_bytes());
    // Dequantize several blocks at a time so the float dot below vectorises.
    let per = (scratch.len() / block).max(1);
    let mut sum = 0f32;
    for (wb, xb) in w.chunks(size * per).zip(x.chunks(block * per)) {
        let n = xb.len();
        let ok = dequantize_row(ty, wb, &mut scratch[..n]);
        debug_assert!(ok);
        sum += dot_f32_plain(&scratch[..n], xb);
    }
    sum
}

/// Float dot product with the best kernel this CPU has.
#[inline]
pub fn dot_f32_plain(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::x86::float::available() {
        // SAFETY: AVX2 and FMA checked.
        return unsafe { super::x86::float::dot(a, b) };
    }
    dot_plain(a, b)
}

/// `acc += p · v` with the best kernel this CPU has.
#[inline]
pub fn axpy(acc: &mut [f32], p: f32, v: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::float::available() {
        // SAFETY: AVX2 and FMA checked.
        return unsafe { super::x86::float::axpy(acc, p, v) };
    }
    for (a, x) in acc.iter_mut().zip(v) {
        *a += p * x;
    }
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
pub fn dot_q8(ty: GgmlType, w: &[u8], a: &Q8Row) -> f32 {
    let mut out = [0f32; 1];
    if dot_q8_rows(ty, w, &[a], &mut out) {
        return out[0];
    }
    dot_q8_scalar(ty, w, a)
}

/// Weight row · R activation rows with a SIMD kernel; `false` when none exists for this type
/// on this CPU.
#[inline]
pub fn dot_q8_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Q8Row; R], out: &mut [f32; R]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86::dot_rows(ty, w, a, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (ty, w, a, out);
        false
    }
}

/// K-quant row · 8-bit super-block activation row with the best variant this CPU has.
#[inline]
pub fn dot_q8k(ty: GgmlType, w: &[u8], a: &Q8KRow) -> f32 {
    let mut out = [0f32; 1];
    if dot_q8k_rows(ty, w, &[a], &mut out) {
        return out[0];
    }
    kquant::dot_scalar(ty, w, a)
}

/// K-quant row · R super-block activation rows with a SIMD kernel; `false` when none exists
/// for this type on this CPU.
#[inline]
pub fn dot_q8k_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Q8KRow; R], out: &mut [f32; R]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::x86_kquant::dot_rows(ty, w, a, out)
    }
    #[cfg(target_arch = "aarch64")]
    {
        super::arm_kquant::dot_rows(ty, w, a, out)
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        let _ = (ty, w, a, out);
        false
    }
}

/// Converts f32 values to f16 bits (round to nearest even), with F16C where present.
pub fn to_f16(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if super::x86::float::available() {
        // SAFETY: AVX2/FMA/F16C checked (the x86 level requires F16C).
        return unsafe { super::x86::float::to_f16(src, dst) };
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d = zinc_formats::half::f32_to_f16(*s);
    }
}
