#!/usr/bin/env bash
# The floor's statistic (floorStatistic quantile|recurrent) against the default: chosen in
# sample, judged on new held-out traffic and on the old held-out rows (README.md).
# Usage: results/2026-12-02-floor-quantile/run.sh in|new|confirm|old   (from the repository root)
# POLICIES= overrides the policies (new and old: 'fixed:MAX,saturation,saturation[<chosen>]').
set -euo pipefail
P='fixed:MAX,saturation,saturation[floorStatistic=recurrent],saturation[floorStatistic=recurrent;floorFraction=1],saturation[floorStatistic=recurrent;floorWindowSeconds=1800],saturation[floorStatistic=quantile;floorQuantile=0.1],saturation[floorStatistic=quantile;floorQuantile=0.1;floorWindowSeconds=3600],saturation[floorStatistic=quantile;floorQuantile=0.4]'
P=${POLICIES:-$P}
D=results/2026-12-02-floor-quantile
T=${TRACES:-/tmp/traces}
B='poisson:0:0.5,200:0.5,200:3,260:3,260:0.5,500:0.5,500:3,560:3,560:0.5,800:0.5,800:3,860:3,860:0.5,1100:0.5,1100:3,1160:3,1160:0.5,1300:0.5'
BF="--arrivals $B --prompt-tokens lognormal:3000:0.6 --max-tokens lognormal:300:0.5 --min-replicas 1 --max-replicas 4 --startup-s 100"
C='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200'
sim() {
  n=$1; shift; echo "== $n $(date -u +%T)"; mkdir -p "$(dirname "$D/$n")"
  nice -n 10 .venv/bin/python -m inflight sim compare --policies "$P" --out-dir "$D/$n" "$@" >"$D/$n.log" 2>&1
  gzip -9f "$D/$n/comparison.json"; rm -f "$D/$n/timeseries.png" "$D/$n/pareto.png"
}
case "$1" in
in|in2|in3)
  R=$1
  sim $R/ramp-seed1 --scenario ramp --seeds 1
  sim $R/spike-seed1 --scenario spike --seeds 1
  sim $R/bursty-seed1 $BF --seeds 1
  sim $R/azure-code-0 --trace $T/AzureLLMInferenceTrace_code.csv $C
  ;;
new)
  sim new/ramp-seeds45 --scenario ramp --seeds 4,5
  sim new/spike-seeds45 --scenario spike --seeds 4,5
  sim new/bursty-seeds45 $BF --seeds 4,5
  sim new/diurnal-seeds45 --scenario diurnal --seeds 4,5
  for s in 0 1200; do
    sim new/azure-code-$s-x1.5 --trace $T/AzureLLMInferenceTrace_code.csv --trace-start-s $s --trace-rate-scale 1.5 $C
    sim new/azure-conv-$s-x0.7 --trace $T/AzureLLMInferenceTrace_conv.csv --trace-start-s $s --trace-rate-scale 0.7 $C
  done
  ;;
confirm)   # a second held-out set, run once by the lead (README: "A second held-out set")
  sim confirm/ramp-seeds67 --scenario ramp --seeds 6,7
  sim confirm/spike-seeds67 --scenario spike --seeds 6,7
  sim confirm/bursty-seeds67 $BF --seeds 6,7
  sim confirm/diurnal-seeds67 --scenario diurnal --seeds 6,7
  sim confirm/azure-code-600-x1.25 --trace $T/AzureLLMInferenceTrace_code.csv --trace-start-s 600 --trace-rate-scale 1.25 $C
  sim confirm/azure-code-1800-x0.8 --trace $T/AzureLLMInferenceTrace_code.csv --trace-start-s 1800 --trace-rate-scale 0.8 $C
  sim confirm/azure-conv-600-x1.3 --trace $T/AzureLLMInferenceTrace_conv.csv --trace-start-s 600 --trace-rate-scale 1.3 $C
  sim confirm/azure-conv-1800-x0.9 --trace $T/AzureLLMInferenceTrace_conv.csv --trace-start-s 1800 --trace-rate-scale 0.9 $C
  ;;
old)
  for s in 1200 2400; do
    sim old/azure-code-$s --trace $T/AzureLLMInferenceTrace_code.csv --trace-start-s $s $C
    sim old/azure-conv-$s --trace $T/AzureLLMInferenceTrace_conv.csv --trace-start-s $s $C
  done
  sim old/azure-conv-0 --trace $T/AzureLLMInferenceTrace_conv.csv $C
  sim old/bursty-seeds23 $BF --seeds 2,3
  sim old/spike-seeds23 --scenario spike --seeds 2,3
  sim old/ramp-seeds23 --scenario ramp --seeds 2,3
  sim old/diurnal --scenario diurnal --seeds 1,2,3
  ;;
esac
