//! K-quant weight rows (Q2_K to Q6_K) dotted with 8-bit super-block activations
//! ([`Q8KRow`]): the plain version, which every SIMD kernel is tested against.
//!
//! Every K-quant super-block unpacks to the same shape: 256 small integers `q`, an integer
//! scale and minimum per 16 elements, and two float factors `d` and `dmin`, so that element
//! `i` is `d · scale[i / 16] · q[i] − dmin · min[i / 16]`. Formats with 32-element sub-blocks
//! (Q4_K, Q5_K) repeat each scale and minimum twice; formats with a fixed offset (Q3_K,
//! Q6_K) fold it into a signed `q`. The dot product with an activation super-block is then
//! `d_a · (d · Σ_j scale_j · Σ_{i∈j} q_i a_i − dmin · Σ_j min_j · bsum_j)`.

use super::{q8::Q8Row, q8k::Q8KRow, q8k::QK_K};
use zinc_formats::GgmlType::{self, *};
use zinc_formats::{
    blocks::*,
    dequant::{scale_min_k4, IQ4_VALUES},
};

/// One unpacked K-quant super-block.
pub struct Unpacked {
    /// Factor of the scales.
    pub d: f32,
    /// Factor of the minimums (0 for formats without).
    pub dmin: f32,
    /// Scale per 16 elements.
    pub scales: [i32; 16],
    /// Minimum per 16 elements.
    pub mins: [i32; 16],
    /// The quantized values, offsets applied.
    pub q: [i32; QK_K],
}

/// Unpacks one super-block of `ty` (a K-quant, see [`GgmlType::is_k_quant`], or IQ4_XS, whose
/// values are signed table entries with a scale per 32 and no minimum) from the start of `b`.
pub fn unpack(ty: GgmlType, b: &[u8]) -> Unpacked {
    match ty {
        Q2_K => unpack_q2_k(block_at(b)),
        Q3_K => unpack_q3_k(block_at(b)),
        Q4_K => {
            let b: &BlockQ4K = block_at(b);
            unpack_q45_k(b.d, b.dmin, &b.scales, &b.qs, None)
        }
        Q5_K => {
            let b: &BlockQ5K = block_at(b);
            unpack_q45_k(b.d, b.dmin, &b.scales, &b.qs, Some(&b.qh))
        }
        Q6_K => unpack_q6_k(block_at(b)),
        IQ4_XS => unpack_iq4_xs(block_at(b)),
        _ => unreachable!("type {ty} is not a K-quant"),
    }
}

fn empty() -> Unpacked {
    Unpacked { d: 0.0, dmin: 0.0, scales: [0; 16], mins: [0; 16], q: [0; QK_K] }
}

fn unpack_q2_k(b: &BlockQ2K) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), dmin: b.dmin.to_f32(), ..empty() };
    for (j, &sc) in b.scales.iter().enumerate() {
        u.scales[j] = (sc & 0xf) as i32;
        u.mins[j] = (sc >> 4) as i32;
    }
    for i in 0..QK_K {
        let (n, s, m) = (i / 128, (i % 128) / 32, i % 32);
        u.q[i] = ((b.qs[32 * n + m] >> (2 * s)) & 3) as i32;
    }
    u
}

fn unpack_q3_k(b: &BlockQ3K) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), ..empty() };
    let sc = &b.scales;
    for j in 0..16 {
        let low = if j < 8 { sc[j] & 0xf } else { sc[j - 8] >> 4 };
        let high = (sc[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        u.scales[j] = (low | (high << 4)) as i32 - 32;
    }
    for i in 0..QK_K {
        let (n, s, m) = (i / 128, (i % 128) / 32, i % 32);
        let low = ((b.qs[32 * n + m] >> (2 * s)) & 3) as i32;
        let high = (b.hmask[m] >> (4 * n + s)) & 1;
        u.q[i] = low - if high != 0 { 0 } else { 4 };
    }
    u
}

/// Q4_K and Q5_K (which adds a fifth bit per element in `qh`).
fn unpack_q45_k(d: Half, dmin: Half, sc: &[u8; 12], qs: &[u8; 128], qh: Option<&[u8; 32]>) -> Unpacked {
    let mut u = Unpacked { d: d.to_f32(), dmin: dmin.to_f32(), ..empty() };
    for j in 0..8 {
        let (s, m) = scale_min_k4(j, sc);
        u.scales[2 * j..2 * j + 2].fill(s as i32);
        u.mins[2 * j..2 * j + 2].fill(m as i32);
    }
    for i in 0..QK_K {
        let (k, half, l) = (i / 64, (i % 64) / 32, i % 32);
        let nib = (qs[32 * k + l] >> (4 * half)) & 0xf;
        let high = qh.map_or(0, |qh| ((qh[l] >> (2 * k + half)) & 1) << 4);
        u.q[i] = (nib | high) as i32;
    }
    u
}

/// IQ4_XS: signed table values, a scale per 32 elements, no minimum.
fn unpack_iq4_xs(b: &BlockIQ4XS) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), ..empty() };
    for ib in 0..8 {
        u.scales[2 * ib..2 * ib + 2].fill(b.scale(ib));
        for j in 0..16 {
            let idx = b.qs[16 * ib + j];
            u.q[32 * ib + j] = IQ4_VALUES[(idx & 0xf) as usize] as i32;
            u.q[32 * ib + j + 16] = IQ4_VALUES[(idx >> 4) as usize] as i32;
        }
    }
    u
}

