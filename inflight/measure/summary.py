"""Several comparisons in one table: ``inflight results summarize DIR``.

A folder of rows, each row a subfolder holding one open-loop comparison's
``comparison.json`` (or ``.json.gz``; :mod:`inflight.measure.openloop_report`, written by
``inflight sim compare`` and ``inflight bench compare``), becomes Markdown tables:

* the cells: a row a workload, a column a policy (``layout="policies"`` turns it round),
  each cell ``SLO attainment % at replica-seconds ÷ the largest fleet's, frontier gap
  (points)`` and ``✗N`` when a fixed fleet dominates it, N the smallest such fleet;
* the means: each policy's mean frontier gap and how many of its rows were dominated;
* optionally the static frontier's fleets a row, each row's misses (and the capacity
  decisions bound by KV), and the rows below an attainment.

Fixed fleets are the frontier, not columns. A policy's column is headed by its label (``labels``,
several policies may share one, e.g. a start-up that differs by row) or by its name. Pure:
reading the files is :func:`load_rows`, the rest turns rows into text.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inflight.measure.frontier import fleet_size

MINUS = "−"  # U+2212: a gap's sign in the tables


@dataclass(frozen=True)
class Row:
    """One comparison: its folder's name, its runs by policy (``runs``) and its static
    frontier's fleets (``frontier.fleets``), as ``comparison.json`` has them."""

    name: str
    runs: Mapping[str, Mapping[str, Any]]
    fleets: Mapping[str, Mapping[str, Any]]


def read_comparison(path: Path) -> dict[str, Any]:
    """``comparison.json`` or ``comparison.json.gz``'s body."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    body: dict[str, Any] = json.loads(data)
    return body


def comparison_file(folder: Path) -> Path | None:
    for name in ("comparison.json.gz", "comparison.json"):
        if (folder / name).is_file():
            return folder / name
    return None


def load_rows(folder: Path, names: Sequence[str] = ()) -> list[Row]:
    """The rows of ``folder``: its subfolders with a comparison, by name, or ``names`` in
    that order (FileNotFoundError names one without a comparison)."""
    if names:
        folders = [folder / n for n in names]
    else:
        folders = sorted(p for p in folder.iterdir() if comparison_file(p) is not None)
    rows = []
    for sub in folders:
        path = comparison_file(sub)
        if path is None:
            raise FileNotFoundError(f"no comparison.json(.gz) in {sub}")
        body = read_comparison(path)
        fleets = (body.get("frontier") or {}).get("fleets") or {}
        rows.append(Row(sub.name, body["runs"], fleets))
    return rows


def signed(text: str) -> str:
    return text.replace("-", MINUS)


def dominated_mark(run: Mapping[str, Any]) -> str:
    """`` ✗N``: the smallest fixed fleet that dominates the run, or nothing."""
    sizes = [fleet_size(str(d)) for d in run.get("dominated_by_fixed") or []]
    known = [s for s in sizes if s is not None]
    return f" ✗{min(known)}" if known else ""


def cell(run: Mapping[str, Any]) -> str:
    """``attainment % at cost ratio, gap`` and the dominating fleet."""
    return signed(
        f"{100 * run['slo_attainment']:.1f} % at {run['replica_seconds_ratio']:.2f}, "
        f"{100 * run['frontier_gap']:+.1f}{dominated_mark(run)}"
    )


def point(run: Mapping[str, Any]) -> str:
    """A fleet's ``attainment % at cost ratio``."""
    return f"{100 * run['slo_attainment']:.1f} % at {run['replica_seconds_ratio']:.2f}"


@dataclass(frozen=True)
class Column:
    key: str  # the label, or the policy's name
    header: str  # the label, or the name in backticks


def columns(rows: Iterable[Row], labels: Mapping[str, str]) -> list[Column]:
    """The policies' columns: labelled ones in the labels' order, then the others in the
    order they first appear; fixed fleets are not columns."""
    present = {labels.get(p, p) for row in rows for p in row.runs if fleet_size(p) is None}
    out = [Column(label, label) for label in dict.fromkeys(labels.values()) if label in present]
    seen = {c.key for c in out}
    for row in rows:
        for p in row.runs:
            if fleet_size(p) is None and p not in labels and p not in seen:
                out.append(Column(p, f"`{p}`"))
                seen.add(p)
    return out


def by_column(row: Row, labels: Mapping[str, str]) -> dict[str, Mapping[str, Any]]:
    return {labels.get(p, p): r for p, r in row.runs.items() if fleet_size(p) is None}


def table(header: Sequence[str], lines: Iterable[Sequence[str]], align: str = "---") -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|---|" + f"{align}|" * (len(header) - 1)]
    out += ["| " + " | ".join(line) + " |" for line in lines]
    return out


def _workload_table(
    rows: Sequence[Row],
    cols: Sequence[Column],
    labels: Mapping[str, str],
    fixed_column: str | None,
    of_run: Callable[[Mapping[str, Any]], str],
    fixed_cell: Callable[[Row], str],
) -> list[str]:
    """A row a workload, a column a policy (``of_run`` of its run), and ``fixed_column``'s
    ``fixed_cell`` first when given."""
    head = ["workload", *([fixed_column] if fixed_column else []), *(c.header for c in cols)]
    lines = []
    for row in rows:
        runs = by_column(row, labels)
        fixed = [fixed_cell(row)] if fixed_column else []
        lines.append(
            [f"`{row.name}`", *fixed, *(of_run(runs[c.key]) if c.key in runs else "" for c in cols)]
        )
    return table(head, lines)


