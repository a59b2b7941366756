//! The kfd backend end to end on the emulated device: `zinc run` must produce the CPU tier's
//! tokens, with one doorbell per step and one AQL dispatch per op.

use zinc_tests::*;

fn emulated_config(dir: &Scratch) -> std::path::PathBuf {
    let node = repo_root().join("tests/fixtures/nodes/kfd-no-userq.toml");
    let cfg = dir.join("plugins.toml");
    std::fs::write(&cfg, format!("[plugins.kfd]\nemulate = \"{}\"\n", node.display())).unwrap();
    cfg
}

#[test]
fn zinc_run_on_the_emulated_kfd_device_gives_the_cpu_tiers_tokens() {
    same_tokens_on_kfd_and_cpu(&Scratch::new("kfd-run"), None);
}

/// Gemma 2's ops (soft caps on scores and logits, sliding windows, GELU, post-norms) run on
/// the emulated device too.
#[test]
fn a_synthetic_gemma2_on_the_emulated_kfd_device_gives_the_cpu_tiers_tokens() {
    let dir = Scratch::new("kfd-gemma2");
    let model = synth_preset(&dir, "tiny-gemma2");
    same_tokens_on_kfd_and_cpu(&dir, Some(&model));
}

/// `zinc run` of `model` (default: the default model) on kfd and on the CPU tier, greedy.
fn same_tokens_on_kfd_and_cpu(dir: &Scratch, model: Option<&std::path::Path>) {
    let cfg = emulated_config(dir);
    let prompt = "The capital of France is";
    let run = |backend: &str| {
        let mut cmd = zinc(&zinc_bin(), &repo_root());
        cmd.arg("--config").arg(&cfg).args(["--backend", backend, "run", "--temp", "0", "-n", "20"]);
        if let Some(m) = model {
            cmd.arg("-m").arg(m);
        }
        let out = cmd.arg(prompt).output().unwrap();
        assert!(out.status.success(), "{}", describe(&out));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (kfd_text, kfd_log) = run("kfd");
    let (cpu_text, _) = run("cpu");
    assert!(kfd_log.contains("kfd on Emulated RDNA4") && kfd_log.contains("(emulated)"), "{kfd_log}");
    assert!(!kfd_text.trim().is_empty());
    assert_eq!(kfd_text, cpu_text, "the emulated kfd device must produce the CPU tier's tokens");
}

#[test]
fn the_kfd_backend_rings_one_doorbell_per_step_and_dispatches_every_op() {
    let dir = Scratch::new("kfd-bench");
    let cfg = emulated_config(&dir);
    let out = zinc(&zinc_bin(), &repo_root())
        .arg("--config")
        .arg(&cfg)
        .args([
            "--backend",
            "kfd",
            "bench",
            "--json",
            "-p",
            "8",
            "-n",
            "4",
            "-r",
            "1",
            "--batch",
            "2",
            "--batch-prompt",
            "4",
            "--batch-gen",
            "2",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["backend"], "kfd");
    assert_eq!(v["device"]["kind"], "emulated");
    // Checked against the CPU tier (the emulated device runs the CPU tier's kernels: equal).
    let check = &v["cpu_check"];
    assert_eq!(check["passed"], true, "{check}");
    assert_eq!(check["nmse"].as_f64(), Some(0.0), "{check}");
    assert_eq!(v["comparable"], true);
    let c = &v["counters"];
    let steps = c["steps"].as_u64().unwrap();
    assert!(steps > 0);
    assert_eq!(c["submits"].as_u64().unwrap(), steps, "one doorbell per step: {c}");
    // SmolLM2's program: 1 embed + 30 layers × 15 ops + 4 output ops.
    assert_eq!(c["dispatches"].as_u64().unwrap(), steps * 455, "one AQL dispatch per op: {c}");
    // Each measured repetition's wall time and the device time counted within it (the
    // warm-up's left out): some device time, never more than the wall time around it.
    for t in v["tests"].as_array().unwrap() {
        let (wall, device) = (t["wall_s"].as_array().unwrap(), t["device_s"].as_array().unwrap());
        assert_eq!((wall.len(), device.len()), (1, 1), "one repetition: {t}");
        let (w, d) = (wall[0].as_f64().unwrap(), device[0].as_f64().unwrap());
        assert!(d > 0.0 && d <= w, "device {d} s within wall {w} s: {t}");
    }
}
