#!/usr/bin/env bash
# The compiler wrapper of scripts/fuzz.sh: adds LLVM's coverage counters (what libFuzzer is
# guided by) to zinc's own code and the fuzz targets only. Every other crate compiles as in
# the ordinary debug build, whose artifacts the fuzz build then reuses instead of rebuilding.
rustc=$1
shift
case " $* " in
    *" --crate-name zinc "* | *" --crate-name zinc_fuzz "* | *" --crate-name gguf "* | \
        *" --crate-name tokenizer "* | *" --crate-name chat_template "* | *" --crate-name request "* | \
        *" --crate-name output_stage "*)
        exec "$rustc" "$@" --cfg fuzzing -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
            -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
            -Cllvm-args=-sanitizer-coverage-trace-compares
        ;;
esac
exec "$rustc" "$@"
