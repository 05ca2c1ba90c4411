"""The tables of README.md from each run's comparison.json.gz: python3 summarize.py"""

import gzip
import json
from pathlib import Path

HERE = Path(__file__).parent
NAMES = {
    "saturation": "**default** (auto)",
    "saturation[capacity=requests]": "slots only",
    "saturation[targetSaturation=0.7;growthHorizonSeconds=200]": "interactive",
    "vllm-waiting": "waiting > 5",
    "epp-queue": "EPP",
}
SIZES = ("kv143k", "kv287k", "kv573k")


def cell(r: dict) -> str:
    dom = r.get("dominated_by_fixed") or []
    worst = f" ✗{min(int(str(x).split(':')[-1]) for x in dom)}" if dom else ""
    gap = 100 * r["frontier_gap"]
    return (
        f"{100 * r['slo_attainment']:.1f} % at {r['replica_seconds_ratio']:.2f}, "
        f"{gap:+.1f}{worst}".replace("-", "−")
    )


def misses(r: dict) -> str:
    m = r.get("misses", {})
    return f"{m.get('slo_ttft', 0)}/{m.get('slo_tpot', 0)}"


def kv(r: dict) -> str:
    c = (r.get("seeds", {}).get("1") or {}).get("capacity") or {}
    return f"{c.get('kv_tokens', 0)}/{c.get('decisions', 0)}" if c else "–"


for size in SIZES:
    files = sorted(
        HERE.glob(f"{size}/conv-*/comparison.json.gz"), key=lambda p: int(p.parent.name[5:])
    )
    if not files:
        continue
    print(f"\n### {size}\n")
    print("| window | fixed:8 | " + " | ".join(NAMES.values()) + " |")
    print("|---|" + "---|" * (len(NAMES) + 1))
    rows = {}
    for f in files:
        runs = json.loads(gzip.decompress(f.read_bytes()))["runs"]
        rows[f.parent.name] = runs
        fixed = runs["fixed:8"]
        print(
            f"| `{f.parent.name}` | {100 * fixed['slo_attainment']:.1f} % | "
            + " | ".join(cell(runs[k]) for k in NAMES)
            + " |"
        )
    print("\nmisses TTFT/TPOT; KV-bound decisions/decisions (inflight's policies):\n")
    print("| window | fixed:8 | " + " | ".join(NAMES.values()) + " |")
    print("|---|" + "---|" * (len(NAMES) + 1))
    for w, runs in rows.items():
        print(
            f"| `{w}` | {misses(runs['fixed:8'])} | "
            + " | ".join(
                misses(runs[k]) + (f"; KV {kv(runs[k])}" if k.startswith("saturation") else "")
                for k in NAMES
            )
            + " |"
        )
    print()
    for k, label in NAMES.items():
        gaps = [100 * r[k]["frontier_gap"] for r in rows.values()]
        dom = sum(bool(r[k].get("dominated_by_fixed")) for r in rows.values())
        print(f"- {label}: mean gap {sum(gaps) / len(gaps):+.2f}, dominated {dom}/{len(gaps)}")
