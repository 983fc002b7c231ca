#!/usr/bin/env bash
# The README's main command: sets up everything it needs, then runs the demo job.
set -euo pipefail
source "$(dirname "$0")/_setup.sh"
cd "$ROOT"
ensure_postgres || log "no PostgreSQL server: the demo falls back to a bundled capture"
ensure_venv test
exec "$VENV/bin/pgoutput-fast" demo "$@"
