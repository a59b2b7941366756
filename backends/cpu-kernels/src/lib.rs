//! The CPU tier's arithmetic as a library: quantized dot-product kernels ([`quant`]), a
//! thread pool that spins between ops ([`pool`]), and the step executor that runs a model
//! program over paged KV ([`exec`]). The `cpu` plugin wraps it; the `kfd` plugin's emulated
//! device binds its kernel objects to the executor's ops.

pub mod exec;
pub mod pool;
pub mod quant;
