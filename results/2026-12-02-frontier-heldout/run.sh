#!/usr/bin/env bash
# The README's open-loop table: every policy against the static frontier on rows no setting
# of the default was chosen on (results/2026-12-02-single-fraction's held-out rows).
# Usage, from the repository root: results/2026-12-02-frontier-heldout/run.sh (traces in $TRACES).
set -euo pipefail
D=${D:-results/2026-12-02-frontier-heldout}  # results/2026-12-02-frontier-anticipate sets its own, and P
T=${TRACES:-/tmp/traces}
P=${P:-'fixed:MAX,saturation,saturation[floorStatistic=peak],saturation[floorWindowSeconds=0],kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps'}
B='0:0.5,200:0.5,200:3,260:3,260:0.5,500:0.5,500:3,560:3,560:0.5,800:0.5,800:3,860:3,860:0.5,1100:0.5,1100:3,1160:3,1160:0.5'
BW="$B,1400:0.5,1400:3,1460:3,1460:0.5,1700:0.5,1700:3,1760:3,1760:0.5,2000:0.5,2000:3,2060:3,2060:0.5,2200:0.5"
BL='--prompt-tokens lognormal:3000:0.6 --max-tokens lognormal:300:0.5 --min-replicas 1 --max-replicas 4 --startup-s 100'
TW='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200'
sim() {
  n=$1; shift; echo "== $n $(date -u +%T)"
  nice -n 10 .venv/bin/python -m inflight sim compare --policies "$P" --out-dir "$D/$n" --force "$@" >"$D/$n.log" 2>&1
  gzip -9f "$D/$n/comparison.json"; rm -f "$D/$n/timeseries.png" "$D/$n/pareto.png" "$D/$n.log"
}
sim ramp --scenario ramp --seeds 12,13
sim spike --scenario spike --seeds 12,13
sim diurnal --scenario diurnal --seeds 12,13
# shellcheck disable=SC2086
sim bursty-warm --arrivals "poisson:$BW" --arrivals-warmup-s 900 $BL --seeds 12,13
# shellcheck disable=SC2086
sim bursty-cold --arrivals "poisson:$B,1300:0.5" $BL --seeds 12,13
# shellcheck disable=SC2086
sim azure-code-1800 --trace "$T/AzureLLMInferenceTrace_code.csv" --trace-start-s 1800 $TW
# shellcheck disable=SC2086
sim azure-conv-1800 --trace "$T/AzureLLMInferenceTrace_conv.csv" --trace-start-s 1800 $TW
