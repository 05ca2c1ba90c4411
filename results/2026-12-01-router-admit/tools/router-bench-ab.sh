#!/usr/bin/env bash
# Interleaved A/B of scripts/bench_router.py's capacity scenario: base c958355 vs h-router.
set -u
OUT=/work/wt/router/results/2026-12-01-router-admit
PY=/work/wt/router/.venv/bin/python
for i in 1 2 3; do
  echo "== before $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd /tmp/router-before && PYTHONPATH=/tmp/router-before $PY scripts/bench_router.py \
      --scenarios capacity --no-aiohttp-peer --out $OUT/before-$i.json) 2>&1 | grep -E "capacity|written|error"
  echo "== after $i $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd /work/wt/router && $PY scripts/bench_router.py \
      --scenarios capacity --no-aiohttp-peer --out $OUT/after-$i.json) 2>&1 | grep -E "capacity|written|error"
done
