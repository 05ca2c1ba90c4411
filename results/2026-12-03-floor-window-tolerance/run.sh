#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default (floorWindowSeconds 900, floorTolerance 0) against floor windows of 600, 1,200 and
# 1,800 s and floor tolerances of 0.1, 0.2 and 0.3.
# Usage, from the repository root: results/2026-12-03-floor-window-tolerance/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-floor-window-tolerance
W='saturation[floorWindowSeconds=600],saturation[floorWindowSeconds=1200],saturation[floorWindowSeconds=1800]'
T='saturation[floorTolerance=0.1],saturation[floorTolerance=0.2],saturation[floorTolerance=0.3]'
export POLICIES=${POLICIES:-"fixed:MAX,saturation,$W,$T"}
results/2026-12-02-anticipate/run.sh "$@"
