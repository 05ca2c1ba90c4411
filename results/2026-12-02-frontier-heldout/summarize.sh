#!/usr/bin/env bash
# The tables of this folder's README (a row a policy, then the static frontier's fleets), or
# of another folder of the same rows (frontier-anticipate, frontier-evidence, frontier-startup,
# frontier-margin). From the repository root: results/2026-12-02-frontier-heldout/summarize.sh [DIR]
set -euo pipefail
exec .venv/bin/python -m inflight results summarize "${1:-results/2026-12-02-frontier-heldout}" --layout policies --no-means --fleets \
  --rows ramp,spike,diurnal,bursty-warm,bursty-cold,azure-code-1800,azure-conv-1800
