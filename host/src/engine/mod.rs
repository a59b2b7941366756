//! The engine: sampling, and driving a backend step by step.

pub mod admission;
pub mod constraint;
pub mod fair;
pub mod kv;
pub mod logprobs;
pub mod open;
pub mod output;
pub mod pages;
pub mod request;
pub mod sampler;
pub mod scheduler;
pub mod sequence;
pub mod stats;
