#!/usr/bin/env bash
# The parse-once and token-id changes' costs before (OLD) and after (this tree), alternately,
# one fresh process per tree per round, nothing else running:
#   results/2026-12-03-parse-once/ab.sh OLD_COMMIT [ROUNDS]     (from the repository root)
# Each round: costs.py (the scaler's own part of a GetMetrics, the router's token demand),
# then a simulated row's wall time (the README's Azure code row, the default policy).
set -euo pipefail
old=$1 rounds=${2:-5}
here=$(pwd) wt=$(mktemp -d) out=$(mktemp -d)
trap 'git worktree remove --force "$wt" >/dev/null 2>&1 || true; rm -rf "$out"' EXIT
git worktree add -q --detach "$wt" "$old"
T=${TRACES:-/tmp/traces}
for r in $(seq "$rounds"); do
  for tree in "$wt" "$here"; do
    name=old; [ "$tree" = "$here" ] && name=new
    costs=$(PYTHONPATH=$tree .venv/bin/python "$here/results/2026-12-03-parse-once/costs.py")
    began=$(date +%s%N)
    PYTHONPATH=$tree .venv/bin/python -P -m inflight sim run --policy saturation \
      --trace "$T/AzureLLMInferenceTrace_code.csv" --trace-start-s 1800 --trace-duration-s 1200 \
      --trace-warmup-s 900 --min-replicas 1 --max-replicas 8 --out-dir "$out/$r-$name" >/dev/null
    echo "$r $name $costs sim_ms=$(( ($(date +%s%N) - began) / 1000000 ))"
  done
done
