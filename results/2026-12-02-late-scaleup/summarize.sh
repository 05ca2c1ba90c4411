#!/usr/bin/env bash
# The tables of this folder's README; a variant's startupSeconds is its row's replica start-up
# (100 s for the scenarios and the bursty workload, 30 s for the traces), one column for both.
# From the repository root: results/2026-12-02-late-scaleup/summarize.sh in|in2|held
set -euo pipefail
exec .venv/bin/python -m inflight results summarize "results/2026-12-02-late-scaleup/$1" --below 0.95 --below-prefix azure \
  --label 'saturation=**default**' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300]=recurrent + single 300 s' \
  --label 'saturation[startupSeconds=100]=late, margin 1' \
  --label 'saturation[startupSeconds=30]=late, margin 1' \
  --label 'saturation[startupSeconds=100;excursionMargin=1.5]=late, margin 1.5' \
  --label 'saturation[startupSeconds=30;excursionMargin=1.5]=late, margin 1.5' \
  --label 'saturation[startupSeconds=100;excursionMargin=2]=late, margin 2' \
  --label 'saturation[startupSeconds=30;excursionMargin=2]=late, margin 2' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300;startupSeconds=100;excursionMargin=1.5]=recurrent + late 1.5' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300;startupSeconds=30;excursionMargin=1.5]=recurrent + late 1.5' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300;startupSeconds=100;excursionMargin=2]=recurrent + late 2' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300;startupSeconds=30;excursionMargin=2]=recurrent + late 2' \
  --label 'saturation[startupSeconds=100;excursionMargin=1.5;excursionWindowSeconds=300]=late 1.5, 300 s' \
  --label 'saturation[startupSeconds=30;excursionMargin=1.5;excursionWindowSeconds=300]=late 1.5, 300 s' \
  --label 'saturation[startupSeconds=100;excursionMargin=1.5;excursionWindowSeconds=1800]=late 1.5, 1800 s' \
  --label 'saturation[startupSeconds=30;excursionMargin=1.5;excursionWindowSeconds=1800]=late 1.5, 1800 s'
