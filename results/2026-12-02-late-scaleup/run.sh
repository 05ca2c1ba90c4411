#!/usr/bin/env bash
# No scale-up that cannot arrive in time (startupSeconds, excursionWindowSeconds,
# excursionMargin) against the default and the recurrent floor: chosen in sample, judged on
# held-out traffic (README.md). The approach of results/2026-12-02-floor-quantile/run.sh.
# Usage: results/2026-12-02-late-scaleup/run.sh in|held   (from the repository root)
# POLICIES= overrides the policies; '@S' in them becomes each row's replica start-up (seed s:
# 100 for the scenarios and the bursty workload, the simulator's 30 for the traces).
set -euo pipefail
P='fixed:MAX,saturation,saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300],saturation[startupSeconds=@S],saturation[startupSeconds=@S;excursionMargin=1.5],saturation[startupSeconds=@S;excursionMargin=2]'
P=${POLICIES:-$P}
D=results/2026-12-02-late-scaleup
T=${TRACES:-/tmp/traces}
B='poisson:0:0.5,200:0.5,200:3,260:3,260:0.5,500:0.5,500:3,560:3,560:0.5,800:0.5,800:3,860:3,860:0.5,1100:0.5,1100:3,1160:3,1160:0.5,1300:0.5'
BF="--arrivals $B --prompt-tokens lognormal:3000:0.6 --max-tokens lognormal:300:0.5 --min-replicas 1 --max-replicas 4 --startup-s 100"
C='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200'
sim() {
  # sim <startup s> <row> <flags...>: the scenarios' start-up is inflight.workload.scenarios.STARTUP_S
  # (100 s), a trace's the simulator's default (inflight.sim.core.SimConfig.startup_s, 30 s).
  s=$1; n=$2; shift 2; echo "== $n $(date -u +%T)"; mkdir -p "$(dirname "$D/$n")"
  nice -n 10 .venv/bin/python -m inflight sim compare --policies "${P//@S/$s}" --out-dir "$D/$n" "$@" >"$D/$n.log" 2>&1
  gzip -9f "$D/$n/comparison.json"; rm -f "$D/$n/timeseries.png" "$D/$n/pareto.png" "$D/$n.log"
}
case "$1" in
in|in2|in3)
  R=$1
  sim 100 $R/ramp-seed1 --scenario ramp --seeds 1
  sim 100 $R/spike-seed1 --scenario spike --seeds 1
  sim 100 $R/bursty-seed1 $BF --seeds 1
  sim 30 $R/azure-code-0 --trace $T/AzureLLMInferenceTrace_code.csv $C
  ;;
held)   # held out, run once after the rule was written (README)
  sim 100 held/ramp-seeds89 --scenario ramp --seeds 8,9
  sim 100 held/spike-seeds89 --scenario spike --seeds 8,9
  sim 100 held/bursty-seeds89 $BF --seeds 8,9
  sim 100 held/diurnal-seeds89 --scenario diurnal --seeds 8,9
  sim 30 held/azure-code-0-x1.1 --trace $T/AzureLLMInferenceTrace_code.csv --trace-rate-scale 1.1 $C
  sim 30 held/azure-code-1200-x0.9 --trace $T/AzureLLMInferenceTrace_code.csv --trace-start-s 1200 --trace-rate-scale 0.9 $C
  sim 30 held/azure-conv-0-x1.2 --trace $T/AzureLLMInferenceTrace_conv.csv --trace-rate-scale 1.2 $C
  sim 30 held/azure-conv-1200-x0.8 --trace $T/AzureLLMInferenceTrace_conv.csv --trace-start-s 1200 --trace-rate-scale 0.8 $C
  ;;
esac
