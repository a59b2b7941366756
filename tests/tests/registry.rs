//! The backend registry, driven through the real `zinc` binary and real plugin files.

use std::fs;
use zinc_tests::*;

/// A private install: the zinc binary copied next to an empty plugin directory, so nothing
/// from the build directory is discovered by accident.
struct Install {
    dir: Scratch,
}

impl Install {
    fn new(tag: &str) -> Install {
        let dir = Scratch::new(tag);
        fs::create_dir_all(dir.join("bin")).unwrap();
        fs::create_dir_all(dir.join("plugins")).unwrap();
        fs::copy(zinc_bin(), dir.join("bin/zinc")).unwrap();
        Install { dir }
    }
    fn add_plugin(&self, from: &std::path::Path, as_name: &str) {
        fs::copy(from, self.dir.join(&format!("plugins/libzinc_backend_{as_name}.so"))).unwrap();
    }
    fn cmd(&self) -> std::process::Command {
        let mut c = zinc(&self.dir.join("bin/zinc"), &self.dir.0);
        c.env("ZINC_PLUGIN_PATH", self.dir.join("plugins"));
        c
    }
}

#[test]
fn real_probe_of_this_machine_chooses_a_working_backend() {
    let (out, v) = probe_json(&mut zinc(&zinc_bin(), &repo_root()));
    assert!(out.status.success(), "{}", describe(&out));
    let cpu = plugin(&v, "cpu");
    assert_eq!(cpu["status"], "available");
    assert!(cpu["devices"][0]["features"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f.as_str().unwrap().starts_with("threads=")));
    // Without /dev/kfd (CI machines) both AMD drivers must say why they cannot run.
    if !std::path::Path::new("/dev/kfd").exists() {
        let kfd = plugin(&v, "kfd");
        assert_eq!(kfd["status"], "unavailable");
        assert!(kfd["reason"].as_str().unwrap().contains("/dev/kfd"), "{kfd}");
        let userq = plugin(&v, "userq");
        assert_eq!(userq["status"], "unavailable");
        assert!(userq["reason"].as_str().unwrap().starts_with("compute user-queue slots missing"), "{userq}");
    }
    let vulkan = plugin(&v, "vulkan");
    let software = vulkan["devices"].as_array().unwrap().iter().all(|d| d["kind"] == "software");
    if vulkan["status"] == "available" && software {
        assert!(vulkan["score"].as_u64() < cpu["score"].as_u64(), "software Vulkan must rank below cpu");
        assert_eq!(v["chosen"]["name"], "cpu", "{v:#}");
    }
    assert!(v["chosen"]["device"]["name"].as_str().is_some_and(|n| !n.is_empty()));
}

#[test]
fn the_table_names_the_choice_and_the_fallback_chain() {
    let out = zinc(&zinc_bin(), &repo_root()).arg("probe").output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("chosen: "), "{text}");
    assert!(text.contains("fallback chain: "), "{text}");
    for name in ["cpu", "vulkan", "kfd", "userq"] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} missing from:\n{text}");
    }
}

#[test]
fn a_forced_unavailable_backend_exits_non_zero_with_its_reason() {
    let mut by_flag = zinc(&zinc_bin(), &repo_root());
    by_flag.args(["--backend", "kfd"]).env("ZINC_PLUGIN_PATH", "");
    let mut by_env = zinc(&zinc_bin(), &repo_root());
    by_env.env("ZINC_BACKEND", "kfd");
    let node = repo_root().join("tests/fixtures/nodes/no-amd.toml");
    for mut cmd in [by_flag, by_env] {
        let cfg = Scratch::new("forced");
        fs::write(cfg.join("plugins.toml"), format!("[plugins.kfd]\nemulate = \"{}\"\n", node.display())).unwrap();
        cmd.arg("--config").arg(cfg.join("plugins.toml"));
        let (out, v) = probe_json(&mut cmd);
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("forced") && err.contains("/dev/kfd not present"), "{err}");
        assert!(v.get("chosen").is_none(), "a forced backend must never fall back: {v:#}");
    }
}

