//! `/metrics`: Prometheus text, vLLM's metric names under a `zinc:` prefix, labelled by
//! tenant and backend.

use crate::engine::stats::{Histogram, Stats, BUCKETS};
use std::fmt::Write;

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (i, b) in BUCKETS.iter().enumerate() {
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {}", h.counts.get(i).copied().unwrap_or(0));
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// Renders every metric.
pub fn render(s: &Stats, model: &str) -> String {
    let mut o = String::new();
    let base = format!("model_name=\"{}\",backend=\"{}\"", esc(model), esc(&s.backend_name));
    let gauge = |o: &mut String, name: &str, help: &str, v: f64| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{base}}} {v}");
    };
    let counter = |o: &mut String, name: &str, help: &str, v: u64| {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{base}}} {v}");
    };
    gauge(&mut o, "zinc:num_requests_running", "Requests admitted and generating.", s.running() as f64);
    gauge(&mut o, "zinc:num_requests_waiting", "Requests waiting for admission.", s.waiting() as f64);
    let usage = if s.kv_pages_total == 0 { 0.0 } else { s.kv_pages_used as f64 / s.kv_pages_total as f64 };
    gauge(&mut o, "zinc:kv_cache_usage_perc", "Fraction of KV pages referenced (1 = full).", usage);
    gauge(&mut o, "zinc:kv_pages_total", "KV pages in the pool.", s.kv_pages_total as f64);
    gauge(
        &mut o,
        "zinc:kv_pages_cached",
        "KV pages holding a cached prefix that no request references.",
        s.kv_pages_cached as f64,
    );
    gauge(
        &mut o,
        "zinc:kv_window_pages_total",
        "Window pages (sliding-window layers only) in the pool; 0 when those layers use the KV pages.",
        s.kv_window_pages_total as f64,
    );
    gauge(&mut o, "zinc:kv_window_pages_used", "Window pages referenced.", s.kv_window_pages_used as f64);
    counter(&mut o, "zinc:prefix_cache_queries_total", "Prefix-cache page lookups.", s.prefix_queries);
    counter(&mut o, "zinc:prefix_cache_hits_total", "Prefix-cache page hits.", s.prefix_hits);
    counter(&mut o, "zinc:num_preemptions_total", "Requests preempted under KV pressure.", s.preemptions);
    counter(&mut o, "zinc:failovers_total", "Times a failed backend handed its requests to the next one.", s.failovers);
    counter(
        &mut o,
        "zinc:streams_stalled_total",
        "Streamed requests cancelled because their client stopped reading.",
        s.streams_stalled,
    );
    counter(&mut o, "zinc:engine_steps_total", "Engine steps executed.", s.steps);
    counter(
        &mut o,
        "zinc:batch_decodes_deferred_total",
        "Batch-band decodes that waited one step while an interactive prompt had the step.",
        s.batch_decodes_deferred,
    );
    counter(
        &mut o,
        "zinc:batch_decodes_shortened_total",
        "Batch-band decodes left to the next step to keep batch steps short while interactive tenants are active.",
        s.batch_decodes_shortened,
    );
    let dev = format!("{base},device=\"{}\"", esc(&s.device_name));
    for (name, help, v) in [
        ("zinc:backend_submits_total", "Device submissions counted by the backend.", s.backend.submits),
        ("zinc:backend_dispatches_total", "Kernel dispatches counted by the backend.", s.backend.dispatches),
        ("zinc:backend_bytes_uploaded_total", "Bytes copied host to device.", s.backend.bytes_uploaded),
        ("zinc:backend_bytes_downloaded_total", "Bytes copied device to host.", s.backend.bytes_downloaded),
    ] {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{dev}}} {v}");
    }
    histogram(&mut o, "zinc:time_to_first_token_seconds", "Time to first token.", &base, &s.ttft);
    histogram(&mut o, "zinc:inter_token_latency_seconds", "Gap between consecutive tokens of a stream.", &base, &s.itl);
    histogram(&mut o, "zinc:e2e_request_latency_seconds", "Whole-request latency.", &base, &s.e2e);
    histogram(&mut o, "zinc:request_queue_time_seconds", "Time waiting before admission.", &base, &s.queue_time);
    let mut names: Vec<&String> = s.tenants.keys().collect();
    names.sort();
    type Field = fn(&crate::engine::stats::TenantStats) -> f64;
    let per_tenant: [(&str, &str, &str, Field); 10] = [
        ("zinc:tenant_requests_running", "gauge", "Running requests per tenant.", |t| t.running as f64),
        ("zinc:tenant_requests_waiting", "gauge", "Waiting requests per tenant.", |t| t.waiting as f64),
        ("zinc:tenant_kv_pages", "gauge", "KV pages held per tenant.", |t| t.pages as f64),
        ("zinc:tenant_prompt_tokens_total", "counter", "Prompt tokens per tenant.", |t| t.prompt_tokens as f64),
        ("zinc:tenant_generation_tokens_total", "counter", "Generated tokens per tenant.", |t| {
            t.completion_tokens as f64
        }),
        ("zinc:tenant_prefix_cache_hits_total", "counter", "Prefix-cache page hits per tenant.", |t| {
            t.prefix_hits as f64
        }),
        ("zinc:tenant_kv_page_seconds_total", "counter", "KV page-seconds per tenant.", |t| t.kv_page_seconds),
        ("zinc:tenant_queue_seconds_total", "counter", "Seconds waited before admission per tenant.", |t| {
            t.queue_seconds
        }),
        ("zinc:tenant_requests_total", "counter", "Finished requests per tenant.", |t| t.requests as f64),
        ("zinc:tenant_rejected_total", "counter", "Requests refused with 429 per tenant.", |t| t.rejected as f64),
    ];
    for (name, kind, help, f) in per_tenant {
        let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for n in &names {
            let _ = writeln!(o, "{name}{{{base},tenant=\"{}\"}} {}", esc(n), f(&s.tenants[*n]));
        }
    }
    o
}
