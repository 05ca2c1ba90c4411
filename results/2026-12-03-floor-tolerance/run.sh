#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default (floorTolerance 0, off) against 0.1, 0.2 and 0.3.
# Usage, from the repository root: results/2026-12-03-floor-tolerance/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-floor-tolerance
export POLICIES=${POLICIES:-'fixed:MAX,saturation,saturation[floorTolerance=0.1],saturation[floorTolerance=0.2],saturation[floorTolerance=0.3]'}
results/2026-12-02-anticipate/run.sh "$@"
