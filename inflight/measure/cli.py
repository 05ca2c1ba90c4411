"""``inflight results summarize DIR``: a folder of comparisons as one set of tables
(:mod:`inflight.measure.summary`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def label_flag(text: str) -> tuple[str, str]:
    """``POLICY=LABEL``, split at the last ``=`` (a policy's settings have their own)."""
    policy, sep, label = text.rpartition("=")
    if not sep or not policy or not label:
        raise argparse.ArgumentTypeError(f"expected POLICY=LABEL, got {text!r}")
    return policy, label


def register(subparsers: Any) -> None:
    results = subparsers.add_parser(
        "results",
        help="tables from result folders",
        description="Read result folders written by inflight sim compare / bench compare.",
    )
    sub = results.add_subparsers(dest="results_command", metavar="{summarize}")
    sub.required = True
    s = sub.add_parser(
        "summarize",
        help="a folder of comparisons (one subfolder a workload) as Markdown tables",
        description=(
            "Each subfolder of DIR with a comparison.json(.gz) is a row: every policy's SLO "
            "attainment at its replica-seconds (÷ the largest fleet's), its frontier gap in "
            "points and ✗N when fixed:N dominates it; then each policy's mean gap and rows "
            "dominated. Fixed fleets are the frontier, not columns."
        ),
    )
    s.add_argument("dir", type=Path, help="the folder of rows")
    s.add_argument("--rows", default="", help="ROW,ROW,…: these subfolders in this order")
    s.add_argument(
        "--label",
        type=label_flag,
        action="append",
        default=[],
        metavar="POLICY=LABEL",
        help="a column's heading (repeatable; columns in this order; policies with the "
        "same label share a column)",
    )
    s.add_argument(
        "--layout",
        choices=("rows", "policies"),
        default="rows",
        help="rows: a row a workload; policies: a row a policy",
    )
    s.add_argument("--no-means", action="store_true", help="no table of mean gaps")
    s.add_argument("--fleets", action="store_true", help="the static frontier's fleets too")
    s.add_argument("--fixed-column", metavar="fixed:N", help="that fleet's attainment a row")
    s.add_argument("--misses", action="store_true", help="each run's TTFT/TPOT misses too")
    s.add_argument("--below", type=float, metavar="SHARE", help="rows below this attainment")
    s.add_argument("--below-prefix", default="", help="--below: only rows named so")
    s.set_defaults(func=_summarize)


def _summarize(args: argparse.Namespace) -> int:
    from inflight.measure.summary import Options, load_rows, summarize

    names = [n for n in args.rows.split(",") if n]
    try:
        rows = load_rows(args.dir, names)
    except (FileNotFoundError, NotADirectoryError) as exc:
        print(f"inflight results summarize: {exc}", file=sys.stderr)
        return 2
    if not rows:
        print(f"inflight results summarize: no comparison under {args.dir}", file=sys.stderr)
        return 2
    options = Options(
        labels=dict(args.label),
        layout=args.layout,
        means=not args.no_means,
        fleets=args.fleets,
        fixed_column=args.fixed_column,
        misses=args.misses,
        below=args.below,
        below_prefix=args.below_prefix,
    )
    sys.stdout.write(summarize(rows, args.dir.resolve().name, options))
    return 0
