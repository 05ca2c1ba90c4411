#!/usr/bin/env bash
# The rows of results/2026-12-02-anticipate/run.sh (and single-fraction's), written into this folder:
# the default against a late scale-up's evidence read otherwise: excursionFleetChange=own (O),
# with excursionFleets=any (OA), each with excursionMargin=1.5 too.
# Usage, from the repository root: results/2026-12-03-fleet-change/run.sh GROUP ROW...
set -euo pipefail
export D=results/2026-12-03-fleet-change
O='saturation[excursionFleetChange=own]'
OA='saturation[excursionFleetChange=own;excursionFleets=any]'
O15='saturation[excursionFleetChange=own;excursionMargin=1.5]'
OA15='saturation[excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]'
export POLICIES=${POLICIES:-"fixed:MAX,saturation,$O,$OA,$O15,$OA15"}
results/2026-12-02-anticipate/run.sh "$@"
