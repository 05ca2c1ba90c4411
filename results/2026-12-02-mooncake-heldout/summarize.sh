#!/usr/bin/env bash
# The table of this folder's README (fixed:8's attainment beside each window). From the
# repository root: results/2026-12-02-mooncake-heldout/summarize.sh
set -euo pipefail
exec .venv/bin/python -m inflight results summarize results/2026-12-02-mooncake-heldout --fixed-column fixed:8 \
  --label 'saturation=**default** (floor)' \
  --label 'saturation[floorWindowSeconds=0]=floor off' \
  --label 'saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300]=recurrent floor' \
  --label 'kpa=KPA' \
  --label 'ray=Ray' \
  --label 'vllm-waiting=waiting > 5' \
  --label 'epp-queue=EPP' \
  --label 'hpa-rps=HPA rps' \
  --label 'qps=QPS'
