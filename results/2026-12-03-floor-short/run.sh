#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default against floorShortFraction 0.7, 0.8 and 1.0 (the recurrent level of peaks
# shorter than startupSeconds, 30 s, held at that fraction instead of floorFraction's 0.6).
# Usage, from the repository root: results/2026-12-03-floor-short/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-floor-short
export POLICIES=${POLICIES:-'fixed:MAX,saturation,saturation[floorShortFraction=0.7],saturation[floorShortFraction=0.8],saturation[floorShortFraction=1]'}
results/2026-12-02-anticipate/run.sh "$@"
