//! Helpers shared by the cross-crate tests: where the built `zinc` binary and plugin files
//! are, scratch directories, and running `zinc` with a controlled environment.
//!
//! The tests drive the real binary and real `.so` files, so build the workspace first
//! (`scripts/test.sh` does): `cargo build --workspace && scripts/build-test-fixtures.sh`.

use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
    sync::atomic::{AtomicU32, Ordering},
};

/// The cargo profile directory the tests were built into (`target/debug`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    // target/debug/deps/<test-binary>
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo root").to_path_buf()
}

/// A built artifact, with a clear failure when it is missing.
pub fn artifact(name: &str) -> PathBuf {
    let p = profile_dir().join(name);
    assert!(
        p.exists(),
        "{} is missing: run `cargo build --workspace && scripts/build-test-fixtures.sh` first (scripts/test.sh does)",
        p.display()
    );
    p
}

/// The `zinc` binary.
pub fn zinc_bin() -> PathBuf {
    artifact("zinc")
}

/// A backend plugin file by backend name (`cpu` → `libzinc_backend_cpu.so`).
pub fn plugin_file(name: &str) -> PathBuf {
    artifact(&format!("libzinc_backend_{name}.so"))
}

/// A scratch directory removed on drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A new empty directory under the system temp dir.
    pub fn new(tag: &str) -> Scratch {
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "zinc-test-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("scratch dir");
        Scratch(p)
    }
    /// A path inside the directory.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `zinc` command with a clean environment: no inherited zinc variables, run from `cwd`.
pub fn zinc(bin: &Path, cwd: &Path) -> Command {
    let mut c = Command::new(bin);
    c.current_dir(cwd);
    for var in ["ZINC_BACKEND", "ZINC_CONFIG", "ZINC_PLUGIN_PATH", "ZINC_LOG"] {
        c.env_remove(var);
    }
    c
}

/// Writes `zinc synth --preset PRESET` (seed 1, the default model's tokenizer) into `dir` and
/// returns its path, for tests that start from a small model file.
pub fn synth_preset(dir: &Scratch, preset: &str) -> PathBuf {
    let path = dir.join(&format!("{preset}.gguf"));
    let out = zinc(&zinc_bin(), &repo_root()).args(["synth", "--preset", preset, "-o"]).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    path
}

/// Output as text, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `zinc probe --json` and parses the answer (whatever the exit code).
pub fn probe_json(cmd: &mut Command) -> (Output, serde_json::Value) {
    let out = cmd.args(["probe", "--json"]).output().expect("run zinc");
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("probe --json did not print JSON ({e}):\n{}", describe(&out)));
    (out, v)
}

/// The entry for plugin `name` in a probe JSON answer.
pub fn plugin<'a>(probe: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    probe["plugins"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("plugin {name} not in probe output: {probe:#}"))
}

/// Environment variable of `key = value` lines added to the options of every Vulkan backend
/// the tests open (a key the test sets itself wins). CI runs the Vulkan cases that take
/// subgroup kernels a second time on lavapipe with 32-wide subgroups
/// (`LP_NATIVE_VECTOR_WIDTH=1024`), the width those kernels need and that a GPU has, with
/// `int_dot = false`: the integer-dot products go wrong there, lavapipe being run past its
/// maximum vector width (docs/tests.md).
pub const EXTRA_VULKAN_OPTIONS: &str = "ZINC_TEST_VULKAN_OPTIONS";

/// Opens backend `name` (forced, from the plugin files of this build) with `options` as its
/// `[plugins.NAME]` table; on Vulkan, the device `ZINC_VULKAN_DEVICE` names if set, and the
/// options in [`EXTRA_VULKAN_OPTIONS`].
pub fn open_backend(name: &str, options: &str) -> zinc_plugin_api::BackendBox {
    use zinc::registry::{config::PluginsConfig, select::Forced, select::Registry};
    std::env::set_var("ZINC_PLUGIN_PATH", profile_dir());
    let dir = Scratch::new("vk-cfg");
    let mut text = format!("[plugins.{name}]\n{options}\n");
    if name == "vulkan" {
        if let Ok(d) = std::env::var("ZINC_VULKAN_DEVICE") {
            text.push_str(&format!("device = {d:?}\n"));
        }
        let key = |line: &str| line.split('=').next().unwrap_or_default().trim().to_string();
        let own: Vec<String> = options.lines().map(key).collect();
        for line in std::env::var(EXTRA_VULKAN_OPTIONS).unwrap_or_default().lines() {
            if !line.trim().is_empty() && !own.contains(&key(line)) {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    std::fs::write(dir.join("plugins.toml"), text).unwrap();
    let reg = Registry::discover(PluginsConfig::from_file(&dir.join("plugins.toml")).unwrap());
    let forced = Forced { name: name.into(), by: "test".into() };
    match reg.open(Some(&forced), |_| Ok(())) {
        Ok(o) => o.backend,
        Err(e) => panic!(
            "cannot open the {name} backend: {e}\n(the Vulkan tests need a Vulkan device: on a machine without a GPU \
             install Mesa's lavapipe, `apt-get install mesa-vulkan-drivers`; scripts/setup.sh does)"
        ),
    }
}

/// A `zinc synth` model of `preset` with `seed`, written in `dir` and loaded.
pub fn synth_model(dir: &Scratch, preset: &str, seed: u64) -> zinc::model::loaded::Model {
    let out = dir.join(&format!("{preset}.gguf"));
    let st = zinc(&zinc_bin(), &repo_root())
        .args(["synth", "--preset", preset, "--seed", &seed.to_string(), "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(st.status.success(), "{}", describe(&st));
    zinc::model::loaded::Model::load(&out).unwrap()
}
