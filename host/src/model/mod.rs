//! Models: the GGUF reader and writer, tensor types, tokenizer, chat templates, and one
//! host-side program per architecture.

pub mod arch;
pub mod chat;
pub mod gguf;
#[cfg(test)]
mod gguf_tests;
pub mod gguf_write;
pub mod loaded;
pub mod quant_mix;
pub mod split_experts;
pub mod synth;
pub mod tokenizer;
pub mod tools;
