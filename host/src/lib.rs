//! zinc: a local LLM serving runtime whose drivers are plugins chosen per node at start-up.
//!
//! * [`registry`]: finds backend plugin files, checks their interface, probes, ranks and
//!   opens them with fallback.
//! * [`cli`]: the `zinc` command's subcommands.

pub mod cli;
pub mod engine;
pub mod model;
pub mod registry;
pub mod server;
