#!/usr/bin/env bash
# The README's open-loop table with excursionMargin back to 1 by default
# (results/2026-12-03-margin): results/2026-12-02-frontier-heldout/run.sh's rows, written into
# this folder, with the default before it (margin 1.5) beside it.
# Usage, from the repository root: results/2026-12-03-frontier-margin/run.sh (traces in $TRACES).
P='fixed:MAX,saturation,saturation[excursionMargin=1.5],saturation[floorStatistic=peak],saturation[floorWindowSeconds=0],kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps' \
  D=results/2026-12-03-frontier-margin exec results/2026-12-02-frontier-heldout/run.sh "$@"
