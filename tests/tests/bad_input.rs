//! Bad input to the command line: each case is a one-line error naming the problem and a
//! non-zero exit, never a panic. `random` adds seeded random damage to model files and random
//! text through the tokenizer (in this binary, not one of its own, to keep CI's link time).

#[path = "bad_input/random.rs"]
mod random;

use zinc_tests::*;

fn run_zinc(args: &[&str], model: Option<&std::path::Path>) -> std::process::Output {
    let mut c = zinc(&zinc_bin(), &repo_root());
    c.args(["--backend", "cpu", "run", "-n", "4", "--temp", "0"]);
    if let Some(m) = model {
        c.arg("-m").arg(m);
    }
    c.args(args).output().unwrap()
}

fn assert_clean_failure(out: &std::process::Output, needle: &str) {
    assert!(!out.status.success(), "{}", describe(out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "expected {needle:?} in:\n{}", describe(out));
    assert!(!err.contains("panicked"), "{}", describe(out));
    assert_eq!(err.trim().lines().count(), 1, "one line: {}", describe(out));
}

#[test]
fn a_missing_model_file_is_named() {
    let out = run_zinc(&["hi"], Some(std::path::Path::new("/nonexistent/model.gguf")));
    assert_clean_failure(&out, "/nonexistent/model.gguf");
}

#[test]
fn a_corrupt_model_file_is_refused_with_the_offset() {
    let dir = Scratch::new("corrupt");
    let good = std::fs::read(repo_root().join("models/SmolLM2-135M-Instruct.Q4_1.gguf")).unwrap();
    let bad = dir.join("truncated.gguf");
    std::fs::write(&bad, &good[..200_000]).unwrap();
    assert_clean_failure(&run_zinc(&["hi"], Some(&bad)), "not a usable GGUF file");
    let garbage = dir.join("garbage.gguf");
    std::fs::write(&garbage, b"this is not a model at all").unwrap();
    assert_clean_failure(&run_zinc(&["hi"], Some(&garbage)), "missing GGUF magic");
}

#[test]
fn an_unsupported_architecture_is_named() {
    let dir = Scratch::new("arch");
    let m = dir.join("tiny.gguf");
    let out = zinc(&zinc_bin(), &repo_root()).args(["synth", "--preset", "tiny-llama", "-o"]).arg(&m).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    // Rewrite the architecture string in place ("llama" -> "mamba", same length).
    let mut bytes = std::fs::read(&m).unwrap();
    let key = b"general.architecture";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len() + 4 + 8;
    assert_eq!(&bytes[at..at + 5], b"llama");
    bytes[at..at + 5].copy_from_slice(b"mamba");
    std::fs::write(&m, &bytes).unwrap();
    assert_clean_failure(&run_zinc(&["hi"], Some(&m)), "architecture `mamba` is not supported");
}

#[test]
fn a_prompt_longer_than_the_context_is_refused() {
    let long = "word ".repeat(300);
    let mut c = zinc(&zinc_bin(), &repo_root());
    let out = c.args(["--backend", "cpu", "run", "--ctx", "128", &long]).output().unwrap();
    assert_clean_failure(&out, "longer than the context of 128 tokens");
}

/// Llama 3.1-style RoPE divisors that are not positive are refused, naming the tensor.
#[test]
fn non_positive_rope_frequency_divisors_are_refused() {
    let dir = Scratch::new("rope-freqs");
    let m = synth_preset(&dir, "tiny-llama31");
    // rope_freqs.weight is the file's last tensor: its 32 f32 divisors end the file.
    let mut bytes = std::fs::read(&m).unwrap();
    let n = bytes.len();
    bytes[n - 4..].copy_from_slice(&(-1.0f32).to_le_bytes());
    std::fs::write(&m, &bytes).unwrap();
    assert_clean_failure(&run_zinc(&["hi"], Some(&m)), "rope_freqs.weight holds -1; factors must be positive");
}

/// Rewrites `model` in place: the first occurrence of `from` becomes `to` (of the same length).
fn rewrite(model: &std::path::Path, from: &[u8], to: &[u8]) {
    let mut bytes = std::fs::read(model).unwrap();
    let at = bytes.windows(from.len()).position(|w| w == from).expect("the bytes are in the file");
    bytes[at..at + to.len()].copy_from_slice(to);
    std::fs::write(model, &bytes).unwrap();
}

/// A metadata entry's bytes: its key (as GGUF writes it, after its length), its value's type
/// and the value.
fn entry(key: &str, ty: u32, value: [u8; 4]) -> Vec<u8> {
    [key.as_bytes(), &ty.to_le_bytes(), &value].concat()
}

/// GGUF's value types of the entries rewritten here.
const U32: u32 = 4;
const F32: u32 = 6;

/// A llama file with experts (Mixtral's layout) that routes each token to more experts than
/// it has is refused, naming the counts.
#[test]
fn more_experts_used_than_exist_is_refused() {
    let dir = Scratch::new("mixtral-routing");
    let m = synth_preset(&dir, "tiny-mixtral");
    // 2 of 8 becomes 9 of 8.
    let key = "llama.expert_used_count";
    rewrite(&m, &entry(key, U32, 2u32.to_le_bytes()), &entry(key, U32, 9u32.to_le_bytes()));
    assert_clean_failure(&run_zinc(&["hi"], Some(&m)), "9 of 8 experts of width 256 is not a valid routing");
}

/// A Gemma 2 file whose soft cap on attention scores is not positive is refused, naming the
/// key (a cap of 0 would divide by zero, a negative one flip every score).
#[test]
fn a_non_positive_gemma2_soft_cap_is_refused() {
    let dir = Scratch::new("gemma2-cap");
    let m = synth_preset(&dir, "tiny-gemma2");
    let key = "gemma2.attn_logit_softcapping";
    rewrite(&m, &entry(key, F32, 0.5f32.to_le_bytes()), &entry(key, F32, (-0.5f32).to_le_bytes()));
    assert_clean_failure(
        &run_zinc(&["hi"], Some(&m)),
        "gemma2.attn_logit_softcapping = -0.5; a soft cap must be positive",
    );
}

/// A file with only one of LongRoPE's two factor sets is refused, naming both, rather than run
/// with the wrong frequencies.
#[test]
fn a_file_with_half_of_longrope_is_refused_naming_both_factor_sets() {
    let dir = Scratch::new("phi3-longrope");
    let m = synth_preset(&dir, "tiny-phi3");
    // A tensor name of the same length, renamed in place.
    rewrite(&m, b"blk.2.attn_output.weight", b"rope_factors_long.weight");
    assert_clean_failure(
        &run_zinc(&["hi"], Some(&m)),
        "LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight",
    );
}
