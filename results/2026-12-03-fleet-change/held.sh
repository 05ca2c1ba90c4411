#!/usr/bin/env bash
# The held-out rows of this folder's rule (README.md, "The rule"), never run by any policy
# before it: the scenarios and bursty workloads at seed 22 (bursty warm also 23), the Azure
# 2023 code and conversation windows from 150, 1,050 and 1,650 s each moved -10, 0 and +10 s,
# and Mooncake's conversation trace from 300 and 1,500 s.
# Usage, from the repository root: results/2026-12-03-fleet-change/held.sh (traces in $TRACES).
set -euo pipefail
export POLICIES='fixed:MAX,saturation,saturation[excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]'
rows=(ramp-s22 spike-s22 diurnal-s22 bursty-warm-s22 bursty-warm-s23 bursty-cold-s22 bursty400-warm-s22)
for kind in code conv; do
  for start in 150 1050 1650; do
    for d in -10 0 10; do rows+=("$kind-$((start + d))"); done
  done
done
rows+=(moon-300 moon-1500)
results/2026-12-03-fleet-change/run.sh held "${rows[@]}"
