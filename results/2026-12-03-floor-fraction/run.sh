#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default (floorFraction 0.6 on the recurrent level) against 0.5, 0.7 and 0.8.
# Usage, from the repository root: results/2026-12-03-floor-fraction/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-floor-fraction
export POLICIES=${POLICIES:-'fixed:MAX,saturation,saturation[floorFraction=0.5],saturation[floorFraction=0.7],saturation[floorFraction=0.8]'}
results/2026-12-02-anticipate/run.sh "$@"
