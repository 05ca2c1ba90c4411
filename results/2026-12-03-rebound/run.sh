#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default against reboundWindowSeconds (levels L came back to sooner than a replica could,
# held) and floorSmoothingSeconds (the floor remembers L smoothed over less than the scale-up window).
# Usage, from the repository root: results/2026-12-03-rebound/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-rebound
export POLICIES=${POLICIES:-'fixed:MAX,saturation,saturation[reboundWindowSeconds=130],saturation[reboundWindowSeconds=190],saturation[reboundWindowSeconds=250],saturation[floorSmoothingSeconds=0],saturation[floorSmoothingSeconds=5]'}
results/2026-12-02-anticipate/run.sh "$@"
