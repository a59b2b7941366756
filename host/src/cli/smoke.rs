//! `zinc smoke NAME`: run a driver's self-test on this node and print its evidence.

use crate::registry::{PluginsConfig, Registry};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use zinc_plugin_api::{
    abi_stable::std_types::{RResult, RString, Tuple2},
    OptionList,
};

/// Options of `zinc smoke`.
#[derive(Debug, clap::Args)]
pub struct SmokeArgs {
    /// The backend to test (`kfd`, `userq`).
    pub backend: String,
    /// Test-only: run against an emulated node described by this file instead of the kernel.
    #[arg(long)]
    pub emulate: Option<PathBuf>,
}

/// Runs `zinc smoke`; exits non-zero with the reason on any failure.
pub fn run(config: Option<&Path>, args: SmokeArgs) -> Result<i32> {
    let cfg = PluginsConfig::locate(config)?;
    let mut options: OptionList = cfg.options_for(&args.backend);
    if let Some(e) = &args.emulate {
        options.retain(|kv| kv.0.as_str() != "emulate");
        options.push(Tuple2(RString::from("emulate"), RString::from(e.display().to_string())));
    }
    let reg = Registry::discover(cfg);
    let Some(plugin) = reg.find(&args.backend) else {
        bail!(
            "no plugin named `{}` was found (found: {})",
            args.backend,
            reg.plugins.iter().map(|p| p.name.as_str()).collect::<Vec<_>>().join(", ")
        );
    };
    let Some(module) = plugin.module else {
        bail!("{}: {}", plugin.path.display(), plugin.reason());
    };
    let Some(smoke) = module.smoke() else {
        bail!("{} was built before plugins had smoke tests; rebuild it", plugin.path.display());
    };
    match smoke(&options) {
        RResult::ROk(report) => {
            println!("{report}");
            println!("smoke {}: ok", args.backend);
            Ok(0)
        }
        RResult::RErr(e) => {
            eprintln!("zinc: smoke {} failed: {}", args.backend, e.message);
            Ok(1)
        }
    }
}
