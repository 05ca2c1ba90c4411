#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default against excursionFleets=larger (a late scale-up's evidence from larger fleets too).
# Usage, from the repository root: results/2026-12-03-excursion-fleets/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-excursion-fleets
export POLICIES=${POLICIES:-'fixed:MAX,saturation,saturation[excursionFleets=larger],saturation[excursionFleets=larger;excursionMargin=1.5]'}
results/2026-12-02-anticipate/run.sh "$@"
