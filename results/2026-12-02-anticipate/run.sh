#!/usr/bin/env bash
# The rows of results/2026-12-02-single-fraction/run.sh, written into this folder, and one
# more workload: bursty400-warm-sN, 90 s bursts (3 req/s over 0.5) every 400 s, the first
# 1,200 s (three bursts) replayed unmeasured, then 1,200 s measured; 1-4 replicas, 100 s
# start-up, seed N. No setting was chosen on it.
# Usage, from the repository root: POLICIES='fixed:MAX,...' results/2026-12-02-anticipate/run.sh GROUP ROW...
set -euo pipefail
D=${D:-results/2026-12-02-anticipate}  # results/2026-12-03-startup-default sets its own
G=$1; shift
for row in "$@"; do
  case $row in
    bursty400-warm-s*)
      a="0:0.5"
      for s in 200 600 1000 1400 1800 2200; do a="$a,$s:0.5,$s:3,$((s + 90)):3,$((s + 90)):0.5"; done
      out=$D/$G/$row; mkdir -p "$out"
      nice -n 10 .venv/bin/python -m inflight sim compare --arrivals "poisson:$a,2400:0.5" \
        --arrivals-warmup-s 1200 --prompt-tokens lognormal:3000:0.6 --max-tokens lognormal:300:0.5 \
        --min-replicas 1 --max-replicas 4 --startup-s 100 --seeds "${row#bursty400-warm-s}" \
        --policies "$POLICIES" --out-dir "$out" --force >"$out.log" 2>&1
      gzip -9f "$out/comparison.json"; rm -f "$out/timeseries.png" "$out/pareto.png" "$out.log" ;;
    *) D=$D results/2026-12-02-single-fraction/run.sh "$G" "$row" ;;
  esac
done
