"""The README's tables from each folder's comparison.json.gz (and the peers' points from
results/2026-12-02-frontier-warm, which ran the same workloads): python3 summarize.py"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
PEERS_FROM = HERE.parent / "2026-12-02-frontier-warm"
PEERS = ("kpa", "ray", "vllm-waiting", "epp-queue", "hpa-rps", "qps")
IN = ("ramp-seed1", "spike-seed1", "bursty-seed1", "azure-code-0")
OUT = (
    "diurnal",
    "ramp-seeds23",
    "spike-seeds23",
    "bursty-seeds23",
    "azure-code-1200",
    "azure-code-2400",
    "azure-conv-0",
    "azure-conv-1200",
    "azure-conv-2400",
)
TRACES = {
    "azure-code-0",
    "azure-code-1200",
    "azure-code-2400",
    "azure-conv-0",
    "azure-conv-1200",
    "azure-conv-2400",
}


def load(folder: Path) -> dict | None:
    path = folder / "comparison.json.gz"
    if not path.exists():
        return None
    with gzip.open(path, "rt") as f:
        return json.load(f)["runs"]


def dominates(a: dict, b: dict) -> bool:
    """a has >= b's attainment at <= its replica-seconds, one strictly."""
    ax, ay = a["replica_seconds_ratio"], a["slo_attainment"]
    bx, by = b["replica_seconds_ratio"], b["slo_attainment"]
    return ax <= bx and ay >= by and (ax < bx or ay > by)


def cell(r: dict) -> str:
    fixed = r.get("dominated_by_fixed") or []
    mark = f" ✗{min(int(f.split(':')[1]) for f in fixed)}" if fixed else ""
    return (
        f"{100 * r['slo_attainment']:.1f} % at {r['replica_seconds_ratio']:.2f}, "
        f"{100 * r['frontier_gap']:+.1f}{mark}"
    )


def main() -> None:
    rows = [(n, "in") for n in IN] + [(n, "out") for n in OUT]
    variants: list[str] = []
    table, gaps, doms, below = [], {}, {}, {}
    for name, sample in rows:
        runs = load(HERE / name)
        if runs is None:
            continue
        ours = [k for k in runs if k.startswith("saturation")]
        for k in ours:
            if k not in variants:
                variants.append(k)
        peers = load(PEERS_FROM / name) or {}
        cells = []
        for k in variants:
            r = runs.get(k)
            if r is None:
                cells.append("–")
                continue
            by_peer = [p for p in PEERS if p in peers and dominates(peers[p], r)]
            cells.append(cell(r) + (f" (peer: {', '.join(by_peer)})" if by_peer else ""))
            gaps.setdefault((k, sample), []).append(r["frontier_gap"])
            doms.setdefault((k, sample), []).append(bool(r.get("dominated_by_fixed")))
            if sample == "out" and name in TRACES and r["slo_attainment"] < 0.95:
                below.setdefault(k, []).append(f"{name} {100 * r['slo_attainment']:.1f} %")
        table.append(f"| `{name}` | {sample} | " + " | ".join(cells) + " |")
    print("| workload | sample | " + " | ".join(f"`{v}`" for v in variants) + " |")
    print("|---|---|" + "---|" * len(variants))
    print("\n".join(table))
    print()
    print("| rows | " + " | ".join(f"`{v}`" for v in variants) + " |")
    print("|---|" + "---:|" * len(variants))
    for sample, label in (("in", "in sample"), ("out", "held out")):
        parts = []
        for v in variants:
            g, d = gaps.get((v, sample), []), doms.get((v, sample), [])
            parts.append(f"{100 * sum(g) / len(g):+.1f}, {sum(d)}/{len(d)}" if g else "–")
        print(f"| {label} | " + " | ".join(parts) + " |")
    print()
    for v in variants:
        print(f"held-out trace windows below 95 % for `{v}`: {below.get(v, []) or 'none'}")


if __name__ == "__main__":
    sys.exit(main())
