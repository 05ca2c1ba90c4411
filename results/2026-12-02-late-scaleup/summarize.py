"""The tables of README.md from the folders' comparison.json.gz (python3, no project imports).

Usage: python3 results/2026-12-02-late-scaleup/summarize.py in|in2|held
Each cell: SLO attainment at replica-seconds / fixed:MAX's, frontier gap (points), and
xN: the cheapest fixed fleet that dominates it. A variant's startupSeconds is each row's
replica start-up (100 s for the scenarios and the bursty workload, 30 s for the traces),
written S below.
"""

import gzip
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent
R = "saturation[floorStatistic=recurrent;floorSingleWindowSeconds=300"
W = "saturation[startupSeconds=S;excursionMargin=1.5;excursionWindowSeconds="
LABELS = {
    "saturation": "**default**",
    R + "]": "recurrent + single 300 s",
    "saturation[startupSeconds=S]": "late, margin 1",
    "saturation[startupSeconds=S;excursionMargin=1.5]": "late, margin 1.5",
    "saturation[startupSeconds=S;excursionMargin=2]": "late, margin 2",
    R + ";startupSeconds=S;excursionMargin=1.5]": "recurrent + late 1.5",
    R + ";startupSeconds=S;excursionMargin=2]": "recurrent + late 2",
    W + "300]": "late 1.5, 300 s",
    W + "1800]": "late 1.5, 1800 s",
}


def norm(policy: str) -> str:
    return re.sub(r"startupSeconds=[0-9.]+", "startupSeconds=S", policy)


def cell(run: dict) -> str:
    dom = run["dominated_by_fixed"]
    cheapest = min((int(d.split(":")[1]) for d in dom), default=None)
    mark = f" ✗{cheapest}" if cheapest is not None else ""
    gap = f"{100 * run['frontier_gap']:+.1f}".replace("-", "−")
    return f"{100 * run['slo_attainment']:.1f} % at {run['replica_seconds_ratio']:.2f}, {gap}{mark}"


def main(group: str) -> None:
    rows = sorted((HERE / group).glob("*/comparison.json.gz"))
    policies: list[str] = []
    table = []
    for path in rows:
        d = json.loads(gzip.decompress(path.read_bytes()))
        runs = {norm(p): r for p, r in d["runs"].items()}
        names = [norm(p) for p in d["policies"] if not p.startswith("fixed:")]
        policies = policies or names
        table.append((path.parent.name, runs))
    label = [LABELS.get(p, f"`{p}`") for p in policies]
    print("| workload | " + " | ".join(label) + " |")
    print("|---" * (len(policies) + 1) + "|")
    for name, runs in table:
        print(f"| `{name}` | " + " | ".join(cell(runs[p]) for p in policies) + " |")
    print()
    print("| mean gap, dominated | " + " | ".join(label) + " |")
    print("|---" * (len(policies) + 1) + "|")
    means = []
    for p in policies:
        gaps = [100 * runs[p]["frontier_gap"] for _, runs in table]
        dom = sum(bool(runs[p]["dominated_by_fixed"]) for _, runs in table)
        means.append(f"{sum(gaps) / len(gaps):+.2f}, {dom}/{len(gaps)}".replace("-", "−"))
    print(f"| {group} ({len(table)} rows) | " + " | ".join(means) + " |")
    print()
    for p in policies:
        low = [n for n, runs in table if n.startswith("azure") and runs[p]["slo_attainment"] < 0.95]
        print(f"- {LABELS.get(p, p)}: trace windows below 95 %: {', '.join(low) or 'none'}")


if __name__ == "__main__":
    main(sys.argv[1])
