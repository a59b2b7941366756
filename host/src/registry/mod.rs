//! The backend registry: which plugin runs zinc's work on this node, and why.
//!
//! [`config`] reads `plugins.toml`; [`discover`] finds `libzinc_backend_*.so` files; [`load`]
//! opens each file on its own and checks its interface; [`select`] probes, ranks and opens
//! with fallback, never falling back from a forced choice.

pub mod config;
pub mod discover;
pub mod load;
pub mod select;

pub use config::PluginsConfig;
pub use load::{LoadedPlugin, PluginStatus};
pub use select::{Forced, Opened, Registry, SelectError};
