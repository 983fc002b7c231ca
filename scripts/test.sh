#!/usr/bin/env bash
# The README's test command: sets up everything it needs, then runs the whole test
# suite twice, against the native Cython implementation and the pure-Python reference.
# Extra arguments go to pytest (e.g. scripts/test.sh -k decoder). The tests run in
# PGOUTPUT_FAST_TEST_WORKERS pytest-xdist workers (default 2, one per core of the CI
# machine: much of the suite waits on PostgreSQL, Spark or a child process); pass -n 0
# to run them in one process.
#
# The decoder's block-cut matrices (tests marked `matrix`, 1,747 cells that feed the same
# captures cut at every block size) run one cell in PGOUTPUT_FAST_MATRIX_SAMPLE (default
# 3), chosen by a hash of the test id and the date, so that the runs of three days cover
# every cell; PGOUTPUT_FAST_MATRIX_SAMPLE=1 (or `scripts/test.sh --matrix-sample 1`)
# runs them all.
set -euo pipefail
source "$(dirname "$0")/_setup.sh"
cd "$ROOT"
ensure_postgres
ensure_venv test
ensure_pg16 "$VENV/bin/python"

workers=${PGOUTPUT_FAST_TEST_WORKERS:-2}
matrix=(--matrix-sample "${PGOUTPUT_FAST_MATRIX_SAMPLE:-3}" --matrix-seed "$(date -u +%F)")
status=0
for impl in native python; do
    skip=()
    # The pure-Python run covers what the implementation changes: the decoder, the
    # messages, the values, the CLI and capture's Python receive loop. It leaves out what
    # does not depend on it or runs the native decoder anyway, already run above:
    # test_decoder_parity.py, test_txn_window.py and test_helper_thread.py (they drive both implementations
    # whatever PGOUTPUT_FAST_IMPL says), the Spark pipeline, the Delta sink and the demo (they call the decoder API
    # the decoder tests cover; under the reference they take 10 minutes longer; the
    # snapshot's Spark check too), capture's
    # fault and signal tests (directory and process handling), the backfill (the
    # snapshot's copy, which test_snapshot.py runs under the reference), the package checks,
    # and the native core's threads (test_threads.py; decode --workers, whose cutting and
    # joining test_parallel.py covers under both).
    [ "$impl" = python ] && skip=(--ignore=tests/decoder/test_decoder_parity.py
        --ignore=tests/decoder/test_txn_window.py --ignore=tests/decoder/test_threads.py
        --ignore=tests/decoder/test_helper_thread.py
        --ignore=tests/cli/test_decode_workers.py
        --ignore=tests/spark --ignore=tests/delta --ignore=tests/demo --ignore=tests/package
        --ignore=tests/local_server --ignore=tests/capture/test_capture_durability.py
        --ignore=tests/capture/test_backfill.py
        --ignore=tests/capture/test_capture_signals.py
        --deselect tests/capture/test_snapshot.py::test_spark_apply_of_snapshot_and_stream)
    log "pytest with PGOUTPUT_FAST_IMPL=$impl"
    started=$SECONDS
    # --durations: the slowest tests, to keep an eye on CI's time
    PGOUTPUT_FAST_IMPL=$impl "$VENV/bin/python" -m pytest tests -q -n "$workers" --dist worksteal \
        --durations=15 "${matrix[@]}" "${skip[@]}" "$@" || status=$?
    log "PGOUTPUT_FAST_IMPL=$impl: $((SECONDS - started)) s"
done
exit $status
