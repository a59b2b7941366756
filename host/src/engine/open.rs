//! Opening the best backend that can actually run a given model.

use super::sequence::{check, create_pool, PoolSize};
use crate::{
    model::loaded::Model,
    registry::{Forced, Opened, PluginsConfig, Registry},
};
use anyhow::Result;
use std::path::Path;
use zinc_plugin_api::{window_keys, KvPoolInfo};

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
    let (opened, pool) = open_for_model_except(config, backend, &[], model, PoolSize::plain(ctx, n_seqs))?;
    Ok((opened, pool.n_pages))
}

/// [`open_for_model`] skipping the plugins named in `failed` (failover after a backend failed
/// while serving), with a KV pool of `size`; returns what the backend allocated.
pub fn open_for_model_except(
    config: Option<&Path>,
    backend: Option<&str>,
    failed: &[String],
    model: &Model,
    size: PoolSize,
) -> Result<(Opened, KvPoolInfo)> {
    let cfg = PluginsConfig::locate(config)?;
    let forced = Forced::resolve(backend, &cfg);
    let reg = Registry::discover(cfg);
    let mut pool = None;
    let opened = reg.open_except(forced.as_ref(), failed, |b| {
        let program = model.program_for_context(size.ctx);
        check(b.load_model(&program)).map_err(|e| format!("cannot load {}: {e}", model.name))?;
        pool = Some(create_pool(b, size, window_keys(&program)).map_err(|e| e.to_string())?);
        Ok(())
    })?;
    for (name, why) in &opened.skipped {
        tracing::info!("skipped backend {name}: {why}");
    }
    Ok((opened, pool.expect("a backend opened only after its pool was made")))
}

/// What [`prepare_steps`] did: how long it took and how many kernels the backend compiled.
pub struct Prepared {
    /// Wall time of the preparation.
    pub took: std::time::Duration,
    /// Kernels the backend compiled for it.
    pub kernels: u64,
}

/// Has the backend ready every step shape of up to `max_rows` rows before the first request,
/// so that no request waits for a kernel compile when the mix of streams changes (a backend
/// without per-shape kernels does nothing).
pub fn prepare_steps(backend: &mut zinc_plugin_api::BackendBox, max_rows: u32) -> Result<Prepared> {
    let (started, before) = (std::time::Instant::now(), backend.counters().kernels_compiled);
    check(backend.prepare_steps(max_rows))?;
    Ok(Prepared { took: started.elapsed(), kernels: backend.counters().kernels_compiled - before })
}
