//! ggml tensor formats as GGUF stores them.
//!
//! * [`dtype`]: type ids, names, block sizes;
//! * [`half`]: f16 and bf16 conversions;
//! * [`dequant`]: plain reference dequantization of every block format;
//! * [`random`]: seeded random blocks with sane scales, for tests and `zinc synth`.
//!
//! This crate holds data-format code only. The stable ABI between host and plugins stays in
//! `zinc-plugin-api`; this crate is linked statically into each side that needs it.

pub mod dequant;
pub mod dtype;
pub mod half;
pub mod random;

pub use dtype::{type_by_name, type_info, TypeInfo, TYPES};

/// ggml type ids.
pub mod ids {
    pub const F32: u32 = 0;
    pub const F16: u32 = 1;
    pub const Q4_0: u32 = 2;
    pub const Q4_1: u32 = 3;
    pub const Q5_0: u32 = 6;
    pub const Q5_1: u32 = 7;
    pub const Q8_0: u32 = 8;
    pub const Q8_1: u32 = 9;
    pub const Q2_K: u32 = 10;
    pub const Q3_K: u32 = 11;
    pub const Q4_K: u32 = 12;
    pub const Q5_K: u32 = 13;
    pub const Q6_K: u32 = 14;
    pub const Q8_K: u32 = 15;
    pub const IQ4_NL: u32 = 20;
    pub const IQ4_XS: u32 = 23;
    pub const BF16: u32 = 30;
}

/// Elements and bytes per block of type `ty`, `None` when unsupported.
pub fn block_layout(ty: u32) -> Option<(usize, usize)> {
    type_info(ty).map(|t| (t.block, t.bytes))
}

/// Bytes in a row of `n` elements of type `ty`, `None` when unsupported or not whole blocks.
pub fn row_bytes(ty: u32, n: usize) -> Option<usize> {
    let (block, bytes) = block_layout(ty)?;
    n.is_multiple_of(block).then(|| n / block * bytes)
}
