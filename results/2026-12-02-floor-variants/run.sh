#!/usr/bin/env bash
# The floor's variants against the default, in sample then held out (README.md).
# Usage: results/2026-12-02-floor-variants/run.sh in|out   (from the repository root)
set -euo pipefail
P='fixed:MAX,saturation,saturation[floorDecay=linear],saturation[floorDecay=linear;floorFraction=0.9],saturation[floorPeak=demand],saturation[floorPeak=demand;floorFraction=1],saturation[floorDecay=linear;floorPeak=demand;floorFraction=1]'
P=${POLICIES:-$P}
D=results/2026-12-02-floor-variants
T=${TRACES:-/tmp/traces}
B='poisson:0:0.5,200:0.5,200:3,260:3,260:0.5,500:0.5,500:3,560:3,560:0.5,800:0.5,800:3,860:3,860:0.5,1100:0.5,1100:3,1160:3,1160:0.5,1300:0.5'
BF="--arrivals $B --prompt-tokens lognormal:3000:0.6 --max-tokens lognormal:300:0.5 --min-replicas 1 --max-replicas 4 --startup-s 100"
C='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200'
sim() { n=$1; shift; echo "== $n $(date -u +%T)"; nice -n 10 .venv/bin/python -m inflight sim compare --policies "$P" --out-dir "$D/$n" "$@" >"$D/$n.log" 2>&1; gzip -9f "$D/$n/comparison.json"; rm -f "$D/$n/timeseries.png"; }
case "$1" in
in)
  sim ramp-seed1 --scenario ramp --seeds 1
  sim spike-seed1 --scenario spike --seeds 1
  sim bursty-seed1 $BF --seeds 1
  sim azure-code-0 --trace $T/AzureLLMInferenceTrace_code.csv $C
  ;;
out)
  for s in 1200 2400; do
    sim azure-code-$s --trace $T/AzureLLMInferenceTrace_code.csv --trace-start-s $s $C
    sim azure-conv-$s --trace $T/AzureLLMInferenceTrace_conv.csv --trace-start-s $s $C
  done
  sim azure-conv-0 --trace $T/AzureLLMInferenceTrace_conv.csv $C
  sim bursty-seeds23 $BF --seeds 2,3
  sim spike-seeds23 --scenario spike --seeds 2,3
  sim ramp-seeds23 --scenario ramp --seeds 2,3
  sim diurnal --scenario diurnal --seeds 1,2,3
  ;;
esac
