"""``inflight sim run|compare``: the router's endpoint choice, as ``inflight router
--dispatch`` sets it: ``least-outstanding`` (the default) or ``prefix`` (the endpoint
holding the longest cached prefix of the prompt, within ``--prefix-balance`` requests of
the least loaded: router/prefix_index.py). The simulated router is the live dispatcher;
its index is keyed by the engine's own block hashes (the simulated client sends the prompt
as token ids, so the router's hashes are the engine's) and bounded by a replica's usable
KV blocks. Only a workload whose prompts carry block ids (Mooncake's ``hash_ids``, the
prefix scenarios) has anything to route on; under a peer's policy the peer's own routing
stands.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from inflight.sim.core import SimConfig

DEFAULT_PREFIX_BALANCE = 2  # router/config.py's --prefix-balance


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dispatch",
        choices=("least-outstanding", "prefix"),
        default="least-outstanding",
        help="the router's endpoint choice (inflight router --dispatch): least-outstanding, "
        "or prefix: where the prompt's prefix is cached, within --prefix-balance requests of "
        "the least loaded (inflight/sim/dispatch_flags.py)",
    )
    p.add_argument(
        "--prefix-balance",
        type=_balance,
        default=DEFAULT_PREFIX_BALANCE,
        help="with --dispatch prefix: requests in flight the cache's replica may have over the "
        f"least loaded one (default {DEFAULT_PREFIX_BALANCE})",
    )


def _balance(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number ≥ 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be ≥ 0, got {value}")
    return value


def apply(config: SimConfig, a: argparse.Namespace) -> SimConfig:
    """``config`` with the router's prefix-aware dispatch when ``--dispatch prefix``."""
    if getattr(a, "dispatch", "least-outstanding") != "prefix":
        return config
    return dataclasses.replace(config, prefix_balance=a.prefix_balance)


def meta(a: argparse.Namespace) -> dict[str, Any]:
    """For a comparison's ``scenario`` block."""
    prefix = getattr(a, "dispatch", "least-outstanding") == "prefix"
    return {
        "router_dispatch": "prefix" if prefix else "least-outstanding",
        **({"router_prefix_balance": a.prefix_balance} if prefix else {}),
    }
