#!/usr/bin/env bash
# The README's open-loop table, with a late scale-up's wider evidence by default
# (results/2026-12-03-fleet-change): results/2026-12-02-frontier-heldout/run.sh's rows, written
# into this folder, with the default before it (excursionFleets same, excursionFleetChange
# any, excursionMargin 1) beside it.
# Usage, from the repository root: results/2026-12-03-frontier-evidence/run.sh (traces in $TRACES).
P='fixed:MAX,saturation,saturation[excursionFleets=same;excursionFleetChange=any;excursionMargin=1],saturation[floorStatistic=peak],saturation[floorWindowSeconds=0],kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps' \
  D=results/2026-12-03-frontier-evidence exec results/2026-12-02-frontier-heldout/run.sh "$@"
