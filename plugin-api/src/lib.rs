//! The stable ABI between the zinc host and its backend plugins.
//!
//! A backend is a `cdylib` that implements [`Plugin`] and [`BackendImpl`] with ordinary Rust
//! types and exports them with [`export_plugin!`]. The macro builds the abi_stable root module
//! ([`BackendModRef`]) and wraps every entry point so that a panic inside the plugin becomes a
//! [`PluginError`] instead of unwinding into (or aborting) the host.
//!
//! One call crosses the boundary per engine step ([`Step`]), never one per op: the backend
//! receives the whole batch and runs the [`ModelProgram`] the host compiled at load time.

pub mod backend;
pub mod error;
pub mod kv;
pub mod module;
pub mod probe;
pub mod program;
pub mod step;

pub use backend::{
    Backend, BackendBox, BackendImpl, Counters, DeviceOnlyBackend, GuardedBackend, KvPoolInfo, KvPoolSpec, PageCopy,
    SchedulingHints,
};
pub use error::{ErrorKind, PluginError, PluginResult};
pub use kv::{first_window_page, window_keys, KvClass, KvLayout, NO_PAGE, WINDOW_READ_ALIGN};
pub use module::{guard, BackendMod, BackendModRef, OptionList, Plugin, INTERFACE_VERSION};
pub use probe::{DeviceInfo, DeviceKind, ProbeReport};
pub use program::{ActId, AttentionSpan, DType, Hparams, ModelProgram, Op, RopeFreqs, RopeStyle, TensorDesc, TensorId};
pub use step::{summarise_row, top_count, LogitRows, SeqChunk, Step, StepOutput, TOP_CANDIDATES};

/// Re-exported so plugins name the same abi_stable the host was built with.
pub use abi_stable;
