//! The engine: sampling, and driving a backend step by step.

pub mod open;
pub mod sampler;
pub mod sequence;
