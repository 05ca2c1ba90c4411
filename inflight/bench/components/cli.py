"""The flags of ``inflight bench router|emulator|scaler|soak|upstream-client``.

``register(sub)`` is called by ``inflight.bench.cli`` with its subparsers. Values are checked here,
at the edge, so a bad one is refused by argparse with the flag's name before anything
starts; the benchmark modules (imported inside the commands: aiohttp, grpc) read ``args``.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from inflight.workload.flags import positive_float, positive_int_list

ROUTER_SCENARIOS = ("capacity", "latency", "streaming", "balance")


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer ≥ ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from exc
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {text!r}")
        return value

    parse.__name__ = f"integer >= {minimum}"  # what argparse names in its own errors
    return parse


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from exc
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def choice_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of ``choices``."""

    def parse(text: str) -> list[str]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        unknown = [v for v in values if v not in choices]
        if not values or unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(map(repr, unknown)) or 'empty list'}; "
                f"choose from {', '.join(choices)}"
            )
        return values

    return parse


def register(sub: Any) -> None:
    _router(sub)
    _soak(sub)
    _upstream_client(sub)
    _emulator(sub)
    _scaler(sub)


def _router(sub: Any) -> None:
    p = sub.add_parser(
        "router",
        help="the router beside nginx and vllm-router: capacity, latency, streaming, balance",
        description="The router against its peers, side by side, in one run (needs Debian's "
        "wrk and nginx; a missing peer is skipped and said so). Figures printed and written "
        "as JSON to --out.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--duration-s", type=positive_float, default=8.0, help="per target and "
                   "scenario, wall seconds")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="JSON results, never overwritten "
                   "(default results/local/bench_router-<UTC time>.json)")  # fmt: skip
    p.add_argument(
        "--vllm-router-bin",
        default=shutil.which("vllm-router") or "/tmp/vr-venv/bin/vllm-router",
        help="the vllm-router executable (PyPI vllm-router, in its own venv)",
    )
    p.add_argument(
        "--no-aiohttp-peer",
        action="store_true",
        help="leave out the 'inflight/aiohttp' row (the router with --upstream-client aiohttp)",
    )
    p.add_argument("--scenarios", type=choice_list(ROUTER_SCENARIOS),
                   default=list(ROUTER_SCENARIOS), help="comma-separated")  # fmt: skip
    p.add_argument("--emulator-time-scale", type=positive_float, default=0.02)
    p.add_argument("--balance-requests", type=at_least(1), default=480)
    ab = p.add_argument_group(
        "A/B (two commits' routers side by side, rounds interleaved; "
        "inflight/bench/components/ab.py)"
    )
    ab.add_argument(
        "--ab", nargs=2, metavar=("A", "B"), default=None,
        help="compare the routers of two commits (each a git worktree on PYTHONPATH, this "
        "venv; '.' = this checkout as it is) beside nginx and vllm-router: capacity, "
        "latency and streaming (--scenarios), medians and ratios B/A and x/vllm-router",
    )  # fmt: skip
    ab.add_argument("--rounds", type=at_least(1), default=3,
                    help="with --ab: each target once a round, the order rotating")  # fmt: skip
    ab.add_argument("--instructions", action="store_true",
                    help="with --ab: also count each commit's instructions a request under "
                    "callgrind (load-independent; needs valgrind; ~30 s a commit)")  # fmt: skip
    p.set_defaults(func=_bench_router)


def _soak(sub: Any) -> None:
    p = sub.add_parser(
        "soak",
        help="the router under clients that leave at random moments: nothing lost or leaked",
        description="64 clients, a third giving up mid-request, against the router and 2 "
        "emulators; then checks L, slots and file descriptors. Exit code 1 when a check fails.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--seconds", type=positive_float, default=45.0, help="wall seconds of load")
    p.add_argument("--seed", type=int, default=7)
    p.set_defaults(func=_bench_soak)


def _upstream_client(sub: Any) -> None:
    p = sub.add_parser(
        "upstream-client",
        help="the router's two upstream clients (httptools, aiohttp) side by side",
        description="Closed-loop POSTs from one process through router.upstream's two "
        "clients to an upstream that answers at once: requests/s and CPU µs a request.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--requests", type=at_least(1), default=40000, help="per measurement")
    p.add_argument("--concurrency", type=at_least(1), default=64)
    p.add_argument("--rounds", type=at_least(1), default=2)
    p.set_defaults(func=_bench_upstream_client)


def _emulator(sub: Any) -> None:
    p = sub.add_parser(
        "emulator",
        help="the emulator's measured throughput against its model, and its CPU",
        description="Closed-loop reference requests against --replicas emulators at each "
        "concurrency of --levels: measured vs predicted throughput, p50 latency, CPU.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--time-scale", type=positive_float, default=0.1)
    p.add_argument("--levels", type=positive_int_list, default=[4, 8, 16, 64],
                   help="comma-separated concurrencies")  # fmt: skip
    p.add_argument("--level-s", type=positive_float, default=20.0, help="wall seconds a level")
    p.add_argument("--warmup-s", type=non_negative_float, default=3.0,
                   help="wall seconds of a level excluded from throughput")  # fmt: skip
    p.add_argument("--stream", action="store_true", help="SSE streaming responses")
    p.add_argument("--replicas", type=at_least(1), default=1,
                   help="emulators, load spread evenly (CPU summed)")  # fmt: skip
    p.add_argument("--json", type=Path, default=None, help="also write results here")
    p.add_argument("--log-dir", type=Path, default=Path("/tmp/bench_emulator"))
    p.set_defaults(func=_bench_emulator)


def _scaler(sub: Any) -> None:
    p = sub.add_parser(
        "scaler",
        help="GetMetrics latency of `inflight scaler` against a real Prometheus",
        description="Sequential GetMetrics calls (KEDA's 3 s deadline) to two scalers, "
        "uncached and with the 1 s cache, over Debian's Prometheus on loopback.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--calls", type=at_least(100), default=1000,
                   help="measured calls per mode (>= 100, for a p99)")  # fmt: skip
    p.add_argument("--warmup", type=at_least(0), default=50, help="unmeasured calls first")
    p.add_argument("--history-s", type=at_least(0), default=1900,
                   help="seconds of one-second history of every series the default trigger "
                   "reads, backfilled into Prometheus before it starts (promtool), so the "
                   "range query answers a full window as in a deployment; 0: a fresh "
                   "Prometheus (seconds of data, the figures before 2026-12-03)")  # fmt: skip
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.set_defaults(func=_bench_scaler)


# The commands: each imports its module (aiohttp, grpc) only when run.
def _bench_router(args: argparse.Namespace) -> int:
    from inflight.bench.components.router import main

    return main(args)


def _bench_soak(args: argparse.Namespace) -> int:
    from inflight.bench.components.soak import main

    return main(args)


def _bench_upstream_client(args: argparse.Namespace) -> int:
    from inflight.bench.components.upstream_client import main

    return main(args)


def _bench_emulator(args: argparse.Namespace) -> int:
    from inflight.bench.components.emulator import main

    return main(args)


def _bench_scaler(args: argparse.Namespace) -> int:
    from inflight.bench.components.scaler import main

    return main(args)
