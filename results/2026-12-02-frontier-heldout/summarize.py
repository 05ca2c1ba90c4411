"""The table of this folder's README: python3 summarize.py [FOLDER] (this folder unless
given: results/2026-12-02-frontier-anticipate uses it on its own rows)."""

import gzip
import json
import pathlib
import sys

HERE = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parent
ROWS = [
    "ramp",
    "spike",
    "diurnal",
    "bursty-warm",
    "bursty-cold",
    "azure-code-1800",
    "azure-conv-1800",
]
runs = {}
for row in ROWS:
    with gzip.open(HERE / row / "comparison.json.gz") as f:
        runs[row] = json.load(f)
print("| policy | " + " | ".join(f"`{r}`" for r in ROWS) + " |")
print("|---|" + "---|" * len(ROWS))
for name in [n for n in runs["ramp"]["runs"] if not n.startswith("fixed:")]:
    cells = []
    for row in ROWS:
        r = runs[row]["runs"][name]
        dom = r["dominated_by_fixed"]
        mark = f" ✗{min(int(d.split(':')[1]) for d in dom)}" if dom else ""
        cells.append(
            f"{100 * r['slo_attainment']:.1f} % at {r['replica_seconds_ratio']:.2f}, "
            f"{100 * r['frontier_gap']:+.1f}{mark}".replace("-", "−")
        )
    print(f"| {name} | " + " | ".join(cells) + " |")
print()
print("| fleet | " + " | ".join(f"`{r}`" for r in ROWS) + " |")
print("|---|" + "---|" * len(ROWS))
for n in range(1, 9):
    cells = []
    for row in ROWS:
        f = runs[row]["frontier"]["fleets"].get(f"fixed:{n}")
        cells.append(
            f"{100 * f['slo_attainment']:.1f} % at {f['replica_seconds_ratio']:.2f}" if f else ""
        )
    print(f"| `fixed:{n}` | " + " | ".join(cells) + " |")
