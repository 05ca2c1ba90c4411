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
rows=()
for row in code-0 code-0-1.5 code-1200 code-1800-0.8 code-2400 code-600-1.25 conv-0 conv-1200 conv-2400; do
  IFS=- read -r kind start scale <<<"$row"
  for d in -10 10; do
    s=$((start + d))
    ((s >= 0)) || continue
    rows+=("$kind-$s${scale:+-$scale}")
  done
done
results/2026-12-03-fleet-change/run.sh phase "${rows[@]}"
