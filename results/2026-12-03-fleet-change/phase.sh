#!/usr/bin/env bash
# How much a trace row's verdict moves with its window's phase: the 9 in-sample trace rows
# of results/2026-12-02-single-fraction/in with their windows moved 10 s earlier and later
# (the traffic nearly the same; the floor's memory, the HPA's 15 s ticks and the flashes in
# another phase), the default against excursionFleetChange=own (O) and O with
# excursionFleets=any and excursionMargin=1.5. Rows starting at 0 move later only.
# Usage, from the repository root: results/2026-12-03-fleet-change/phase.sh (traces in $TRACES).
set -euo pipefail
O='saturation[excursionFleetChange=own]'
OA15='saturation[excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]'
export POLICIES="fixed:MAX,saturation,$O,$OA15"
mapfile -t rows < <(results/2026-12-03-fleet-change/phase-rows.sh)
results/2026-12-03-fleet-change/run.sh phase "${rows[@]}"
