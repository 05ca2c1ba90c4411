#!/usr/bin/env bash
# Mooncake's conversation trace with a realistic KV cache (issue #24): the default, slots only,
# the interactive setting and two peers against the static frontier, at three cache sizes.
# Usage: results/2026-12-02-mooncake-kv/run.sh [SIZE...] from the repository root, with the trace
# in $TRACES (default /tmp/traces). SIZE: kv143k | kv287k | kv573k (default: all three, the
# middle first). Blocks of 16 tokens (vLLM's CUDA default); N includes vLLM's null block.
# compare refuses a non-empty --out-dir: remove a size's folder before running it again.
set -euo pipefail
D=results/2026-12-02-mooncake-kv
T=${TRACES:-/tmp/traces}/mooncake_conversation_trace.jsonl
P='fixed:MAX,saturation,saturation[capacity=requests],saturation[targetSaturation=0.7;growthHorizonSeconds=200],vllm-waiting,epp-queue'
C='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200 --max-model-len 131072 --block-size 16'
blocks() { case $1 in kv143k) echo 8960 ;; kv287k) echo 17920 ;; kv573k) echo 35840 ;; *) echo "unknown size $1" >&2; exit 2 ;; esac; }
for size in "${@:-kv287k kv143k kv573k}"; do
  for z in $size; do
    for s in 0 1200 2400; do
      o="$D/$z/conv-$s"; mkdir -p "$o"
      echo "== $z conv-$s $(date -u +%T)"
      # shellcheck disable=SC2086
      nice -n 10 .venv/bin/python -m inflight sim compare --policies "$P" --trace "$T" --trace-start-s $s \
        $C --kv-blocks "$(blocks "$z")" --out-dir "$o" >"$o.log" 2>&1 || { cat "$o.log"; exit 1; }
      rm -f "$o.log"
      gzip -9f "$o/comparison.json"; rm -f "$o/timeseries.png" "$o/pareto.png"
    done
  done
done