def cells_table(
    rows: Sequence[Row],
    cols: Sequence[Column],
    labels: Mapping[str, str],
    fixed_column: str | None = None,
) -> list[str]:
    """A row a workload; ``fixed_column`` (e.g. ``fixed:8``) adds that fleet's attainment."""

    def attainment(row: Row) -> str:
        assert fixed_column is not None
        run = row.runs.get(fixed_column) or row.fleets.get(fixed_column)
        return f"{100 * run['slo_attainment']:.1f} %" if run else ""

    return _workload_table(rows, cols, labels, fixed_column, cell, attainment)


def policies_table(
    rows: Sequence[Row], cols: Sequence[Column], labels: Mapping[str, str]
) -> list[str]:
    """Turned round: a row a policy (its label or bare name), a column a workload."""
    runs = [by_column(row, labels) for row in rows]
    lines = [[c.key, *(cell(r[c.key]) if c.key in r else "" for r in runs)] for c in cols]
    return table(["policy", *(f"`{row.name}`" for row in rows)], lines)


def means_table(
    rows: Sequence[Row], cols: Sequence[Column], labels: Mapping[str, str], group: str
) -> list[str]:
    """Each column's mean frontier gap (points) and its rows dominated by a fixed fleet."""
    parts = []
    for c in cols:
        runs = [r[c.key] for r in (by_column(row, labels) for row in rows) if c.key in r]
        gaps = [100 * r["frontier_gap"] for r in runs]
        dominated = sum(bool(r.get("dominated_by_fixed")) for r in runs)
        parts.append(signed(f"{sum(gaps) / len(gaps):+.2f}, {dominated}/{len(gaps)}"))
    head = ["mean gap, dominated", *(c.header for c in cols)]
    return table(head, [[f"{group} ({len(rows)} rows)", *parts]], align="---:")


def fleets_table(rows: Sequence[Row]) -> list[str]:
    """The static frontier: a row a fixed fleet, a column a workload."""
    sizes = sorted({s for row in rows for f in row.fleets if (s := fleet_size(f)) is not None})
    lines = []
    for n in sizes:
        fleets = [row.fleets.get(f"fixed:{n}") for row in rows]
        lines.append([f"`fixed:{n}`", *(point(f) if f else "" for f in fleets)])
    return table(["fleet", *(f"`{row.name}`" for row in rows)], lines)


def misses(run: Mapping[str, Any]) -> str:
    """``TTFT/TPOT`` misses, and ``; KV bound/decisions`` where the run has capacity
    decisions (its first seed's)."""
    m = run.get("misses") or {}
    text = f"{m.get('slo_ttft', 0)}/{m.get('slo_tpot', 0)}"
    seeds = run.get("seeds") or {}
    first = seeds[min(seeds, key=int)] if seeds else {}
    capacity = (first or {}).get("capacity")
    if capacity:
        text += f"; KV {capacity.get('kv_tokens', 0)}/{capacity.get('decisions', 0)}"
    return text


def misses_table(
    rows: Sequence[Row],
    cols: Sequence[Column],
    labels: Mapping[str, str],
    fixed_column: str | None = None,
) -> list[str]:
    """:func:`cells_table` of :func:`misses`; ``fixed_column`` adds that run's misses."""

    def fixed_misses(row: Row) -> str:
        assert fixed_column is not None
        run = row.runs.get(fixed_column)
        return misses(run) if run else ""

    return _workload_table(rows, cols, labels, fixed_column, misses, fixed_misses)


def below_lines(
    rows: Sequence[Row],
    cols: Sequence[Column],
    labels: Mapping[str, str],
    share: float,
    prefix: str = "",
) -> list[str]:
    """A line a column: its rows (named ``prefix``…) whose attainment is below ``share``."""
    out = []
    for c in cols:
        low = [
            row.name
            for row in rows
            if row.name.startswith(prefix)
            and c.key in (runs := by_column(row, labels))
            and runs[c.key]["slo_attainment"] < share
        ]
        what = f"{prefix} rows" if prefix else "rows"
        out.append(f"- {c.key}: {what} below {100 * share:g} %: {', '.join(low) or 'none'}")
    return out


@dataclass(frozen=True)
class Options:
    labels: Mapping[str, str]
    layout: str = "rows"  # or "policies"
    means: bool = True
    fleets: bool = False
    fixed_column: str | None = None
    misses: bool = False
    below: float | None = None
    below_prefix: str = ""


def summarize(rows: Sequence[Row], group: str, options: Options) -> str:
    """The Markdown of one folder of rows (``group``: its name in the means table)."""
    labels = options.labels
    cols = columns(rows, labels)
    if options.layout == "policies":
        parts = [policies_table(rows, cols, labels)]
    else:
        parts = [cells_table(rows, cols, labels, options.fixed_column)]
    if options.means:
        parts.append(means_table(rows, cols, labels, group))
    if options.fleets:
        parts.append(fleets_table(rows))
    if options.misses:
        parts.append(misses_table(rows, cols, labels, options.fixed_column))
    if options.below is not None:
        parts.append(below_lines(rows, cols, labels, options.below, options.below_prefix))
    return "\n\n".join("\n".join(p) for p in parts) + "\n"
