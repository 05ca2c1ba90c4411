#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default against longer scale-down windows (a lead from the conversation row; nothing adopted).
# Usage, from the repository root: results/2026-12-03-down-window/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-down-window
export POLICIES=${POLICIES:-'fixed:MAX,saturation,saturation[scaleDownWindowSeconds=120],saturation[scaleDownWindowSeconds=300]'}
results/2026-12-02-anticipate/run.sh "$@"
