//! Per-kernel device time, on request (`ZINC_VULKAN_PROFILE=1`): a timestamp after every
//! dispatch of a step, summed per kernel (per kernel and grid with `ZINC_VULKAN_PROFILE=grid`)
//! and printed to stderr when the backend closes. It tells where a step's time goes on a real
//! GPU; steps are slower while it is on, so benchmarks never enable it.

use crate::context::{vk_err, Context};
use ash::vk;
use std::{collections::HashMap, time::Duration};
use zinc_plugin_api::PluginResult;

/// Timestamps a step may hold (dispatches + 1).
pub const CAPACITY: u32 = 4096;

/// The query pool and the running totals.
pub struct Profiler {
    /// One timestamp per dispatch, after the step's start.
    pub pool: vk::QueryPool,
    totals: HashMap<String, (f64, u64)>,
    period_ns: f64,
    /// Host time per phase of a step, with the steps' rows: what the dispatches' timestamps
    /// cannot show (writing inputs, finding or recording the command buffer, the wait, the
    /// logits' copy out of mapped memory).
    host: HashMap<HostPhase, Duration>,
    host_steps: u64,
}

/// A phase of a step on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HostPhase {
    /// Step inputs written to the upload buffer.
    Inputs,
    /// The recorded command buffer found, or recorded.
    Record,
    /// Submission and the wait for its fence.
    SubmitAndWait,
    /// Reading the step's timestamps (the profile's and the device time's).
    Timestamps,
    /// Logits copied out of the mapped readback buffer.
    Readback,
}

impl Profiler {
    /// A profiler when `ZINC_VULKAN_PROFILE` is set and the queue has timestamps.
    pub fn from_env(ctx: &Context) -> Option<Profiler> {
        if std::env::var_os("ZINC_VULKAN_PROFILE").is_none() || !ctx.caps.timestamps {
            return None;
        }
        let info = vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(CAPACITY);
        // SAFETY: plain create; destroyed in `destroy`.
        let pool = unsafe { ctx.device.create_query_pool(&info, None) }.ok()?;
        Some(Profiler {
            pool,
            totals: HashMap::new(),
            period_ns: ctx.caps.timestamp_period as f64,
            host: HashMap::new(),
            host_steps: 0,
        })
    }

    /// Adds the finished step's per-dispatch times (`names[i]` ran between timestamps i and i+1).
    pub fn collect(&mut self, ctx: &Context, names: &[String]) -> PluginResult<()> {
        let n = (names.len() + 1).min(CAPACITY as usize);
        let mut t = vec![0u64; n];
        // SAFETY: the step that wrote these queries has finished.
        unsafe {
            ctx.device.get_query_pool_results(
                self.pool,
                0,
                &mut t,
                vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT,
            )
        }
        .map_err(vk_err("reading profile timestamps"))?;
        for (i, name) in names.iter().enumerate().take(n - 1) {
            let e = self.totals.entry(name.clone()).or_insert((0.0, 0));
            e.0 += t[i + 1].saturating_sub(t[i]) as f64 * self.period_ns;
            e.1 += 1;
        }
        Ok(())
    }

    /// Adds one step's host phases.
    pub fn host_step(&mut self, phases: &[(HostPhase, Duration)]) {
        self.host_steps += 1;
        for &(p, d) in phases {
            *self.host.entry(p).or_default() += d;
        }
    }

    /// Prints the totals and frees the pool.
    pub fn destroy(self, ctx: &Context) {
        let mut host: Vec<_> = self.host.iter().collect();
        host.sort();
        eprintln!("vulkan host phases over {} steps: phase, total ms, µs per step", self.host_steps);
        for (phase, d) in host {
            let ms = d.as_secs_f64() * 1e3;
            eprintln!("  {:<34} {ms:>10.2} {:>9.1}", format!("{phase:?}"), ms * 1e3 / self.host_steps.max(1) as f64);
        }
        let mut rows: Vec<_> = self.totals.iter().collect();
        rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        let all: f64 = rows.iter().map(|r| r.1 .0).sum();
        eprintln!("vulkan profile: kernel, total ms, share, calls, µs per call");
        for (name, (ns, calls)) in rows {
            eprintln!(
                "  {name:<34} {:>10.2} {:>5.1}% {:>8} {:>9.1}",
                ns / 1e6,
                100.0 * ns / all,
                calls,
                ns / 1e3 / *calls as f64
            );
        }
        // SAFETY: the device is idle when the backend closes.
        unsafe { ctx.device.destroy_query_pool(self.pool, None) };
    }
}
