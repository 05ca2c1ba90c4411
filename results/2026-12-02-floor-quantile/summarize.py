"""The tables of README.md from the folders' comparison.json.gz (python3, no project imports).

Usage: python3 results/2026-12-02-floor-quantile/summarize.py in|in2|new|old
Each cell: SLO attainment at replica-seconds / fixed:MAX's, frontier gap (points), and
xN: the cheapest fixed fleet that dominates it.
"""

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
S = "saturation[floorStatistic="
LABELS = {
    "saturation": "**default** (peak)",
    S + "recurrent]": "recurrent",
    S + "recurrent;floorFraction=1]": "recurrent, 1",
    S + "recurrent;floorWindowSeconds=1800]": "recurrent, 1800 s",
    S + "quantile;floorQuantile=0.1]": "quantile 0.1",
    S + "quantile;floorQuantile=0.1;floorWindowSeconds=3600]": "quantile 0.1, 3600 s",
    S + "quantile;floorQuantile=0.4]": "quantile 0.4",
    S + "recurrent;floorFraction=0.5]": "recurrent, 0.5",
    S + "recurrent;floorFraction=0.75]": "recurrent, 0.75",
    S + "recurrent;floorRecurrences=3]": "recurrent ×3",
    S + "recurrent;floorSingleWindowSeconds=300]": "**recurrent + single 300 s**",
    S + "recurrent;floorFraction=0.75;floorSingleWindowSeconds=300]": "rec., 0.75 + single 300 s",
    S + "recurrent;floorFraction=0.75;floorSingleWindowSeconds=180]": "rec., 0.75 + single 180 s",
}


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
        names = [p for p in d["policies"] if not p.startswith("fixed:")]
        policies = policies or names
        table.append((path.parent.name, d["runs"]))
    print("| workload | " + " | ".join(LABELS.get(p, f"`{p}`") for p in policies) + " |")
    print("|---" * (len(policies) + 1) + "|")
    for name, runs in table:
        print(f"| `{name}` | " + " | ".join(cell(runs[p]) for p in policies) + " |")
    print()
    print("| mean gap, dominated | " + " | ".join(LABELS.get(p, f"`{p}`") for p in policies) + " |")
    print("|---" * (len(policies) + 1) + "|")
    means = []
    for p in policies:
        gaps = [100 * runs[p]["frontier_gap"] for _, runs in table]
        dom = sum(bool(runs[p]["dominated_by_fixed"]) for _, runs in table)
        means.append(f"{sum(gaps) / len(gaps):+.2f}, {dom}/{len(gaps)}".replace("-", "−"))
    print(f"| {group} ({len(table)} rows) | " + " | ".join(means) + " |")
    low = {
        p: [n for n, runs in table if n.startswith("azure") and runs[p]["slo_attainment"] < 0.95]
        for p in policies
    }
    print()
    for p, names in low.items():
        print(f"- {LABELS.get(p, p)}: trace windows below 95 %: {', '.join(names) or 'none'}")


if __name__ == "__main__":
    main(sys.argv[1])
