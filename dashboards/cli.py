"""``inflight dashboards build [--check]``: the one wiring site of this package."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from inflight import extras


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dashboards",
        help="build the Grafana dashboards and Prometheus rules",
        description="Grafana dashboards and Prometheus rules, generated from dashboards/.",
    )
    sub = parser.add_subparsers(dest="dashboards_command", metavar="ACTION", required=True)
    build = sub.add_parser(
        "build",
        help="write dashboards/json/*.json, the rule file and the two generated manifests",
    )
    build.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when a committed file differs from what would be generated",
    )
    build.add_argument(
        "--root",
        type=Path,
        default=None,
        help="repository root to write under (default: the checkout this package is in)",
    )
    build.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (missing := extras.require("dashboards", "inflight dashboards build")) is not None:
        return missing
    from dashboards import build as b

    root: Path = args.root if args.root is not None else b.REPO_ROOT
    if not root.is_dir():
        print(f"--root: {root} is not a directory", file=sys.stderr)
        return 2
    files = b.render()
    if args.check:
        stale = b.stale(root, files)
        for rel in stale:
            print(f"out of date: {rel} (run: inflight dashboards build)", file=sys.stderr)
        return 1 if stale else 0
    for rel in b.write(root, files):
        print(f"wrote {rel}")
    return 0
