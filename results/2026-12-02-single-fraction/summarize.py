"""The tables of this folder's README: python3 summarize.py in|held (a group of this
folder, or any folder of rows: results/2026-12-02-startup-known uses it on its own)."""

import collections
import gzip
import json
import pathlib
import sys

R = "saturation[floorStatistic=recurrent;floorSingleWindowSeconds="
OA15 = "excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]"  # fleet-change
NAMES = {
    "saturation": "default",
    R + "900;floorSingleFraction=0.3]": "C",
    R + "900;floorSingleFraction=0.4]": "single 0.4",
    R + "900;floorSingleFraction=0.5]": "single 0.5",
    R + "300]": "recurrent, 300 s",
    "saturation[startupSeconds=100;excursionMargin=1.5]": "L",  # startup-known
    "saturation[startupSeconds=30;excursionMargin=1.5]": "L",
    "saturation[anticipateSeconds=130]": "A",  # results/2026-12-02-anticipate
    "saturation[scaleDownWindowSeconds=120]": "down 120",  # results/2026-12-03-down-window
    "saturation[scaleDownWindowSeconds=300]": "down 300",
    "saturation[reboundWindowSeconds=130]": "R130",  # results/2026-12-03-rebound
    "saturation[reboundWindowSeconds=190]": "R190",
    "saturation[reboundWindowSeconds=250]": "R250",
    "saturation[floorSmoothingSeconds=0]": "F0",
    "saturation[floorSmoothingSeconds=5]": "F5",
    "saturation[excursionFleets=larger]": "XL",  # results/2026-12-03-excursion-fleets
    "saturation[excursionFleets=larger;excursionMargin=1.5]": "XL, 1.5",
    "saturation[floorFraction=0.5]": "f0.5",  # results/2026-12-03-floor-fraction
    "saturation[floorFraction=0.7]": "f0.7",
    "saturation[floorFraction=0.8]": "f0.8",
    "saturation[floorWindowSeconds=600]": "W600",  # results/2026-12-03-floor-window
    "saturation[floorWindowSeconds=1200]": "W1200",
    "saturation[floorWindowSeconds=1800]": "W1800",
    "saturation[floorTolerance=0.1]": "T0.1",  # results/2026-12-03-floor-tolerance
    "saturation[floorTolerance=0.2]": "T0.2",
    "saturation[floorTolerance=0.3]": "T0.3",
    "saturation[floorShortFraction=0.7]": "S0.7",  # results/2026-12-03-floor-short
    "saturation[floorShortFraction=0.8]": "S0.8",
    "saturation[floorShortFraction=1]": "S1",
    "saturation[excursionFleetChange=own]": "O",  # results/2026-12-03-fleet-change
    "saturation[excursionFleetChange=own;excursionFleets=any]": "OA",
    "saturation[excursionFleetChange=own;excursionMargin=1.5]": "O, 1.5",
    "saturation[excursionFleetChange=own;excursionFleets=any;excursionMargin=1.5]": "OA, 1.5",
    "saturation[floorFilledFlashes=1]": "FF1",
    "saturation[floorFilledFlashes=1;excursionFleetChange=own]": "FF1 O",
    "saturation[floorFilledFlashes=1;" + OA15: "FF1 OA, 1.5",
    "saturation[floorShortFraction=0.8;excursionFleetChange=own]": "S0.8 O",
    "saturation[floorShortFraction=0.8;excursionFleetChange=own;excursionMargin=1.5]": (
        "S0.8 O, 1.5"
    ),
    "saturation[floorShortFraction=0.8;" + OA15: "S0.8 OA, 1.5",
    "saturation[excursionMargin=1]": "M1",  # results/2026-12-03-margin
}
group = pathlib.Path(__file__).parent / sys.argv[1]  # an absolute path stays as it is
cells: dict[str, dict[str, str]] = {}
gaps: dict[str, list[float]] = collections.defaultdict(list)
dominated: collections.Counter[str] = collections.Counter()
for path in sorted(group.glob("*/comparison.json.gz")):
    with gzip.open(path) as f:
        runs = json.load(f)["runs"]
    row = cells.setdefault(path.parent.name, {})
    for name, r in runs.items():
        if name.startswith("fixed:"):
            continue
        short = NAMES.get(name, name)
        dom = r["dominated_by_fixed"]
        mark = f" ✗{min(int(d.split(':')[1]) for d in dom)}" if dom else ""
        gap = 100 * r["frontier_gap"]
        row[short] = (
            f"{100 * r['slo_attainment']:.1f} % at {r['replica_seconds_ratio']:.2f}, "
            f"{gap:+.1f}{mark}".replace("-", "−")
        )
        gaps[short].append(gap)
        dominated[short] += bool(dom)
cols = [c for c in dict.fromkeys(NAMES.values()) if c in gaps]
print("| workload | " + " | ".join(cols) + " |")
print("|---|" + "---|" * len(cols))
for row, by in cells.items():
    print(f"| `{row}` | " + " | ".join(by.get(c, "") for c in cols) + " |")
print()
print("| mean gap, dominated | " + " | ".join(cols) + " |")
print("|---|" + "---:|" * len(cols))
print(
    f"| {group.name} ({len(cells)} rows) | "
    + " | ".join(
        f"{sum(gaps[c]) / len(gaps[c]):+.2f}, {dominated[c]}/{len(gaps[c])}".replace("-", "−")
        for c in cols
    )
    + " |"
)
