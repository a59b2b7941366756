//! Errors that cross the plugin boundary as values.

use abi_stable::{std_types::RString, StableAbi};
use std::fmt;

/// What went wrong, coarse enough for the host to decide what to do next (fall back to the
/// next backend, refuse the request, or stop).
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The device or driver is missing or refused us; the host may try another backend.
    Unavailable,
    /// The backend cannot do what was asked (an op or tensor type it lacks).
    Unsupported,
    /// The caller passed something inconsistent (bad page id, wrong tensor size).
    InvalidInput,
    /// Device memory or KV pages ran out.
    OutOfMemory,
    /// The device faulted, timed out, or a driver call failed mid-run.
    Device,
    /// The plugin panicked; the panic was caught inside the plugin.
    Panic,
}

/// An error reported by a plugin, with a message meant for the person running zinc.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq)]
pub struct PluginError {
    /// The class of failure.
    pub kind: ErrorKind,
    /// What happened and, where possible, what to do about it.
    pub message: RString,
}

impl PluginError {
    /// Builds an error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: RString::from(message.into()) }
    }
    /// The device or driver cannot be used on this node.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    /// The backend lacks the requested capability.
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unsupported, message)
    }
    /// The caller passed inconsistent input.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }
    /// A driver or device failure during work.
    pub fn device(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Device, message)
    }
}

impl fmt::Display for PluginError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for PluginError {}

/// The Rust-side result type that plugin implementations return.
pub type PluginResult<T> = Result<T, PluginError>;
