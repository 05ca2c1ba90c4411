"""Meetable warm draws, and those a fixed fleet dominates, by shape, from reports' tables.

Usage, from the repository root:
    .venv/bin/python results/2026-12-07-slo-step/shapes.py REPORT.md[.gz] ...
(the draws table of ``inflight sim generalize``'s ``generalize.md``; meetable: the best fixed
fleet meets the SLO for at least half the requests, as ``inflight.sim.generalize``).
"""

from __future__ import annotations

import gzip
import re
import sys
from collections import Counter


def main(paths: list[str]) -> None:
    total: Counter[str] = Counter()
    dominated: Counter[str] = Counter()
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as f:
            for line in f:
                if not re.match(r"^\| \d+ \|", line):
                    continue
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if float(cells[9].rstrip(" %")) < 50.0:
                    continue
                total[cells[2]] += 1
                dominated[cells[2]] += bool(cells[8])
    for shape in sorted(total):
        print(f"{shape}: {dominated[shape]} of {total[shape]} meetable draws dominated")


if __name__ == "__main__":
    main(sys.argv[1:])
