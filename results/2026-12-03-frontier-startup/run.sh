#!/usr/bin/env bash
# The README's open-loop table, with startupSeconds 30 by default (results/2026-12-03-startup-default):
# results/2026-12-02-frontier-heldout/run.sh's rows, written into this folder, with the default
# before it (startupSeconds 0) beside it.
# Usage, from the repository root: results/2026-12-03-frontier-startup/run.sh (traces in $TRACES).
P='fixed:MAX,saturation,saturation[startupSeconds=0],saturation[floorStatistic=peak],saturation[floorWindowSeconds=0],kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps' \
  D=results/2026-12-03-frontier-startup exec results/2026-12-02-frontier-heldout/run.sh "$@"
