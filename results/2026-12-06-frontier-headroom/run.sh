#!/usr/bin/env bash
# The README's open-loop table with queueing headroom and a 180 s scale-down window by default
# (results/2026-12-06-headroom-choose): results/2026-12-02-frontier-heldout/run.sh's rows,
# written into this folder; the default before it (no headroom, 60 s) beside it. The peers'
# rows do not depend on our default: results/2026-12-03-frontier-margin has them.
# Usage, from the repository root: results/2026-12-06-frontier-headroom/run.sh (traces in $TRACES).
P='fixed:MAX,saturation,saturation[queueHeadroom=0;scaleDownWindowSeconds=60],saturation[floorStatistic=peak],saturation[floorWindowSeconds=0]' \
  D=results/2026-12-06-frontier-headroom exec results/2026-12-02-frontier-heldout/run.sh "$@"
