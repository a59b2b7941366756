#!/usr/bin/env bash
# Runs zinc's coverage-guided fuzz targets (fuzz/, libFuzzer through libfuzzer-sys) on stable
# Rust: the build instruments the code with LLVM's coverage counters (what cargo-fuzz does
# with `--sanitizer none`; sanitizers would need a nightly compiler).
#   bash scripts/fuzz.sh                 every target for 5 minutes each
#   bash scripts/fuzz.sh 30              every target for 30 s each (CI)
#   bash scripts/fuzz.sh 600 request     one target for 10 minutes
# Targets: gguf, tokenizer, chat_template, request, output_stage. Each starts from its
# committed seeds (fuzz/corpus/TARGET) and keeps what it finds in target/fuzz/corpus/TARGET;
# a crash is written to target/fuzz/artifacts/TARGET/ and fails the run. Reproduce one with
#   target/debug/TARGET target/fuzz/artifacts/TARGET/crash-…
# Needs the test models (bash scripts/fetch-model.sh; bash scripts/fetch-model.sh gemma3).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-300}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf tokenizer chat_template request output_stage)
out=$root/target/fuzz
bash scripts/fetch-model.sh
bash scripts/fetch-model.sh gemma3
# Only zinc and the targets are instrumented (scripts/fuzz-rustc.sh); in the shared target
# folder, with the debug profile and fuzz/Cargo.lock's versions matching the workspace's, the
# ordinary debug build's dependencies are reused (fuzz/Cargo.toml says how).
RUSTC_WRAPPER="$root/scripts/fuzz-rustc.sh" cargo build --locked --manifest-path fuzz/Cargo.toml \
    --target-dir "$root/target" $(printf -- '--bin %s ' "${targets[@]}")
bin=$root/target/debug
# Two at a time: libFuzzer runs one process per target, and CI has two cores.
failed=0
run() {
    local t=$1
    mkdir -p "$out/corpus/$t" "$out/artifacts/$t"
    if "$bin/$t" "$out/corpus/$t" "fuzz/corpus/$t" -max_total_time="$seconds" -timeout=10 \
        -rss_limit_mb=4096 -artifact_prefix="$out/artifacts/$t/" -print_final_stats=1 \
        >"$out/$t.log" 2>&1; then
        echo "fuzz.sh: $t ran ${seconds} s clean ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$out/$t.log" | grep -o '[0-9]*$') inputs)"
    else
        echo "fuzz.sh: $t FOUND A CRASH (log: $out/$t.log, input in $out/artifacts/$t/)" >&2
        tail -n 40 "$out/$t.log" >&2
        return 1
    fi
}
pids=()
for t in "${targets[@]}"; do
    run "$t" &
    pids+=($!)
    if [ ${#pids[@]} -ge 2 ]; then
        wait "${pids[0]}" || failed=1
        pids=("${pids[@]:1}")
    fi
done
for p in "${pids[@]}"; do
    wait "$p" || failed=1
done
exit $failed
