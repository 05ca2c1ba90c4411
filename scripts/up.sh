#!/usr/bin/env bash
# Set everything up, then run the main job: the whole stack on this machine.
# Extra arguments go to 'inflight up' (see 'inflight up --help').
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
VENV="${VENV:-.venv}"
exec "$VENV/bin/inflight" up "$@"