#[test]
fn forcing_an_unknown_backend_lists_the_known_ones() {
    let out = zinc(&zinc_bin(), &repo_root()).args(["--backend", "nosuch", "probe"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("nosuch") && err.contains("cpu"), "{err}");
}

#[test]
fn a_backend_copied_into_a_plugin_directory_appears_without_rebuilding() {
    let install = Install::new("dropin");
    let (out, v) = probe_json(&mut install.cmd());
    assert_eq!(out.status.code(), Some(2), "no plugins yet must fail: {}", describe(&out));
    assert!(v["plugins"].as_array().unwrap().is_empty(), "{v:#}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plugin files"), "{}", describe(&out));

    install.add_plugin(&plugin_file("cpu"), "cpu");
    let (out, v) = probe_json(&mut install.cmd());
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(v["chosen"]["name"], "cpu");
    assert!(plugin(&v, "cpu")["file"].as_str().unwrap().contains(&*install.dir.0.to_string_lossy()));
}

#[test]
fn two_copies_of_a_plugin_load_side_by_side_and_the_first_wins() {
    // Each file is loaded on its own; the second copy of `cpu` is reported as shadowed,
    // not silently aliased to the first.
    let install = Install::new("twice");
    install.add_plugin(&plugin_file("cpu"), "cpu");
    install.add_plugin(&plugin_file("cpu"), "cpu_copy");
    install.add_plugin(&plugin_file("kfd"), "kfd");
    let (out, v) = probe_json(&mut install.cmd());
    assert!(out.status.success(), "{}", describe(&out));
    let plugins = v["plugins"].as_array().unwrap();
    assert_eq!(plugins.len(), 3, "{v:#}");
    assert_eq!(plugins.iter().filter(|p| p["status"] == "shadowed").count(), 1, "{v:#}");
    assert_eq!(plugin(&v, "kfd")["status"], "unavailable", "a second module must not alias the first");
}

#[test]
fn a_plugin_built_for_another_interface_is_refused_naming_file_and_versions() {
    let install = Install::new("foreign");
    install.add_plugin(&artifact("libzinc_fixture_foreign.so"), "foreign");
    install.add_plugin(&plugin_file("cpu"), "cpu");
    let (out, v) = probe_json(&mut install.cmd());
    assert!(out.status.success(), "the other plugins go on: {}", describe(&out));
    let foreign = plugin(&v, "foreign");
    assert_eq!(foreign["status"], "refused", "{foreign}");
    let why = foreign["reason"].as_str().unwrap();
    assert!(why.contains("libzinc_backend_foreign.so"), "{why}");
    assert!(why.contains("0.99.0") && why.contains(v["interface"].as_str().unwrap()), "{why}");
    assert_eq!(v["chosen"]["name"], "cpu");
}

#[test]
fn a_panicking_probe_is_reported_broken_and_the_host_survives() {
    let install = Install::new("panicky");
    install.add_plugin(&artifact("libzinc_fixture_panicky.so"), "panicky");
    install.add_plugin(&plugin_file("cpu"), "cpu");
    let (out, v) = probe_json(&mut install.cmd());
    assert!(out.status.success(), "{}", describe(&out));
    let p = plugin(&v, "panicky");
    assert_eq!(p["status"], "broken");
    assert!(p["reason"].as_str().unwrap().contains("panicked"), "{p}");
    assert_eq!(v["chosen"]["name"], "cpu");

    let (out, _) = probe_json(install.cmd().args(["--backend", "panicky"]));
    assert_eq!(out.status.code(), Some(2), "forcing a broken plugin must fail: {}", describe(&out));
}

/// Runs a probe with both AMD plugins pointed at one emulated node description.
fn probe_on_node(node: &str) -> serde_json::Value {
    let install = Install::new("node");
    for name in ["cpu", "vulkan", "kfd", "userq"] {
        install.add_plugin(&plugin_file(name), name);
    }
    let node = repo_root().join("tests/fixtures/nodes").join(node);
    let cfg = install.dir.join("plugins.toml");
    fs::write(
        &cfg,
        format!(
            "order = [\"userq\", \"kfd\", \"vulkan\", \"cpu\"]\n[plugins.kfd]\nemulate = \"{0}\"\n[plugins.userq]\nemulate = \"{0}\"\n",
            node.display()
        ),
    )
    .unwrap();
    let (out, v) = probe_json(install.cmd().arg("--config").arg(&cfg));
    assert!(out.status.success(), "{}", describe(&out));
    v
}