fn unpack_q6_k(b: &BlockQ6K) -> Unpacked {
    let mut u = Unpacked { d: b.d.to_f32(), ..empty() };
    for (j, &sc) in b.scales.iter().enumerate() {
        u.scales[j] = sc as i32;
    }
    for i in 0..QK_K {
        let (n, quarter, l) = (i / 128, (i % 128) / 32, i % 32);
        let low = (b.ql[64 * n + 32 * (quarter & 1) + l] >> (4 * (quarter >> 1))) & 0xf;
        let high = (b.qh[32 * n + l] >> (2 * quarter)) & 3;
        u.q[i] = (low | (high << 4)) as i32 - 32;
    }
    u
}

/// Weight row (a K-quant) · super-block activation row, plain Rust.
pub fn dot_scalar(ty: GgmlType, w: &[u8], a: &Q8KRow) -> f32 {
    let size = ty.block_bytes();
    let mut sum = 0f32;
    for (i, b) in w.chunks_exact(size).enumerate() {
        let u = unpack(ty, b);
        let qa = &a.qs[i * QK_K..(i + 1) * QK_K];
        let bsums = &a.bsums[i * 16..(i + 1) * 16];
        let (mut main, mut mins) = (0i64, 0i64);
        for j in 0..16 {
            let run: i32 = (0..16).map(|l| u.q[16 * j + l] * qa[16 * j + l] as i32).sum();
            main += (u.scales[j] * run) as i64;
            mins += (u.mins[j] * bsums[j] as i32) as i64;
        }
        sum += a.d[i] * (u.d * main as f32 - u.dmin * mins as f32);
    }
    sum
}

/// Weight row (a K-quant) · activation row in 8-bit blocks of 32, plain Rust: the arithmetic
/// of the Vulkan backend's kernels (shaders/blocks/kblock.glsl), which read each super-block as
/// eight blocks of 32 with a float scale per half (Q2_K, Q3_K, Q6_K; one for both halves
/// otherwise) and, for Q2_K, a minimum per half against the half's integer activation sum.
pub fn dot_blocks_scalar(ty: GgmlType, w: &[u8], a: &Q8Row) -> f32 {
    let size = ty.block_bytes();
    let mut sum = 0f32;
    for (i, b) in w.chunks_exact(size).enumerate() {
        let u = unpack(ty, b);
        for c in 0..8 {
            let bi = 8 * i + c;
            let qa = &a.qs[bi * 32..bi * 32 + 32];
            let half = |h: usize| (0..16).map(|l| u.q[32 * c + 16 * h + l] * qa[16 * h + l] as i32).sum::<i32>();
            let (lo, hi) = (half(0), half(1));
            let (d_lo, d_hi) = (u.d * u.scales[2 * c] as f32, u.d * u.scales[2 * c + 1] as f32);
            sum += match ty {
                Q3_K | Q6_K => a.d[bi] * (d_lo * lo as f32 + d_hi * hi as f32),
                Q2_K => {
                    let sums = |h: usize| qa[16 * h..16 * h + 16].iter().map(|&x| x as i32).sum::<i32>();
                    let (m_lo, m_hi) = (-u.dmin * u.mins[2 * c] as f32, -u.dmin * u.mins[2 * c + 1] as f32);
                    a.d[bi] * (d_lo * lo as f32 + d_hi * hi as f32 + m_lo * sums(0) as f32 + m_hi * sums(1) as f32)
                }
                // The sub-block's one scale and minimum (both halves carry the same).
                _ => d_lo * a.d[bi] * (lo + hi) as f32 - u.dmin * u.mins[2 * c] as f32 * a.s[bi],
            };
        }
    }
    sum
}
