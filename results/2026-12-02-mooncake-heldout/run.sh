#!/usr/bin/env bash
# The defaults and the peers against the static frontier on Mooncake's conversation trace
# (traffic no setting was chosen on). Usage: results/2026-12-02-mooncake-heldout/run.sh
# from the repository root, with the trace in $TRACES (default /tmp/traces).
set -euo pipefail
D=results/2026-12-02-mooncake-heldout
T=${TRACES:-/tmp/traces}/mooncake_conversation_trace.jsonl
P='fixed:MAX,saturation,saturation[floorWindowSeconds=0],saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300],kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps'
C='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200 --max-model-len 131072'
[ "${1:-}" = interactive ] || for s in 0 1200 2400; do
  echo "== conv-$s $(date -u +%T)"
  # shellcheck disable=SC2086
  nice -n 10 .venv/bin/python -m inflight sim compare --policies "$P" --trace "$T" --trace-start-s $s $C \
    --out-dir "$D/conv-$s" >"$D/conv-$s.log" 2>&1
  gzip -9f "$D/conv-$s/comparison.json"; rm -f "$D/conv-$s/timeseries.png" "$D/conv-$s/pareto.png"
done
# Added after the first table (README): the shipped interactive component's setting
# (manifests/components/interactive: targetSaturation 0.7, growthHorizonSeconds 200).
if [ "${1:-}" = interactive ]; then
  for s in 0 1200 2400; do
    echo "== interactive/conv-$s $(date -u +%T)"; mkdir -p "$D/interactive"
    # shellcheck disable=SC2086
    nice -n 10 .venv/bin/python -m inflight sim compare \
      --policies 'fixed:MAX,saturation[targetSaturation=0.7;growthHorizonSeconds=200]' --trace "$T" \
      --trace-start-s $s $C --out-dir "$D/interactive/conv-$s" >"$D/interactive/conv-$s.log" 2>&1
    gzip -9f "$D/interactive/conv-$s/comparison.json"
    rm -f "$D/interactive/conv-$s/timeseries.png" "$D/interactive/conv-$s/pareto.png"
  done
fi
