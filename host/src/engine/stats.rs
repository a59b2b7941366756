//! Numbers the engine keeps for `/metrics` and `/v1/usage`, shared with the HTTP side.

use std::collections::HashMap;

/// Latency buckets (seconds) for the histograms.
pub const BUCKETS: &[f64] = &[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// A Prometheus-style histogram.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    /// Cumulative counts per bucket of [`BUCKETS`], then +Inf.
    pub counts: Vec<u64>,
    /// Sum of observations.
    pub sum: f64,
    /// Observations.
    pub count: u64,
}

impl Histogram {
    /// Records one value.
    pub fn observe(&mut self, v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS.len() + 1];
        }
        for (i, b) in BUCKETS.iter().enumerate() {
            if v <= *b {
                self.counts[i] += 1;
            }
        }
        self.counts[BUCKETS.len()] += 1;
        self.sum += v;
        self.count += 1;
    }
}

/// Per-tenant counters.
#[derive(Debug, Clone, Default)]
pub struct TenantStats {
    /// Requests waiting (accepted, not yet admitted): a copy of the engine's admission count
    /// ([`crate::engine::admission`]) taken for a report, never a decision.
    pub waiting: u32,
    /// Requests admitted and not finished (a copy, as `waiting`).
    pub running: u32,
    /// Prompt tokens of finished and running requests.
    pub prompt_tokens: u64,
    /// Generated tokens.
    pub completion_tokens: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
    /// Prefix-cache hits (pages).
    pub prefix_hits: u64,
    /// KV pages held, integrated over time (page-seconds).
    pub kv_page_seconds: f64,
    /// Time requests spent waiting before admission, summed (seconds).
    pub queue_seconds: f64,
    /// KV pages owned now.
    pub pages: u32,
    /// Requests finished.
    pub requests: u64,
    /// Requests refused with 429.
    pub rejected: u64,
}

/// Everything `/metrics` shows.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// By tenant name.
    pub tenants: HashMap<String, TenantStats>,
    /// KV pages in the pool.
    pub kv_pages_total: u32,
    /// KV pages referenced.
    pub kv_pages_used: u32,
    /// KV pages holding a cached prefix that no sequence references.
    pub kv_pages_cached: u32,
    /// Window pages (the sliding-window layers' own page class) in the pool; 0 without.
    pub kv_window_pages_total: u32,
    /// Window pages referenced.
    pub kv_window_pages_used: u32,
    /// Prefix-cache lookups.
    pub prefix_queries: u64,
    /// Prefix-cache hits.
    pub prefix_hits: u64,
    /// Requests preempted (swapped or recomputed).
    pub preemptions: u64,
    /// Times a failed backend handed its requests to the next one.
    pub failovers: u64,
    /// Streamed requests cancelled because their client stopped reading.
    pub streams_stalled: u64,
    /// Engine steps.
    pub steps: u64,
    /// Batch-band decodes that waited one step because an interactive prompt had the step.
    pub batch_decodes_deferred: u64,
    /// Batch-band decodes left to the next step to keep a batch step as short as an
    /// interactive prompt's step (interactive tenants active).
    pub batch_decodes_shortened: u64,
    /// Time to first token.
    pub ttft: Histogram,
    /// Gap between tokens of a stream.
    pub itl: Histogram,
    /// Whole request.
    pub e2e: Histogram,
    /// Waiting before admission.
    pub queue_time: Histogram,
    /// Backend counters, copied after each step.
    pub backend: zinc_plugin_api::Counters,
    /// Backend name and device, for labels.
    pub backend_name: String,
    /// Device name.
    pub device_name: String,
}

impl Stats {
    /// The tenant's entry.
    pub fn tenant(&mut self, name: &str) -> &mut TenantStats {
        self.tenants.entry(name.to_string()).or_default()
    }
    /// Requests running in total.
    pub fn running(&self) -> u32 {
        self.tenants.values().map(|t| t.running).sum()
    }
    /// Requests waiting in total.
    pub fn waiting(&self) -> u32 {
        self.tenants.values().map(|t| t.waiting).sum()
    }
}
