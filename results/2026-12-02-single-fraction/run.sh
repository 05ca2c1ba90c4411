#!/usr/bin/env bash
# Usage, from the repository root: POLICIES='fixed:MAX,...' results/2026-12-02-single-fraction/run.sh GROUP ROW...
# ROW: ramp-sN, spike-sN, diurnal-sN (seed N), bursty-warm-sN, bursty-cold-sN, code-START[-SCALE],
# conv-START[-SCALE] (Azure LLM inference 2023), moon-START (Mooncake conversation), traces in $TRACES.
set -euo pipefail
D=${D:-results/2026-12-02-single-fraction}  # results/2026-12-02-startup-known sets its own
T=${TRACES:-/tmp/traces}
G=$1; shift
B='0:0.5,200:0.5,200:3,260:3,260:0.5,500:0.5,500:3,560:3,560:0.5,800:0.5,800:3,860:3,860:0.5,1100:0.5,1100:3,1160:3,1160:0.5'
BL='--prompt-tokens lognormal:3000:0.6 --max-tokens lognormal:300:0.5 --min-replicas 1 --max-replicas 4 --startup-s 100'
# Warm: the same bursts 900 s earlier too; those 900 s replayed first, not measured.
BW="$B,1400:0.5,1400:3,1460:3,1460:0.5,1700:0.5,1700:3,1760:3,1760:0.5,2000:0.5,2000:3,2060:3,2060:0.5,2200:0.5"
TW='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200'
for row in "$@"; do
  case $row in
    ramp-s* | spike-s* | diurnal-s*) a="--scenario ${row%-s*} --seeds ${row##*-s}" ;;
    bursty-cold-s*) a="--arrivals poisson:$B,1300:0.5 $BL --seeds ${row#bursty-cold-s}" ;;
    bursty-warm-s*) a="--arrivals poisson:$BW --arrivals-warmup-s 900 $BL --seeds ${row#bursty-warm-s}" ;;
    code-* | conv-*)
      IFS=- read -r kind start scale <<<"$row"
      a="--trace $T/AzureLLMInferenceTrace_$kind.csv --trace-start-s $start --trace-rate-scale ${scale:-1} $TW" ;;
    moon-*) a="--trace $T/mooncake_conversation_trace.jsonl --trace-start-s ${row#moon-} $TW --max-model-len 131072" ;;
    *) echo "unknown row $row" >&2; exit 2 ;;
  esac
  out=$D/$G/$row; mkdir -p "$out"
  # shellcheck disable=SC2086
  nice -n 10 .venv/bin/python -m inflight sim compare $a --policies "$POLICIES" --out-dir "$out" --force >"$out.log" 2>&1
  gzip -9f "$out/comparison.json"; rm -f "$out/timeseries.png" "$out/pareto.png" "$out.log"
done