#[test]
fn a_node_with_kfd_but_no_user_queue_slots_chooses_kfd() {
    let v = probe_on_node("kfd-no-userq.toml");
    assert_eq!(v["chosen"]["name"], "kfd", "{v:#}");
    assert_eq!(v["chosen"]["device"]["kind"], "emulated");
    let userq = plugin(&v, "userq");
    assert_eq!(userq["status"], "unavailable");
    assert!(userq["reason"].as_str().unwrap().contains("compute user-queue slots missing"), "{userq}");
    assert!(v["skipped"].as_array().unwrap().iter().any(|s| s["name"] == "userq"), "{v:#}");
}

#[test]
fn a_node_with_user_queue_slots_chooses_userq_then_kfd() {
    let v = probe_on_node("userq-ready.toml");
    assert_eq!(v["chosen"]["name"], "userq", "{v:#}");
    assert_eq!(v["fallback"][0], "kfd", "{v:#}");
}

#[test]
fn a_node_with_neither_chooses_vulkan_or_cpu() {
    let v = probe_on_node("no-amd.toml");
    let chosen = v["chosen"]["name"].as_str().unwrap();
    assert!(chosen == "vulkan" || chosen == "cpu", "{v:#}");
    assert_eq!(plugin(&v, "kfd")["status"], "unavailable");
    assert_eq!(plugin(&v, "userq")["status"], "unavailable");
}

#[test]
fn zinc_smoke_kfd_runs_the_driver_on_the_emulated_node_and_fails_clearly_without_one() {
    let node = repo_root().join("tests/fixtures/nodes/kfd-no-userq.toml");
    let out = zinc(&zinc_bin(), &repo_root()).args(["smoke", "kfd", "--emulate"]).arg(&node).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("barrier-AND: packet 0, doorbell 0, signal 1 -> 0"), "{text}");
    assert!(text.contains("wrote 0x5a17c0de"), "{text}");
    if !std::path::Path::new("/dev/kfd").exists() {
        let out = zinc(&zinc_bin(), &repo_root()).args(["smoke", "kfd"]).output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("/dev/kfd not present"), "{}", describe(&out));
    }
    assert!(text.contains("code object: gfx1201 zinc_write_value"), "{text}");
    let out = zinc(&zinc_bin(), &repo_root()).args(["smoke", "cpu"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "a backend without a smoke test says so: {}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no smoke test"), "{}", describe(&out));
}

#[test]
fn zinc_smoke_userq_creates_and_frees_a_queue_on_the_emulated_node_and_falls_back_clearly() {
    let ready = repo_root().join("tests/fixtures/nodes/userq-ready.toml");
    let out = zinc(&zinc_bin(), &repo_root()).args(["smoke", "userq", "--emulate"]).arg(&ready).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("queue: id 1, ring 16384 bytes"), "{text}");
    assert!(text.contains("-> 0x5eed0fc0ffee000"), "{text}");
    assert!(text.contains("freed: queue 1"), "{text}");
    // The RDNA4-like node answers 0 compute slots: the documented reason, exit 1.
    let no_slots = repo_root().join("tests/fixtures/nodes/kfd-no-userq.toml");
    let out = zinc(&zinc_bin(), &repo_root()).args(["smoke", "userq", "--emulate"]).arg(&no_slots).output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("compute user-queue slots missing"), "{}", describe(&out));
}

#[test]
fn a_plugins_toml_in_the_working_directory_is_not_read_unless_named() {
    let install = Install::new("cwd-config");
    install.add_plugin(&plugin_file("cpu"), "cpu");
    // Read, this file would force a backend that does not exist and fail every command.
    fs::write(install.dir.join("plugins.toml"), "backend = \"no-such-backend\"\n").unwrap();
    let (out, v) = probe_json(&mut install.cmd());
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(v["chosen"]["name"], "cpu", "{v:#}");
    let (named, _) = probe_json(install.cmd().arg("--config").arg(install.dir.join("plugins.toml")));
    assert!(!named.status.success(), "named, the file must be read: {}", describe(&named));
}
