//! The CPU tier's quantized arithmetic: activations quantized once per matmul input, and
//! weight-row dot products with SIMD variants beside plain ones. Block layouts and the
//! reference dequantizer live in `zinc-formats`.
//!
//! A weight row is dotted with an activation row in one of three ways ([`Activations`]):
//! * 32-element formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) against the activation
//!   quantized to 8 bits in blocks of 32 ([`q8::Q8Row`]), integer multiply-adds per block;
//! * K-quants (Q2_K to Q6_K) and IQ4_XS against the activation quantized to 8 bits in
//!   256-element super-blocks ([`q8k::Q8KRow`]), integer multiply-adds per super-block
//!   ([`kquant`]);
//! * everything else (F32, F16, BF16) dequantized a few blocks at a time and dotted with
//!   the f32 activation.
//!
//! Q4_0, Q4_1 and Q8_0 matrices are also repacked at load time, four rows interleaved
//! ([`packed`]), for kernels that produce four outputs per pass; prompt-sized products of
//! K-quants and IQ4_XS unpack sixteen weight rows side by side once for all activation rows
//! ([`panel`]).

#[cfg(target_arch = "aarch64")]
pub mod arm_kquant;
#[cfg(target_arch = "aarch64")]
pub mod arm_packed;
pub mod dot;
pub mod kquant;
pub mod packed;
pub mod panel;
pub mod q8;
pub mod q8k;
#[cfg(target_arch = "x86_64")]
pub mod x86;
#[cfg(target_arch = "x86_64")]
pub mod x86_kquant;
#[cfg(target_arch = "x86_64")]
pub mod x86_packed;
#[cfg(target_arch = "x86_64")]
pub mod x86_panel;

pub use zinc_formats::GgmlType;

/// The form an activation row takes to meet a weight type's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activations {
    /// Plain f32 (float weights).
    F32,
    /// 8 bits in blocks of 32 ([`q8::Q8Row`]).
    Q8Blocks,
    /// 8 bits in 256-element super-blocks ([`q8k::Q8KRow`]).
    Q8SuperBlocks,
}

/// How the CPU tier meets K-quant (and IQ4) weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KQuantActivations {
    /// Activations in 8-bit super-blocks of 256 (IQ4_XS's too) and the SIMD kernels: the
    /// fast path.
    #[default]
    SuperBlocks,
    /// What the Vulkan backend computes: every K-quant and IQ4_XS against 8-bit blocks of 32
    /// (plain kernels). Parity tests choose it (plugin option
    /// `k_quant_activations = "blocks"`) so that the two backends differ only in rounding.
    Blocks,
}

impl Activations {
    /// The activation form that rows of weight type `ty` are dotted against.
    pub fn for_weights(ty: GgmlType, k: KQuantActivations) -> Activations {
        use GgmlType::*;
        match (ty, k) {
            (Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0, _) => Activations::Q8Blocks,
            (IQ4_NL, _) => Activations::Q8Blocks,
            (t, KQuantActivations::SuperBlocks) if t.is_k_quant() || t == IQ4_XS => Activations::Q8SuperBlocks,
            (IQ4_XS, KQuantActivations::Blocks) => Activations::Q8Blocks,
            (t, KQuantActivations::Blocks) if t.is_k_quant() => Activations::Q8Blocks,
            _ => Activations::F32,
        }
    }
}

/// An activation row quantized for integer dot products, so that one matrix loop serves both
/// 8-bit forms.
pub trait QuantizedRow: Default + Send + Sync {
    /// Quantizes `x` into `self`, reusing its buffers.
    fn quantize_from(&mut self, x: &[f32]);
    /// Weight row of type `ty` · R rows with a SIMD kernel; `false` when none exists.
    fn dot_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Self; R], out: &mut [f32; R]) -> bool;
    /// Weight row of type `ty` · one row, by the best kernel or the plain one.
    fn dot(ty: GgmlType, w: &[u8], a: &Self) -> f32;
}

impl QuantizedRow for q8::Q8Row {
    fn quantize_from(&mut self, x: &[f32]) {
        q8::Q8Row::quantize_from(self, x)
    }
    fn dot_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Self; R], out: &mut [f32; R]) -> bool {
        dot::dot_q8_rows(ty, w, a, out)
    }
    fn dot(ty: GgmlType, w: &[u8], a: &Self) -> f32 {
        dot::dot_q8(ty, w, a)
    }
}

impl QuantizedRow for q8k::Q8KRow {
    fn quantize_from(&mut self, x: &[f32]) {
        q8k::Q8KRow::quantize_from(self, x)
    }
    fn dot_rows<const R: usize>(ty: GgmlType, w: &[u8], a: &[&Self; R], out: &mut [f32; R]) -> bool {
        dot::dot_q8k_rows(ty, w, a, out)
    }
    fn dot(ty: GgmlType, w: &[u8], a: &Self) -> f32 {
        dot::dot_q8k(ty, w, a)
    }
}

#[cfg(test)]
mod kquant_tests;
#[cfg(test)]
mod tests;
