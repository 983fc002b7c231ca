#!/usr/bin/env bash
# Coverage-guided fuzzing (atheris + libFuzzer) of decode_message, Decoder.feed and the
# typed value parsers, native core against the reference twin (fuzz/harness.py).
#
#   bash fuzz/run.sh [SECONDS_PER_TARGET] [TARGET ...]     (default: 60 s, all targets)
#
# Builds the native extension with clang, -fsanitize=fuzzer-no-link,address,undefined
# into build/fuzz/ (the normal build is untouched), seeds each target from the real
# captures in tests/fixtures, and runs the targets one after the other. The corpus
# grows in build/fuzz-corpus/TARGET (kept between runs); a crash, hang, sanitizer report
# or native/reference difference writes build/fuzz-artifacts/TARGET-crash-* (or
# timeout-*) and makes the script fail. Reproduce one with
#   bash fuzz/run.sh repro TARGET FILE
# Environment: FUZZ_JOBS=N runs N workers per target (libFuzzer -fork); FUZZ_FLAGS adds
# libFuzzer flags.
#
# Target "parallel" is not libFuzzer's: it runs decode_parallel's two generated-stream
# property tests (tests/decoder/test_parallel.py: valid and damaged streams, cut into up
# to 60 pieces, against one Decoder) and the Spark reader's cut of one segment
# (tests/decoder/test_split.py) with SECONDS x 50 examples each, on the normal build;
# hypothesis prints a failing example and the seed to reproduce it.
set -euo pipefail
source "$(dirname "$0")/../scripts/_setup.sh"
cd "$ROOT"

seconds="${1:-60}"
[ $# -gt 0 ] && shift
targets=("$@")
repro=""
if [ "$seconds" = repro ]; then
    repro="${targets[1]}"
    targets=("${targets[0]}")
fi
[ ${#targets[@]} -eq 0 ] && targets=(decode_message feed values parallel)

BUILD="$ROOT/build/fuzz"
CORPUS="$ROOT/build/fuzz-corpus"
ARTIFACTS="$ROOT/build/fuzz-artifacts"

[ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import pgoutput_fast._native" 2>/dev/null \
    || ensure_venv test
mapfile -t fuzz_reqs < <(pyproject_requirements fuzz)
"$VENV/bin/python" -m pip install -q "${fuzz_reqs[@]}"
if [ ! -f "$BUILD/.stamp" ] || [ -n "$(find src pgoutput_fast setup.py -newer "$BUILD/.stamp" -not -path '*/__pycache__*' -not -name '*.so' -print -quit)" ]; then
    build_sanitized "fuzzer-no-link,address,undefined" "$BUILD"
    touch "$BUILD/.stamp"
fi

ATHERIS_DIR="$("$VENV/bin/python" -c 'import atheris, os; print(atheris.path())')"
export LD_PRELOAD="$ATHERIS_DIR/asan_with_fuzzer.so"
# CPython itself leaks at exit and is not instrumented: no leak check here (see
# scripts/sanitize.sh for the leak check); a huge allocation fails with MemoryError.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:quarantine_size_mb=64:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export PYTHONPATH="$BUILD"
export PGOUTPUT_FAST_IMPL=native

if [ -n "$repro" ]; then
    exec "$VENV/bin/python" fuzz/harness.py "${targets[0]}" -runs=1 "$repro"
fi

mkdir -p "$CORPUS" "$ARTIFACTS"
SEEDS="$ROOT/build/fuzz-seeds"
[ -d "$SEEDS" ] || "$VENV/bin/python" fuzz/harness.py --seeds "$SEEDS" >/dev/null

status=0
for t in "${targets[@]}"; do
    if [ "$t" = parallel ]; then
        examples=$((seconds * 50))
        log "fuzzing parallel: decode_parallel against one Decoder, $examples examples per test"
        if ! env -u LD_PRELOAD -u PYTHONPATH PGOUTPUT_FAST_PARALLEL_FUZZ="$examples" \
                "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/decoder/test_parallel.py \
                tests/decoder/test_split.py \
                -k "test_generated_streams_same_as_one_decoder or test_damaged_streams_same_error_as_one_decoder or test_generated_streams_cut_as_one_segment" \
                >"$ARTIFACTS/$t.log" 2>&1; then
            status=1
            tail -80 "$ARTIFACTS/$t.log" >&2
            log "FOUND a problem in parallel: the falsifying example is above (build/fuzz-artifacts/parallel.log)"
        fi
        tail -1 "$ARTIFACTS/$t.log" | sed "s/^/  $t: /" >&2
        continue
    fi
    mkdir -p "$CORPUS/$t"
    log "fuzzing $t for ${seconds}s (corpus build/fuzz-corpus/$t)"
    flags=(-max_total_time="$seconds" -timeout=30 -rss_limit_mb=3072 -max_len=4096
           -artifact_prefix="$ARTIFACTS/$t-" -print_final_stats=1)
    [ -n "${FUZZ_JOBS:-}" ] && flags+=(-fork="$FUZZ_JOBS" -ignore_crashes=0)
    # shellcheck disable=SC2086
    if ! "$VENV/bin/python" fuzz/harness.py "$t" "${flags[@]}" ${FUZZ_FLAGS:-} "$CORPUS/$t" "$SEEDS/$t" \
            >"$ARTIFACTS/$t.log" 2>&1; then
        status=1
        tail -60 "$ARTIFACTS/$t.log" >&2
        log "FOUND a problem in $t: see build/fuzz-artifacts/ (reproduce: bash fuzz/run.sh repro $t FILE)"
    fi
    grep -E "stat::number_of_executed_units|stat::peak_rss_mb|^Done" "$ARTIFACTS/$t.log" | sed "s/^/  $t: /" >&2 || true
done
exit $status
