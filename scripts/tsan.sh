#!/usr/bin/env bash
# The tests of the native code that runs on two threads at once, against a native
# extension built with ThreadSanitizer: a Decoder's helper thread (the change-event rows
# of a window written beside the typed rows, and the calling thread's own share of them),
# many Decoders on threads at once, and decode_parallel's pieces (Decoders on a thread
# pool, the GIL let go in their block writers).
#
#   bash scripts/tsan.sh [pytest args]
#
# ThreadSanitizer reports any two accesses to the same memory from two threads, one of
# them a write, that no lock, atomic or thread hand-over orders; a report fails the run.
# The build goes to build/tsan/ (gcc -fsanitize=thread -O1 -g; clang 14's TSan runtime
# crashes at start when preloaded into a Python it did not build); the normal build in
# the source tree is untouched. pytest imports it through PYTHONPATH, with GCC's TSan
# runtime preloaded into the (uninstrumented) Python: only the extension's own loads and
# stores are checked, and the GIL and CPython's locks are seen through the runtime's
# pthread interceptors. pyarrow allocates with the system's malloc here
# (ARROW_DEFAULT_MEMORY_POOL=system), and scripts/tsan.supp leaves out what the runtime
# sees of pyarrow's own threads and allocator. A forked child of a threaded process runs on without the
# runtime's checks (die_after_fork=0: test_forked_child_starts_its_own_helper forks).
# The property tests run fewer examples than in the normal suite
# (PGOUTPUT_FAST_WINDOW_EXAMPLES, PGOUTPUT_FAST_PARALLEL_FUZZ): the checked build is
# 5-15x slower.
set -euo pipefail
source "$(dirname "$0")/_setup.sh"
cd "$ROOT"
started=$SECONDS

[ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import pgoutput_fast._native, pytest, hypothesis" 2>/dev/null \
    || ensure_venv test
BUILD="$ROOT/build/tsan"
build_sanitized "thread" "$BUILD" gcc
TSAN_RT="$(gcc -print-file-name=libtsan.so)"
[ -f "$TSAN_RT" ] || { log "GCC's ThreadSanitizer runtime not found ($TSAN_RT): apt-get install libtsan2"; exit 1; }

# the reports go to files (pytest holds a test's stderr, and a report ends the process
# before pytest prints it): shown below when the run fails
REPORTS="$BUILD/reports"
rm -rf "$REPORTS"
mkdir -p "$REPORTS"
tsan() {
    (cd "$BUILD" && LD_PRELOAD="$TSAN_RT" PYTHONPATH="$BUILD:$ROOT" PGOUTPUT_FAST_IMPL=native \
        TSAN_OPTIONS="halt_on_error=1:exitcode=66:die_after_fork=0:report_signal_unsafe=0:second_deadlock_stack=1:log_path=$REPORTS/report:suppressions=$ROOT/scripts/tsan.supp" \
        ARROW_DEFAULT_MEMORY_POOL=system \
        PGOUTPUT_FAST_WINDOW_EXAMPLES="${PGOUTPUT_FAST_WINDOW_EXAMPLES:-25}" \
        PGOUTPUT_FAST_PARALLEL_FUZZ="${PGOUTPUT_FAST_PARALLEL_FUZZ:-30}" \
        "$@")
}
tsan "$VENV/bin/python" -c \
    "import pgoutput_fast, sys; f = pgoutput_fast._impl.__file__; print('ThreadSanitizer build:', f); sys.exit(not f.startswith('$BUILD'))"

if [ $# -eq 0 ]; then
    set -- tests/decoder/test_helper_thread.py tests/decoder/test_threads.py tests/decoder/test_parallel.py \
        -m "not slow"
fi
from_build_dir "$@"
log "pytest (native, ThreadSanitizer) $*"
status=0
tsan "$VENV/bin/python" "${PYTEST_ARGS[@]}" || status=$?
if compgen -G "$REPORTS/report*" >/dev/null; then
    cat "$REPORTS"/report* >&2
    log "ThreadSanitizer reports above (also in $REPORTS)"
    [ "$status" -ne 0 ] || status=1
fi
log "scripts/tsan.sh: $((SECONDS - started)) s in all (exit $status)"
exit $status
