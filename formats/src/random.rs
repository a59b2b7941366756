//! Seeded random blocks of any type, with scales small enough that a model built from them
//! produces finite activations. Used by tests (fresh random inputs) and by `zinc synth`.

use crate::{
    blocks::*,
    half::f32_to_f16,
    GgmlType::{self, *},
};
use std::mem::offset_of;

/// A small, fast, seedable generator (xorshift64*), so tests and synthetic models are
/// reproducible without an extra dependency.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
    /// Uniform in [-a, a).
    pub fn sym(&mut self, a: f32) -> f32 {
        (self.f32() * 2.0 - 1.0) * a
    }
    /// Fills a byte buffer.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Byte offsets of the f16 scale fields in one block of `ty`, and whether each is a
/// minimum (offset subtracted) rather than a multiplier.
fn scale_fields(ty: GgmlType) -> &'static [(usize, bool)] {
    match ty {
        Q4_0 | Q5_0 | Q8_0 | IQ4_NL | IQ4_XS => &[(0, false)],
        Q4_1 => &[(offset_of!(BlockQ4_1, d), false), (offset_of!(BlockQ4_1, m), true)],
        Q5_1 => &[(offset_of!(BlockQ5_1, d), false), (offset_of!(BlockQ5_1, m), true)],
        Q2_K => &[(offset_of!(BlockQ2K, d), false), (offset_of!(BlockQ2K, dmin), true)],
        Q3_K => &[(offset_of!(BlockQ3K, d), false)],
        Q4_K => &[(offset_of!(BlockQ4K, d), false), (offset_of!(BlockQ4K, dmin), true)],
        Q5_K => &[(offset_of!(BlockQ5K, d), false), (offset_of!(BlockQ5K, dmin), true)],
        Q6_K => &[(offset_of!(BlockQ6K, d), false)],
        F32 | F16 | BF16 | Q8_K => &[],
    }
}

/// `n_blocks` random blocks of type `ty` whose values have magnitude around `scale`.
pub fn random_blocks(ty: GgmlType, n_blocks: usize, scale: f32, rng: &mut Rng) -> Vec<u8> {
    let size = ty.block_bytes();
    let mut out = vec![0u8; n_blocks * size];
    match ty {
        F32 => {
            for c in out.chunks_exact_mut(4) {
                c.copy_from_slice(&rng.sym(scale).to_le_bytes());
            }
        }
        F16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&f32_to_f16(rng.sym(scale)).to_le_bytes());
            }
        }
        BF16 => {
            for c in out.chunks_exact_mut(2) {
                c.copy_from_slice(&((rng.sym(scale).to_bits() >> 16) as u16).to_le_bytes());
            }
        }
        Q8_K => {
            rng.fill(&mut out);
            for b in out.chunks_exact_mut(size) {
                b[..4].copy_from_slice(&(scale / 127.0 * (0.5 + rng.f32())).to_le_bytes());
            }
        }
        _ => {
            rng.fill(&mut out);
            // Largest quant magnitude per format, so `d * q` spans about ±scale.
            let qmax = match ty {
                Q4_0 | Q4_1 => 8.0,
                Q5_0 | Q5_1 => 16.0,
                Q8_0 => 127.0,
                Q2_K => 3.0 * 15.0,
                Q3_K => 4.0 * 32.0,
                Q4_K => 15.0 * 63.0,
                Q5_K => 31.0 * 63.0,
                Q6_K => 32.0 * 127.0,
                IQ4_NL => 127.0,
                IQ4_XS => 32.0 * 127.0,
                F32 | F16 | BF16 | Q8_K => unreachable!("handled above"),
            };
            for b in out.chunks_exact_mut(size) {
                for &(off, is_min) in scale_fields(ty) {
                    let v = if is_min { rng.sym(scale) / qmax * 4.0 } else { scale / qmax * (0.5 + rng.f32()) };
                    let v = if matches!(ty, Q4_1 | Q5_1) && is_min { rng.sym(scale) } else { v };
                    b[off..off + 2].copy_from_slice(&f32_to_f16(v).to_le_bytes());
                }
            }
        }
    }
    out
}
