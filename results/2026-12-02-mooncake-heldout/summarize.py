"""The table of README.md from each window's comparison.json.gz: python3 summarize.py"""

import gzip
import json
from pathlib import Path

HERE = Path(__file__).parent
NAMES = {
    "saturation": "**default** (floor)",
    "saturation[floorWindowSeconds=0]": "floor off",
    "saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300]": "recurrent floor",
    "kpa": "KPA",
    "ray": "Ray",
    "vllm-waiting": "waiting > 5",
    "epp-queue": "EPP",
    "hpa-rps": "HPA rps",
    "qps": "QPS",
}


def cell(r: dict) -> str:
    dom = r.get("dominated_by_fixed") or []
    worst = f" ✗{min(int(str(x).split(':')[-1]) for x in dom)}" if dom else ""
    gap = 100 * r["frontier_gap"]
    return (
        f"{100 * r['slo_attainment']:.1f} % at {r['replica_seconds_ratio']:.2f}, "
        f"{gap:+.1f}{worst}".replace("-", "−")
    )


rows = {}
for f in sorted(HERE.glob("conv-*/comparison.json.gz"), key=lambda p: int(p.parent.name[5:])):
    runs = json.loads(gzip.decompress(f.read_bytes()))["runs"]
    rows[f.parent.name] = runs
print("| window | fixed:8 | " + " | ".join(NAMES.values()) + " |")
print("|---|" + "---|" * (len(NAMES) + 1))
for name, runs in rows.items():
    fixed = runs["fixed:8"]
    print(
        f"| `{name}` | {100 * fixed['slo_attainment']:.1f} % | "
        + " | ".join(cell(runs[k]) for k in NAMES)
        + " |"
    )
print()
for k, label in NAMES.items():
    gaps = [100 * runs[k]["frontier_gap"] for runs in rows.values()]
    dom = sum(bool(runs[k].get("dominated_by_fixed")) for runs in rows.values())
    print(f"- {label}: mean gap {sum(gaps) / len(gaps):+.2f}, dominated {dom}/{len(gaps)}")
