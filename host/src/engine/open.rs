//! Opening the best backend that can actually run a given model.

use super::sequence::{check, create_pool};
use crate::{
    model::loaded::Model,
    registry::{Forced, Opened, PluginsConfig, Registry},
};
use anyhow::Result;
use std::path::Path;

/// Finds plugins, then opens the best backend that loads `model` and allocates a KV pool for
/// `n_seqs` sequences of `ctx` tokens; a backend that fails either is skipped with its reason
/// (never when forced). Returns the backend and the number of KV pages.
pub fn open_for_model(
    config: Option<&Path>,
    backend: Option<&str>,
    model: &Model,
    ctx: u32,
    n_seqs: u32,
) -> Result<(Opened, u32)> {
    let cfg = PluginsConfig::locate(config)?;
    let forced = Forced::resolve(backend, &cfg);
    let reg = Registry::discover(cfg);
    let mut pages = 0;
    let opened = reg.open(forced.as_ref(), |b| {
        check(b.load_model(&model.program)).map_err(|e| format!("cannot load {}: {e}", model.name))?;
        pages = create_pool(b, ctx, n_seqs).map_err(|e| e.to_string())?;
        Ok(())
    })?;
    for (name, why) in &opened.skipped {
        tracing::info!("skipped backend {name}: {why}");
    }
    Ok((opened, pages))
}
