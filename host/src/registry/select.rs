//! Probing, ranking and opening with fallback.

use super::{
    config::PluginsConfig,
    discover::plugin_files,
    load::{load_plugin, LoadedPlugin, PluginStatus},
};
use std::{fmt, path::PathBuf};
use zinc_plugin_api::{abi_stable::std_types::RResult, BackendBox, DeviceInfo};

/// A forced backend and who forced it, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Forced {
    /// The backend name.
    pub name: String,
    /// `--backend`, `ZINC_BACKEND` or the config file.
    pub by: String,
}

impl Forced {
    /// The forced choice in effect: the command-line flag, else `ZINC_BACKEND`, else the
    /// config file's `backend`.
    pub fn resolve(flag: Option<&str>, config: &PluginsConfig) -> Option<Forced> {
        let env = std::env::var("ZINC_BACKEND").ok().filter(|s| !s.is_empty());
        if let Some(n) = flag {
            Some(Forced { name: n.to_string(), by: "--backend".into() })
        } else if let Some(n) = env {
            Some(Forced { name: n, by: "ZINC_BACKEND".into() })
        } else {
            config.backend.clone().map(|n| Forced { name: n, by: "plugins.toml".into() })
        }
    }
}

/// Every plugin file found, loaded and probed, with the configuration that found them.
pub struct Registry {
    /// The configuration in effect.
    pub config: PluginsConfig,
    /// Directories searched, in order.
    pub search_dirs: Vec<PathBuf>,
    /// Every plugin file found, in search order.
    pub plugins: Vec<LoadedPlugin>,
}

/// A backend that opened, and what was skipped on the way.
pub struct Opened {
    /// The plugin's name.
    pub name: String,
    /// The plugin file.
    pub path: PathBuf,
    /// The backend object.
    pub backend: BackendBox,
    /// The device it reports (queried from the backend, not from the probe).
    pub device: DeviceInfo,
    /// Plugins tried before it, with the reason each was passed over.
    pub skipped: Vec<(String, String)>,
}

/// Why no backend could be opened.
#[derive(Debug, Clone, PartialEq)]
pub enum SelectError {
    /// The forced backend is not among the plugins found.
    ForcedMissing { forced: Forced, known: Vec<String> },
    /// The forced backend exists but cannot run.
    ForcedFailed { forced: Forced, reason: String },
    /// No plugin could be opened at all.
    NothingUsable { searched: Vec<PathBuf>, skipped: Vec<(String, String)> },
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectError::ForcedMissing { forced, known } => write!(
                f,
                "backend `{}` was forced by {} but no such plugin was found (found: {}); \
                 check the name or add its directory to ZINC_PLUGIN_PATH",
                forced.name,
                forced.by,
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ),
            SelectError::ForcedFailed { forced, reason } => write!(
                f,
                "backend `{}` was forced by {} but cannot run: {reason}. zinc does not fall back \
                 from a forced backend; remove the setting to let zinc choose",
                forced.name, forced.by
            ),
            SelectError::NothingUsable { searched, skipped } => {
                write!(f, "no backend could be opened")?;
                if skipped.is_empty() {
                    let dirs: Vec<String> = searched.iter().map(|d| d.display().to_string()).collect();
                    write!(f, ": no plugin files (libzinc_backend_*.so) in {}", dirs.join(", "))
                } else {
                    for (n, why) in skipped {
                        write!(f, "; {n}: {why}")?;
                    }
                    Ok(())
                }
            }
        }
    }
}

impl std::error::Error for SelectError {}

impl Registry {
    /// Finds, loads and probes every plugin. A plugin that fails or panics is recorded as
    /// refused or broken; the others go on.
    pub fn discover(config: PluginsConfig) -> Registry {
        let search_dirs = config.search_dirs();
        let mut plugins: Vec<LoadedPlugin> = Vec::new();
        for path in plugin_files(&search_dirs) {
            let mut p = load_plugin(&path);
            if let Some(first) = plugins.iter().find(|q| q.name == p.name && q.module.is_some()) {
                if p.module.is_some() {
                    p.status = PluginStatus::Shadowed(first.path.clone());
                    p.module = None;
                }
            }
            if let Some(module) = p.module {
                let options = config.options_for(&p.name);
                tracing::debug!(plugin = %p.name, file = %p.path.display(), "probing");
                p.status = PluginStatus::Probed(module.probe()(&options));
            }
            plugins.push(p);
        }
        Registry { config, search_dirs, plugins }
    }

