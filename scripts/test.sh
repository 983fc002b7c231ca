#!/usr/bin/env bash
# The README's test command: sets up everything it needs, then runs the whole test
# suite twice, against the native Cython implementation and the pure-Python reference.
# Extra arguments go to pytest (e.g. scripts/test.sh -k decoder). The tests run in
# PGOUTPUT_FAST_TEST_WORKERS pytest-xdist workers (default 2, one per core of the CI
# machine: much of the suite waits on PostgreSQL, Spark or a child process); pass -n 0
# to run them in one process.
set -euo pipefail
source "$(dirname "$0")/_setup.sh"
cd "$ROOT"
ensure_postgres
ensure_venv test
ensure_pg16 "$VENV/bin/python"

workers=${PGOUTPUT_FAST_TEST_WORKERS:-2}
status=0
for impl in native python; do
    skip=()
    # The pure-Python run covers what the implementation changes: the decoder, the
    # messages, the values, the CLI and capture's Python receive loop. It leaves out what
    # does not depend on it or runs the native decoder anyway, already run above:
    # test_decoder_parity.py (drives both implementations whatever PGOUTPUT_FAST_IMPL
    # says), the Spark pipeline, the Delta sink and the demo (they call the decoder API
    # the decoder tests cover; under the reference they take 10 minutes longer; the
    # snapshot's Spark check too), capture's
    # fault and signal tests (directory and process handling), the package checks.
    [ "$impl" = python ] && skip=(--ignore=tests/decoder/test_decoder_parity.py
        --ignore=tests/spark --ignore=tests/delta --ignore=tests/demo --ignore=tests/package
        --ignore=tests/local_server --ignore=tests/capture/test_capture_durability.py
        --ignore=tests/capture/test_capture_signals.py
        --deselect tests/capture/test_snapshot.py::test_spark_apply_of_snapshot_and_stream)
    log "pytest with PGOUTPUT_FAST_IMPL=$impl"
    started=$SECONDS
    # --durations: the slowest tests, to keep an eye on CI's time
    PGOUTPUT_FAST_IMPL=$impl "$VENV/bin/python" -m pytest tests -q -n "$workers" --dist worksteal \
        --durations=15 "${skip[@]}" "$@" || status=$?
    log "PGOUTPUT_FAST_IMPL=$impl: $((SECONDS - started)) s"
done
exit $status
