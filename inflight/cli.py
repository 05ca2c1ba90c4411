"""The ``inflight`` command line: one entry point, one subcommand per service.

Each subcommand lives in its own package as a module exposing
``register(subparsers) -> None``; that function adds a parser and sets
``func=<callable(args) -> int>`` as its default. Heavy imports (FastAPI, gRPC,
aiohttp) stay inside the callable so ``inflight --help`` is fast. A subcommand
whose module is not there yet is simply not listed: nothing pretends to work
before it does.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from inflight import __version__

# (subcommand, module that registers it), in the order ``--help`` lists them.
SUBCOMMAND_MODULES: tuple[tuple[str, str], ...] = (
    ("emulator", "inflight.emulator.cli"),
    ("router", "router.cli"),
    ("scaler", "external_scaler.cli"),
    ("up", "inflight.up.cli"),
    ("bench", "inflight.bench.cli"),
    ("dashboards", "dashboards.cli"),
    ("sim", "inflight.sim.cli"),
    ("results", "inflight.measure.cli"),
)


def available_subcommands() -> list[str]:
    """Names of the subcommands whose module exists in this install."""
    return [name for name, module in SUBCOMMAND_MODULES if _load(module) is not None]


def _load(module_name: str) -> object | None:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inflight",
        description=(
            "Autoscale and route vLLM on saturation: requests in flight (running + queued) "
            "divided by capacity (slots x replicas), measured directly instead of inferred "
            "from QPS."
        ),
    )
    parser.add_argument("--version", action="version", version=f"inflight {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module_name in SUBCOMMAND_MODULES:
        module = _load(module_name)
        if module is not None:
            module.register(sub)  # type: ignore[attr-defined]
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr if args.command is None else sys.stdout)
        return 2
    result = func(args)
    return int(result or 0)
