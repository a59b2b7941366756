//! Models: the GGUF reader and writer, tensor types, tokenizer, chat templates, and one
//! host-side program per architecture.

pub mod gguf;
pub mod gguf_write;
#[cfg(test)]
mod gguf_tests;
pub mod tokenizer;
pub mod arch;
pub mod loaded;
pub mod chat;
pub mod synth;
