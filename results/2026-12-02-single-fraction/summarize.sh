#!/usr/bin/env bash
# The tables of this folder's README, and of the folders that reuse its labels (startup-known,
# anticipate, down-window, rebound, excursion-fleets, floor-fraction, floor-window-tolerance,
# floor-short, fleet-change, margin). From the repository root:
#   results/2026-12-02-single-fraction/summarize.sh in|held|DIR   (DIR: any folder of rows)
set -euo pipefail
G=$1; [ -d "$G" ] || G=results/2026-12-02-single-fraction/$G
exec .venv/bin/python -m inflight results summarize "$G" \
  --label 'saturation=default' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=900;floorSingleFraction=0.3]=C' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=900;floorSingleFraction=0.4]=single 0.4' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=900;floorSingleFraction=0.5]=single 0.5' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300]=recurrent, 300 s' \
  --label 'saturation[startupSeconds=100;excursionMargin=1.5]=L' \
  --label 'saturation[startupSeconds=30;excursionMargin=1.5]=L' \
  --label 'saturation[anticipateSeconds=130]=A' \
  --label 'saturation[scaleDownWindowSeconds=120]=down 120' \
  --label 'saturation[scaleDownWindowSeconds=300]=down 300' \
  --label 'saturation[reboundWindowSeconds=130]=R130' \
  --label 'saturation[reboundWindowSeconds=190]=R190' \
  --label 'saturation[reboundWindowSeconds=250]=R250' \
  --label 'saturation[floorSmoothingSeconds=0]=F0' \
  --label 'saturation[floorSmoothingSeconds=5]=F5' \
  --label 'saturation[excursionFleets=larger]=XL' \
  --label 'saturation[excursionFleets=larger;excursionMargin=1.5]=XL, 1.5' \
  --label 'saturation[floorFraction=0.5]=f0.5' \
  --label 'saturation[floorFraction=0.7]=f0.7' \
  --label 'saturation[floorFraction=0.8]=f0.8' \
  --label 'saturation[floorWindowSeconds=600]=W600' \
  --label 'saturation[floorWindowSeconds=1200]=W1200' \
  --label 'saturation[floorWindowSeconds=1800]=W1800' \
  --label 'saturation[floorTolerance=0.1]=T0.1' \
  --label 'saturation[floorTolerance=0.2]=T0.2' \
  --label 'saturation[floorTolerance=0.3]=T0.3' \
  --label 'saturation[floorShortFraction=0.7]=S0.7' \
  --label 'saturation[floorShortFraction=0.8]=S0.8' \
  --label 'saturation[floorShortFraction=1]=S1' \
  --label 'saturation[excursionFleetChange=own]=O' \
  --label 'saturation[excursionFleetChange=own;excursionFleets=any]=OA' \
  --label 'saturation[excursionFleetChange=own;excursionMargin=1.5]=O, 1.5' \
  --label 'saturation[excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]=OA, 1.5' \
  --label 'saturation[floorFilledFlashes=1]=FF1' \
  --label 'saturation[floorFilledFlashes=1;excursionFleetChange=own]=FF1 O' \
  --label 'saturation[floorFilledFlashes=1;excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]=FF1 OA, 1.5' \
  --label 'saturation[floorShortFraction=0.8;excursionFleetChange=own]=S0.8 O' \
  --label 'saturation[floorShortFraction=0.8;excursionFleetChange=own;excursionMargin=1.5]=S0.8 O, 1.5' \
  --label 'saturation[floorShortFraction=0.8;excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]=S0.8 OA, 1.5' \
  --label 'saturation[excursionMargin=1]=M1'
