#!/usr/bin/env bash
# Issue 38/40: the SLO stage (sloTtftSeconds 2, the runs' TTFT SLO; sloGoal 0.99 and 0.999)
# beside today's default and every fixed fleet, on Mooncake's conversation trace: the three
# windows of results/2026-12-06-mooncake-prefix (0 s cold; 1,200 and 2,400 s warmed on the
# 900 s before), with today's router (least-outstanding) and with --dispatch prefix: that
# folder's run.sh, writing here.
# Usage from the repository root, the trace in $TRACES (default /tmp/traces):
#   results/2026-12-07-slo-mooncake/run.sh         # the three windows, both dispatches
#   results/2026-12-07-slo-mooncake/run.sh bound   # the cold window's bound (below)
# Only each run's comparison.md is kept, gzipped (the results folder's size budget).
set -euo pipefail
D=results/2026-12-07-slo-mooncake
if [ "${1:-}" != bound ]; then
  P="${POLICIES:-fixed:MAX,saturation,saturation[sloTtftSeconds=2;sloGoal=0.99],saturation[sloTtftSeconds=2;sloGoal=0.999]}" \
    D=$D exec results/2026-12-06-mooncake-prefix/run.sh
fi
# The cold window's bound: the maximum asked at the first request (targetSaturation 0.01:
# every replica from the start), least-outstanding.
T=${TRACES:-/tmp/traces}/mooncake_conversation_trace.jsonl
C='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200 --max-model-len 131072'
tmp=$(mktemp -d)/run
# shellcheck disable=SC2086
.venv/bin/python -m inflight sim compare --policies 'fixed:MAX,saturation[targetSaturation=0.01]' \
  --trace "$T" --trace-start-s 0 $C --out-dir "$tmp" >"$tmp.log" 2>&1
mkdir -p "$D/max-at-once/conv-0"; gzip -9c "$tmp/comparison.md" > "$D/max-at-once/conv-0/comparison.md.gz"; rm -rf "${tmp%/run}"
