"""``inflight sim run|compare``: the router's token admission, on by default
(``--no-token-admission``: slots only; ``--token-admission`` kept).

As ``inflight up``'s (``inflight router --hold-when-full --discover-kv-tokens``, a name the
simulator accepts too): the simulated router admits a
request to a replica only when a slot is free and the replica's tokens in flight plus the
request's demand fit its KV capacity; the excess waits at the router, in the hold order
(docs/capacity.md, "Token demand at the router"). The dispatcher is the live one
(``router/dispatch.py``), each replica's capacity is what its ``vllm:cache_config_info``
states (its usable blocks, ``--kv-blocks`` less vLLM's null block, × ``--block-size``,
read by the router's own parser) and each request's demand is ``router/tokens.py``'s on the
body the live bench sends (token ids: exact), charged in whole blocks. With a cache that
never binds (the default one) the runs are those without it, request by request. Wiring:
:mod:`inflight.sim.router`.

Under inflight's own policies and ``fixed:N`` only, as ``--hold-deadline-s``: the peers'
runs keep their own systems' routing (slots only, or vLLM's queue).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from inflight.sim.core import SimConfig

FLAG = "--token-admission"
NO_FLAG = "--no-token-admission"


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        FLAG,
        "--discover-kv-tokens",
        dest="token_admission",
        action="store_const",
        const=True,
        default=None,
        help="the router admits on KV tokens as well as slots (the default, as inflight up's; "
        "inflight router --discover-kv-tokens): each replica's capacity its cache_config_info's "
        "usable blocks (--kv-blocks - 1, vLLM's null block left out) x --block-size, a "
        "request's demand its prompt + max_tokens (router/tokens.py) in whole blocks; the "
        "excess is held at the router. inflight's policies and fixed:N only "
        "(inflight/sim/token_admission.py)",
    )
    p.add_argument(
        NO_FLAG,
        dest="token_admission",
        action="store_const",
        const=False,
        help="the router admits on slots only (as before token admission was the default)",
    )


def on(a: argparse.Namespace) -> bool:
    """Whether ``--token-admission`` was given (the closed-loop sweep refuses it by name)."""
    return getattr(a, "token_admission", None) is True


def enabled(a: argparse.Namespace) -> bool:
    """Whether the run's router admits on tokens: unless ``--no-token-admission``."""
    return getattr(a, "token_admission", None) is not False


def apply(config: SimConfig, a: argparse.Namespace) -> SimConfig:
    """``config`` with the router's token admission unless ``--no-token-admission``."""
    return dataclasses.replace(config, token_admission=True) if enabled(a) else config


def meta(a: argparse.Namespace) -> dict[str, Any]:
    """For a comparison's ``scenario`` block."""
    return {"router_token_admission": enabled(a)}
