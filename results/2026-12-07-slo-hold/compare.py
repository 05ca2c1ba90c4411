"""Two ``inflight sim generalize`` runs of the same draws, one policy each (two commits):
the summary of each over the meetable draws, and the draws where they differ.

    python results/2026-12-07-slo-hold/compare.py BEFORE/generalize.json AFTER/generalize.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def gaps(path: str) -> dict[int, tuple[float, bool]]:
    body = json.loads(Path(path).read_text())
    out = {}
    for d in body["draws"]:
        if d["best_fixed_attainment"] < 0.5:
            continue
        (run,) = d["policies"].values()
        out[d["draw"]["seed"]] = (run["frontier_gap_points"], bool(run["dominated_by_fixed"]))
    return out


def summary(g: dict[int, tuple[float, bool]]) -> str:
    v = sorted(x for x, _ in g.values())
    p10 = v[int(0.1 * (len(v) - 1))]
    share = 100 * sum(d for _, d in g.values()) / len(g)
    return (
        f"{len(v)} meetable: mean {statistics.mean(v):+.2f}, median {statistics.median(v):+.2f}, "
        f"p10 {p10:+.2f}, worst {v[0]:+.2f}, dominated {share:.1f} %"
    )


def main() -> None:
    before, after = gaps(sys.argv[1]), gaps(sys.argv[2])
    assert before.keys() == after.keys(), "not the same draws"
    print("before:", summary(before))
    print("after: ", summary(after))
    moved = sorted((after[s][0] - before[s][0], s) for s in before if after[s] != before[s])
    print(f"{len(moved)} draws moved:", ", ".join(f"{s} {m:+.1f}" for m, s in moved))


if __name__ == "__main__":
    main()
