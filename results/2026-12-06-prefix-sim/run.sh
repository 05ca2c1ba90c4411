#!/usr/bin/env bash
# Prefix-aware dispatch in the simulator (issue 38): the router's --dispatch prefix
# (balance 2, its default, set before any run) against least-outstanding, on the shared-prefix
# scenario and the two negative controls (one hot group; no sharing), a replica's KV cache
# at 41 blocks (5,120 tokens: one replica cannot hold the 8 groups' prefixes), seeds 3 and 11
# (named before the run). Writes runs/<scenario>-<dispatch>-<seed>/ and summary.md.
set -euo pipefail
cd "$(dirname "$0")"
PY=../../.venv/bin/python
mkdir -p runs
for scenario in shared-prefix hot-prefix no-prefix; do
    for seed in 3 11; do
        for dispatch in least-outstanding prefix; do
            out="runs/$scenario-$dispatch-$seed"
            [ -d "$out" ] && continue
            "$PY" -m inflight sim run --scenario "$scenario" --seed "$seed" --kv-blocks 41 \
                --dispatch "$dispatch" --out-dir "$out" >/dev/null
        done
    done
done
"$PY" - <<'PY' > summary.md
import json, pathlib
rows = []
for run in sorted(pathlib.Path("runs").iterdir()):
    m = json.loads((run / "run.json").read_text())["measures"]
    pc = m.get("prefix_cache") or {}
    rows.append((run.name, pc.get("hit_rate", 0.0), m["slo_attainment"], m["ttft_s"]["p50"],
                 m["ttft_s"]["p95"], m["replica_seconds"]))
print("| run | engines' hit rate | SLO attainment | TTFT p50 s | TTFT p95 s | replica-s |")
print("|---|---:|---:|---:|---:|---:|")
for name, hit, att, p50, p95, rs in rows:
    print(f"| {name} | {hit:.3f} | {att:.1%} | {p50:.3f} | {p95:.3f} | {rs:,.0f} |")
PY
cat summary.md
