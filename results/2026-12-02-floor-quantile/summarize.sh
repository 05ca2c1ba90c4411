#!/usr/bin/env bash
# The tables of this folder's README. From the repository root:
#   results/2026-12-02-floor-quantile/summarize.sh in|in2|in3|new|confirm|old
set -euo pipefail
exec .venv/bin/python -m inflight results summarize "results/2026-12-02-floor-quantile/$1" --below 0.95 --below-prefix azure \
  --label 'saturation=**default** (peak)' \
  --label 'saturation[floorStatistic=recurrent]=recurrent' \
  --label 'saturation[floorStatistic=recurrent;floorFraction=1]=recurrent, 1' \
  --label 'saturation[floorStatistic=recurrent;floorWindowSeconds=1800]=recurrent, 1800 s' \
  --label 'saturation[floorStatistic=quantile;floorQuantile=0.1]=quantile 0.1' \
  --label 'saturation[floorStatistic=quantile;floorQuantile=0.1;floorWindowSeconds=3600]=quantile 0.1, 3600 s' \
  --label 'saturation[floorStatistic=quantile;floorQuantile=0.4]=quantile 0.4' \
  --label 'saturation[floorStatistic=recurrent;floorFraction=0.5]=recurrent, 0.5' \
  --label 'saturation[floorStatistic=recurrent;floorFraction=0.75]=recurrent, 0.75' \
  --label 'saturation[floorStatistic=recurrent;floorRecurrences=3]=recurrent ×3' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300]=**recurrent + single 300 s**' \
  --label 'saturation[floorStatistic=recurrent;floorFraction=0.75;floorSingleWindowSeconds=300]=rec., 0.75 + single 300 s' \
  --label 'saturation[floorStatistic=recurrent;floorFraction=0.75;floorSingleWindowSeconds=180]=rec., 0.75 + single 180 s'
