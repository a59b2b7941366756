//! ggml tensor formats as GGUF stores them.
//!
//! * [`dtype`]: [`GgmlType`], the one table of type facts (ids, names, block sizes);
//! * [`blocks`]: ggml's block structs, field for field, sizes checked at compile time;
//! * [`half`]: f16 and bf16 conversions;
//! * [`dequant`]: plain reference dequantization of every block format;
//! * [`random`]: seeded random blocks with sane scales, for tests and `zinc synth`.
//!
//! This crate holds data-format code only. The stable ABI between host and plugins stays in
//! `zinc-plugin-api` (which carries a type as its bare ggml id); this crate is linked
//! statically into each side that needs it.

pub mod blocks;
pub mod dequant;
pub mod dtype;
pub mod half;
pub mod random;

pub use dtype::{GgmlType, Grouping, UnknownType};
