#!/usr/bin/env bash
# The README's Azure code row (20 minutes from 1,800 s, warm-up 900 s) with its window moved by
# -20, -10, +10 and +20 s: how much of the default's standing there is where one flash falls.
# Usage, from the repository root: results/2026-12-03-code-phase/run.sh START...  (traces in $TRACES)
set -euo pipefail
D=results/2026-12-03-code-phase
T=${TRACES:-/tmp/traces}
for start in "$@"; do
  out=$D/code-$start; mkdir -p "$out"
  nice -n 10 .venv/bin/python -m inflight sim compare --policies fixed:MAX,saturation \
    --trace "$T/AzureLLMInferenceTrace_code.csv" --trace-start-s "$start" --min-replicas 1 \
    --max-replicas 8 --seeds 1 --trace-duration-s 1200 --out-dir "$out" --force >"$out.log" 2>&1
  gzip -9f "$out/comparison.json"; rm -f "$out/timeseries.png" "$out/pareto.png" "$out/comparison.md" "$out.log"
done
