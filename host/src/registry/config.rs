//! `plugins.toml`: search paths, preference order, per-plugin options, an optional forced
//! backend.
//!
//! ```toml
//! search_paths = ["target/release", "plugins"]   # relative to this file's directory
//! order = ["userq", "kfd", "vulkan", "cpu"]      # tie-break between equal scores
//! # backend = "cpu"                              # force one backend; never falls back
//!
//! [plugins.kfd]
//! emulate = "tests/fixtures/nodes/kfd-no-userq.toml"   # test-only: a fake AMD node
//! ```
//!
//! The file is found at `--config FILE`, else `$ZINC_CONFIG`, else next to the `zinc` binary;
//! with none, built-in defaults apply (search next to the binary). A `plugins.toml` in the
//! working directory is not read unless named: it can load any `.so`, and a directory a user
//! happens to run zinc in should not decide what code zinc loads.

use anyhow::{Context, Result};
use serde::Deserialize;
use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
};
use zinc_plugin_api::abi_stable::std_types::{RString, Tuple2};
use zinc_plugin_api::OptionList;

/// The parsed configuration.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginsConfig {
    /// Directories to search for plugin files, relative to the config file's directory.
    #[serde(default)]
    pub search_paths: Vec<PathBuf>,
    /// Preference order between plugins of equal score; unlisted plugins come after.
    #[serde(default)]
    pub order: Vec<String>,
    /// A backend to force (overridden by `ZINC_BACKEND` and `--backend`).
    pub backend: Option<String>,
    /// Options passed to each plugin's probe and open, by plugin name.
    #[serde(default)]
    pub plugins: BTreeMap<String, toml::Table>,
    /// The file this came from, if any.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

impl PluginsConfig {
    /// Reads the configuration from an explicit file, the environment or the binary's
    /// directory, in that order.
    pub fn locate(explicit: Option<&Path>) -> Result<Self> {
        if let Some(p) = explicit {
            return Self::from_file(p);
        }
        if let Some(p) = std::env::var_os("ZINC_CONFIG").filter(|p| !p.is_empty()) {
            return Self::from_file(Path::new(&p)).context("reading the file named by ZINC_CONFIG");
        }
        match exe_dir().map(|d| d.join("plugins.toml")).filter(|p| p.is_file()) {
            Some(p) => Self::from_file(&p),
            None => Ok(Self::default()),
        }
    }

    /// Reads one configuration file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("cannot read plugin config {}", path.display()))?;
        let mut cfg: Self =
            toml::from_str(&text).with_context(|| format!("plugin config {} is not valid", path.display()))?;
        cfg.source = Some(path.to_path_buf());
        Ok(cfg)
    }

    /// Every directory to search, in order: `$ZINC_PLUGIN_PATH` (colon-separated), the
    /// configured search paths, then the binary's own directory.
    pub fn search_dirs(&self) -> Vec<PathBuf> {
        let mut dirs: Vec<PathBuf> = std::env::var("ZINC_PLUGIN_PATH")
            .map(|v| v.split(':').filter(|s| !s.is_empty()).map(PathBuf::from).collect())
            .unwrap_or_default();
        let base = self.source.as_deref().and_then(Path::parent).map(Path::to_path_buf).unwrap_or_default();
        dirs.extend(self.search_paths.iter().map(|p| base.join(p)));
        dirs.extend(exe_dir());
        let mut seen = Vec::new();
        dirs.retain(|d| {
            let key = d.canonicalize().unwrap_or_else(|_| d.clone());
            let fresh = !seen.contains(&key);
            seen.push(key);
            fresh
        });
        dirs
    }

    /// The options for plugin `name`, as strings.
    pub fn options_for(&self, name: &str) -> OptionList {
        self.plugins
            .get(name)
            .map(|t| {
                t.iter()
                    .map(|(k, v)| {
                        let v = match v {
                            toml::Value::String(s) => s.clone(),
                            toml::Value::Integer(i) => i.to_string(),
                            toml::Value::Float(f) => f.to_string(),
                            toml::Value::Boolean(b) => b.to_string(),
                            other => format!("{other:?}"),
                        };
                        Tuple2(RString::from(k.as_str()), RString::from(v))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Position of `name` in the preference order (unlisted: after every listed one).
    pub fn order_index(&self, name: &str) -> usize {
        self.order.iter().position(|n| n == name).unwrap_or(self.order.len())
    }
}

/// The directory holding the running binary.
pub fn exe_dir() -> Option<PathBuf> {
    std::env::current_exe().ok()?.parent().map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_passed_as_strings() {
        let cfg: PluginsConfig = toml::from_str("[plugins.kfd]\nemulate = \"x.toml\"\nqueues = 2\n").unwrap();
        let opts = cfg.options_for("kfd");
        assert_eq!(zinc_plugin_api::module::option(&opts, "emulate"), Some("x.toml"));
        assert_eq!(zinc_plugin_api::module::option(&opts, "queues"), Some("2"));
        assert!(cfg.options_for("cpu").is_empty());
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(toml::from_str::<PluginsConfig>("serch_paths = []").is_err());
    }

    #[test]
    fn unlisted_plugins_order_after_listed_ones() {
        let cfg: PluginsConfig = toml::from_str("order = [\"kfd\", \"cpu\"]").unwrap();
        assert!(cfg.order_index("kfd") < cfg.order_index("cpu"));
        assert!(cfg.order_index("cpu") < cfg.order_index("wgpu"));
    }
}
