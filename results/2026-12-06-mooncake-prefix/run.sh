#!/usr/bin/env bash
# Issue 38: Mooncake's conversation trace (its hash_ids: 512-token blocks, the replicas'
# prefix caches) on the three windows of results/2026-12-02-mooncake-heldout, today's
# default router (least-outstanding) against prefix-aware dispatch with capacity in
# uncached tokens, each with the default policy and every fixed fleet (the frontier).
# Usage from the repository root, the trace in $TRACES (default /tmp/traces):
#   results/2026-12-06-mooncake-prefix/run.sh
# Only each run's comparison.md is kept, gzipped (the results folder's size budget).
set -euo pipefail
D=${D:-results/2026-12-06-mooncake-prefix}  # results/2026-12-07-slo-mooncake sets its own, and P
T=${TRACES:-/tmp/traces}/mooncake_conversation_trace.jsonl
P=${P:-'fixed:MAX,saturation'}
C='--min-replicas 1 --max-replicas 8 --seeds 1 --trace-duration-s 1200 --max-model-len 131072'
run() {  # dispatch, window start[, folder prefix, extra flags]
  local out="$D/${3:-}$1/conv-$2" tmp
  tmp=$(mktemp -d)/run
  echo "== $1 conv-$2 $(date -u +%T)"
  # shellcheck disable=SC2086
  .venv/bin/python -m inflight sim compare --policies "$P" --trace "$T" --trace-start-s "$2" $C \
    --dispatch "$1" ${4:-} --out-dir "$tmp" >"$tmp.log" 2>&1 || { tail -20 "$tmp.log"; rm -rf "${tmp%/run}"; return 1; }
  mkdir -p "$out"; gzip -9c "$tmp/comparison.md" > "$out/comparison.md.gz"; tail -3 "$tmp.log"; rm -rf "${tmp%/run}"
}
if [ "${1:-}" != kv ]; then
  for s in 0 1200 2400; do
    run least-outstanding "$s" &
    run prefix "$s"
    wait
  done
fi
# Added after the first table (README): a cache that binds, 1,024 usable blocks of 128
# tokens a replica (131,072 tokens: the longest request, about ten of the mean), where the
# token dimension counts uncached tokens with --dispatch prefix.
if [ "${1:-}" = kv ]; then
  for s in 0 1200 2400; do
    run least-outstanding "$s" kv1025- "--kv-blocks 1025" &
    run prefix "$s" kv1025- "--kv-blocks 1025"
    wait
  done
fi
