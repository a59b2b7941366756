//! `zinc probe`: every plugin, what it found, and which backend zinc would use.

use crate::registry::{Forced, LoadedPlugin, PluginsConfig, Registry};
use anyhow::Result;
use serde_json::{json, Value};
use std::path::Path;
use zinc_plugin_api::DeviceInfo;

/// Options of `zinc probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Print JSON for scripts instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

fn device_line(d: &DeviceInfo) -> String {
    let feats: Vec<&str> = d.features.iter().map(|f| f.as_str()).collect();
    format!("{} [{}, {}, {}] {}", d.name, d.kind.label(), gib(d.memory_bytes), d.driver, feats.join(" "))
}

fn device_json(d: &DeviceInfo) -> Value {
    json!({
        "name": d.name.as_str(),
        "vendor": d.vendor.as_str(),
        "driver": d.driver.as_str(),
        "kind": d.kind.label(),
        "memory_bytes": d.memory_bytes,
        "features": d.features.iter().map(|f| f.as_str()).collect::<Vec<_>>(),
    })
}

fn plugin_json(p: &LoadedPlugin) -> Value {
    let report = p.report();
    json!({
        "name": p.name,
        "file": p.path.display().to_string(),
        "interface": p.interface,
        "status": p.status_word(),
        "reason": p.reason(),
        "score": report.map(|r| r.score),
        "devices": report.map(|r| r.devices.iter().map(device_json).collect::<Vec<_>>()).unwrap_or_default(),
        "details": report
            .map(|r| r.details.iter().map(|kv| (kv.0.to_string(), Value::from(kv.1.as_str()))).collect::<serde_json::Map<_, _>>())
            .unwrap_or_default(),
    })
}

fn print_table(reg: &Registry) {
    println!(
        "config: {}",
        reg.config.source.as_deref().map_or("(built-in defaults)".into(), |p| p.display().to_string())
    );
    let dirs: Vec<String> = reg.search_dirs.iter().map(|d| d.display().to_string()).collect();
    println!("search: {}", dirs.join(":"));
    println!();
    println!("{:<8} {:<11} {:>5}  {:<9}  FILE / DEVICES / REASON", "PLUGIN", "STATUS", "SCORE", "INTERFACE");
    for p in &reg.plugins {
        let score = p.report().filter(|r| r.available).map_or("-".into(), |r| r.score.to_string());
        println!(
            "{:<8} {:<11} {:>5}  {:<9}  {}",
            p.name,
            p.status_word(),
            score,
            p.interface.as_deref().unwrap_or("?"),
            p.path.display()
        );
        if let Some(r) = p.report() {
            for d in r.devices.iter() {
                println!("{:38}device: {}", "", device_line(d));
            }
            for kv in r.details.iter() {
                println!("{:38}{}: {}", "", kv.0, kv.1);
            }
        }
        let reason = p.reason();
        if !reason.is_empty() {
            println!("{:38}{}", "", reason);
        }
    }
    println!();
}

/// Runs `zinc probe`; exits non-zero when a forced backend cannot run or nothing can.
pub fn run(config: Option<&Path>, backend: Option<&str>, args: ProbeArgs) -> Result<i32> {
    let cfg = PluginsConfig::locate(config)?;
    let forced = Forced::resolve(backend, &cfg);
    let reg = Registry::discover(cfg);
    let chosen = reg.open(forced.as_ref(), |_| Ok(()));
    let ranking: Vec<String> = reg.ranking().iter().map(|p| p.name.clone()).collect();
    if args.json {
        let mut out = json!({
            "interface": zinc_plugin_api::INTERFACE_VERSION,
            "config": reg.config.source.as_ref().map(|p| p.display().to_string()),
            "search_paths": reg.search_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>(),
            "forced": forced.as_ref().map(|f| json!({"name": f.name, "by": f.by})),
            "plugins": reg.plugins.iter().map(plugin_json).collect::<Vec<_>>(),
            "ranking": ranking,
        });
        match &chosen {
            Ok(o) => {
                out["chosen"] =
                    json!({"name": o.name, "file": o.path.display().to_string(), "device": device_json(&o.device)});
                out["fallback"] = json!(ranking.iter().filter(|n| **n != o.name).collect::<Vec<_>>());
                out["skipped"] =
                    json!(o.skipped.iter().map(|(n, w)| json!({"name": n, "reason": w})).collect::<Vec<_>>());
            }
            Err(e) => out["error"] = json!(e.to_string()),
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print_table(&reg);
        if let Ok(o) = &chosen {
            println!("chosen: {} on {} ({})", o.name, o.device.name, o.device.kind.label());
            let rest: Vec<&str> = ranking.iter().filter(|n| **n != o.name).map(String::as_str).collect();
            println!("fallback chain: {}", if rest.is_empty() { "none".into() } else { rest.join(" → ") });
            if let Some(f) = &forced {
                println!("forced by {}: {} (no fallback)", f.by, f.name);
            }
        }
    }
    match chosen {
        Ok(_) => Ok(0),
        Err(e) => {
            eprintln!("zinc: {e}");
            Ok(2)
        }
    }
}