    /// Available plugins, best first: by score, then by the configured order, then by name.
    pub fn ranking(&self) -> Vec<&LoadedPlugin> {
        let mut v: Vec<&LoadedPlugin> = self.plugins.iter().filter(|p| p.available()).collect();
        v.sort_by_key(|p| {
            let score = p.report().map_or(0, |r| r.score);
            (std::cmp::Reverse(score), self.config.order_index(&p.name), p.name.clone())
        });
        v
    }

    /// The plugin named `name` (the first one found, never a shadowed copy).
    pub fn find(&self, name: &str) -> Option<&LoadedPlugin> {
        self.plugins.iter().find(|p| p.name == name && !matches!(p.status, PluginStatus::Shadowed(_)))
    }

    /// Opens the best backend, or the forced one. `accept` runs on each opened backend (for
    /// example loading the model); if it fails, the next backend is tried, except when the
    /// choice was forced.
    pub fn open(
        &self,
        forced: Option<&Forced>,
        accept: impl FnMut(&mut BackendBox) -> Result<(), String>,
    ) -> Result<Opened, SelectError> {
        self.open_except(forced, &[], accept)
    }

    /// [`Registry::open`] without trying the plugins named in `failed` (backends that failed
    /// while serving: failover opens the next one and never the same one again).
    pub fn open_except(
        &self,
        forced: Option<&Forced>,
        failed: &[String],
        mut accept: impl FnMut(&mut BackendBox) -> Result<(), String>,
    ) -> Result<Opened, SelectError> {
        if let Some(forced) = forced {
            let Some(p) = self.find(&forced.name) else {
                let known = self.plugins.iter().map(|p| p.name.clone()).collect();
                return Err(SelectError::ForcedMissing { forced: forced.clone(), known });
            };
            if !p.available() {
                return Err(SelectError::ForcedFailed { forced: forced.clone(), reason: p.reason() });
            }
            return self
                .try_open(p, &mut accept)
                .map(|(backend, device)| Opened {
                    name: p.name.clone(),
                    path: p.path.clone(),
                    backend,
                    device,
                    skipped: Vec::new(),
                })
                .map_err(|reason| SelectError::ForcedFailed { forced: forced.clone(), reason });
        }
        let mut skipped: Vec<(String, String)> = self
            .plugins
            .iter()
            .filter(|p| !p.available())
            .map(|p| (p.name.clone(), format!("{}: {}", p.status_word(), p.reason())))
            .collect();
        for p in self.ranking() {
            if failed.contains(&p.name) {
                skipped.push((p.name.clone(), "failed while serving".into()));
                continue;
            }
            match self.try_open(p, &mut accept) {
                Ok((backend, device)) => {
                    return Ok(Opened { name: p.name.clone(), path: p.path.clone(), backend, device, skipped })
                }
                Err(why) => {
                    tracing::info!(plugin = %p.name, reason = %why, "falling back");
                    skipped.push((p.name.clone(), why));
                }
            }
        }
        Err(SelectError::NothingUsable { searched: self.search_dirs.clone(), skipped })
    }

    fn try_open(
        &self,
        p: &LoadedPlugin,
        accept: &mut impl FnMut(&mut BackendBox) -> Result<(), String>,
    ) -> Result<(BackendBox, DeviceInfo), String> {
        let module = p.module.ok_or_else(|| p.reason())?;
        let options = self.config.options_for(&p.name);
        let mut backend = match module.open()(&options) {
            RResult::ROk(b) => b,
            RResult::RErr(e) => return Err(format!("open failed: {}", e.message)),
        };
        accept(&mut backend)?;
        let device = backend.device();
        Ok((backend, device))
    }
}
