#!/usr/bin/env bash
# The README's open-loop table, with the default that anticipates (results/2026-12-02-anticipate):
# results/2026-12-02-frontier-heldout/run.sh's rows, written into this folder, with the default
# before it (anticipateSeconds 0) beside it.
# Usage, from the repository root: results/2026-12-02-frontier-anticipate/run.sh (traces in $TRACES).
P='fixed:MAX,saturation,saturation[anticipateSeconds=0],saturation[floorStatistic=peak],saturation[floorWindowSeconds=0],kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps' \
  D=results/2026-12-02-frontier-anticipate exec results/2026-12-02-frontier-heldout/run.sh "$@"
