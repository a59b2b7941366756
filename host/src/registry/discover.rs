//! Finding plugin files: every `libzinc_backend_*.so` in the search directories, listed in
//! `plugins.toml` or not, so a new backend is a drop-in file.

use std::path::{Path, PathBuf};

/// File name prefix and suffix of a backend plugin.
pub const PLUGIN_PREFIX: &str = "libzinc_backend_";
/// Shared-library suffix on this platform.
pub const PLUGIN_SUFFIX: &str = std::env::consts::DLL_SUFFIX;

/// True when `name` looks like a backend plugin file.
pub fn is_plugin_file_name(name: &str) -> bool {
    name.starts_with(PLUGIN_PREFIX)
        && name.ends_with(PLUGIN_SUFFIX)
        && name.len() > PLUGIN_PREFIX.len() + PLUGIN_SUFFIX.len()
}

/// Plugin files in `dirs`, in directory order then name order. Missing directories are
/// skipped silently (a search path may legitimately not exist yet).
pub fn plugin_files(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else { continue };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(is_plugin_file_name))
            .collect();
        files.sort();
        out.extend(files);
    }
    out
}

/// The plugin name implied by a file name (`libzinc_backend_cpu.so` → `cpu`), used before the
/// plugin's own name is known (for example when loading it failed).
pub fn name_from_file(path: &Path) -> String {
    path.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(PLUGIN_PREFIX))
        .and_then(|n| n.strip_suffix(PLUGIN_SUFFIX))
        .unwrap_or("?")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_backend_libraries_match() {
        assert!(is_plugin_file_name("libzinc_backend_cpu.so"));
        assert!(!is_plugin_file_name("libzinc_backend_.so"));
        assert!(!is_plugin_file_name("libzinc_fixture_panicky.so"));
        assert!(!is_plugin_file_name("libzinc_backend_cpu.rlib"));
        assert_eq!(name_from_file(Path::new("/x/libzinc_backend_vulkan.so")), "vulkan");
    }
}
