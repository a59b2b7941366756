//! Loading one plugin file on its own and checking that it speaks this zinc's interface.
//!
//! Each file is loaded with `lib_header_from_path(..).init_root_module()`, never
//! `RootModule::load_from_file`, which caches the first module of a type and would make
//! side-by-side plugins alias each other.

use super::discover::name_from_file;
use std::path::{Path, PathBuf};
use zinc_plugin_api::{
    abi_stable::library::{lib_header_from_path, LibraryError},
    BackendModRef, ProbeReport, INTERFACE_VERSION,
};

/// Where a plugin file stands after loading and probing.
#[derive(Debug, Clone)]
pub enum PluginStatus {
    /// Loaded and probed.
    Probed(ProbeReport),
    /// Refused before probing (incompatible interface, not a zinc plugin, unloadable).
    Refused(String),
    /// Another file with the same plugin name was found earlier in the search order.
    Shadowed(PathBuf),
}

/// One plugin file.
#[derive(Clone)]
pub struct LoadedPlugin {
    /// The plugin's name (from the module, or from the file name when loading failed).
    pub name: String,
    /// The file.
    pub path: PathBuf,
    /// The interface version the plugin was built against, when readable.
    pub interface: Option<String>,
    /// The module, when the interface matched.
    pub module: Option<BackendModRef>,
    /// Probe outcome or why it was not probed.
    pub status: PluginStatus,
}

impl LoadedPlugin {
    /// The probe report, when the plugin was probed.
    pub fn report(&self) -> Option<&ProbeReport> {
        match &self.status {
            PluginStatus::Probed(r) => Some(r),
            _ => None,
        }
    }

    /// True when the plugin was probed and can run.
    pub fn available(&self) -> bool {
        self.report().is_some_and(|r| r.available)
    }

    /// A one-word status for tables and JSON.
    pub fn status_word(&self) -> &'static str {
        match &self.status {
            PluginStatus::Probed(r) if r.broken => "broken",
            PluginStatus::Probed(r) if r.available => "available",
            PluginStatus::Probed(_) => "unavailable",
            PluginStatus::Refused(_) => "refused",
            PluginStatus::Shadowed(_) => "shadowed",
        }
    }

    /// Why the plugin cannot run, or its note when it can.
    pub fn reason(&self) -> String {
        match &self.status {
            PluginStatus::Probed(r) => r.reason.to_string(),
            PluginStatus::Refused(why) => why.clone(),
            PluginStatus::Shadowed(by) => format!("same plugin name as {}, found first", by.display()),
        }
    }
}

fn refusal(path: &Path, err: &LibraryError) -> String {
    let file = path.display();
    match err {
        LibraryError::IncompatibleVersionNumber { expected_version, actual_version, .. } => format!(
            "{file}: built for plugin interface {actual_version}, this zinc speaks interface \
             {expected_version}; rebuild the plugin against zinc-plugin-api {expected_version}"
        ),
        LibraryError::AbiInstability(_) => format!(
            "{file}: its ABI types differ in layout from this zinc's (interface {INTERFACE_VERSION}); \
             rebuild the plugin against the same zinc-plugin-api"
        ),
        LibraryError::OpenError { .. } | LibraryError::GetSymbolError { .. } => format!(
            "{file}: not a loadable zinc backend plugin ({})",
            err.to_string().lines().find(|l| !l.trim().is_empty()).unwrap_or("no root module")
        ),
        other => format!("{file}: cannot load: {}", other.to_string().trim()),
    }
}

/// zinc's rule, stricter than abi_stable's (which accepts any newer 0.x minor): the same
/// major version, and for 0.x the same minor version too.
pub fn interfaces_compatible(ours: &str, theirs: &str) -> bool {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.split('.');
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parse(ours), parse(theirs)) {
        (Some((0, a)), Some((0, b))) => a == b,
        (Some((a, _)), Some((b, _))) => a == b,
        _ => false,
    }
}

/// Loads one file. Never panics; every failure becomes [`PluginStatus::Refused`].
pub fn load_plugin(path: &Path) -> LoadedPlugin {
    let fallback_name = name_from_file(path);
    let refused = |why: String, interface: Option<String>| LoadedPlugin {
        name: fallback_name.clone(),
        path: path.to_path_buf(),
        interface,
        module: None,
        status: PluginStatus::Refused(why),
    };
    let header = match lib_header_from_path(path) {
        Ok(h) => h,
        Err(e) => return refused(refusal(path, &e), None),
    };
    let theirs = header.version_strings().to_string();
    if !interfaces_compatible(INTERFACE_VERSION, &theirs) {
        let why = format!(
            "{}: built for plugin interface {theirs}, this zinc speaks interface {INTERFACE_VERSION}; \
             rebuild the plugin against zinc-plugin-api {INTERFACE_VERSION}",
            path.display()
        );
        return refused(why, Some(theirs));
    }
    let interface = Some(theirs);
    match header.init_root_module::<BackendModRef>() {
        Ok(module) => {
            let name = module.name()().to_string();
            LoadedPlugin {
                name,
                path: path.to_path_buf(),
                interface,
                module: Some(module),
                status: PluginStatus::Refused("not probed yet".into()),
            }
        }
        Err(e) => refused(refusal(path, &e), interface),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interface_versions_must_agree_on_major_and_0x_minor() {
        assert!(interfaces_compatible("0.1.0", "0.1.7"));
        assert!(!interfaces_compatible("0.1.0", "0.99.0"));
        assert!(!interfaces_compatible("0.2.0", "0.1.0"));
        assert!(interfaces_compatible("1.2.0", "1.0.0"));
        assert!(!interfaces_compatible("1.2.0", "2.0.0"));
        assert!(!interfaces_compatible("0.1.0", "garbage"));
    }

    #[test]
    fn a_file_that_is_not_a_plugin_is_refused_not_fatal() {
        let dir = std::env::temp_dir().join(format!("zinc-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bogus = dir.join("libzinc_backend_bogus.so");
        std::fs::write(&bogus, b"this is not an ELF file").unwrap();
        let p = load_plugin(&bogus);
        std::fs::remove_dir_all(&dir).ok();
        assert!(p.module.is_none());
        assert_eq!(p.status_word(), "refused");
        assert!(p.reason().contains("libzinc_backend_bogus.so"), "{}", p.reason());
    }
}
