//! The CPU tier's quantized arithmetic: activations quantized once per matmul input, and
//! weight-row dot products with SIMD variants beside plain ones. Block layouts and the
//! reference dequantizer live in `zinc-formats`.
//!
//! A weight row is dotted with an activation row in one of two ways:
//! * 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) against the activation quantized to
//!   8 bits ([`q8::Q8Row`]), integer multiply-adds per block;
//! * everything else (K-quants, F32, F16, BF16) dequantized a few blocks at a time and
//!   dotted with the f32 activation.
//!
//! Q4_0, Q4_1 and Q8_0 matrices are also repacked at load time, four rows interleaved
//! ([`packed`]), for kernels that produce four outputs per pass.

#[cfg(target_arch = "aarch64")]
pub mod arm_packed;
pub mod dot;
pub mod packed;
pub mod q8;
#[cfg(target_arch = "x86_64")]
pub mod x86;
#[cfg(target_arch = "x86_64")]
pub mod x86_packed;

pub use zinc_formats::{block_layout, ids, row_bytes};

/// True when rows of `ty` are dotted against 8-bit quantized activations.
pub fn uses_q8_activations(ty: u32) -> bool {
    use ids::*;
    matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0)
}

#[cfg(test)]
mod tests;
