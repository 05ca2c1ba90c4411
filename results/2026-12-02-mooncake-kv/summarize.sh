#!/usr/bin/env bash
# The tables of this folder's README, a KV cache size each (misses TTFT/TPOT, and the capacity
# decisions bound by KV of inflight's policies). From the repository root:
#   results/2026-12-02-mooncake-kv/summarize.sh
set -euo pipefail
for size in kv143k kv287k kv573k; do
  [ -d "results/2026-12-02-mooncake-kv/$size" ] || continue
  printf '\n### %s\n\n' "$size"
  .venv/bin/python -m inflight results summarize "results/2026-12-02-mooncake-kv/$size" --fixed-column fixed:8 --misses \
    --label 'saturation=**default** (auto)' \
    --label 'saturation[capacity=requests]=slots only' \
    --label 'saturation[targetSaturation=0.7;growthHorizonSeconds=200]=interactive' \
    --label 'vllm-waiting=waiting > 5' \
    --label 'epp-queue=EPP'
done
