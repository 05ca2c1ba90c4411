"""``inflight sim run|compare --token-admission``: the router's token admission.

As ``inflight up --token-admission`` (``inflight router --hold-when-full
--discover-kv-tokens``, a name the simulator accepts too): the simulated router admits a
request to a replica only when a slot is free and the replica's tokens in flight plus the
request's demand fit its KV capacity; the excess waits at the router, in the hold order
(docs/capacity.md, "Token demand at the router"). The dispatcher is the live one
(``router/dispatch.py``), each replica's capacity is what its ``vllm:cache_config_info``
states (``--kv-blocks`` × ``--block-size``, read by the router's own parser) and each
request's demand is ``router/tokens.py``'s on the body the live bench sends (token ids:
exact). Wiring: :mod:`inflight.sim.router`.

Under inflight's own policies and ``fixed:N`` only, as ``--hold-deadline-s``: the peers'
runs keep their own systems' routing (slots only, or vLLM's queue).
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from inflight.sim.core import SimConfig

FLAG = "--token-admission"


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        FLAG,
        "--discover-kv-tokens",
        dest="token_admission",
        action="store_true",
        help="the router admits on KV tokens as well as slots (inflight up --token-admission, "
        "inflight router --discover-kv-tokens): each replica's capacity from its cache_config_info "
        "(--kv-blocks x --block-size), a request's demand its prompt + max_tokens "
        "(router/tokens.py); the excess is held at the router. inflight's policies and "
        "fixed:N only (inflight/sim/token_admission.py)",
    )


def on(a: argparse.Namespace) -> bool:
    return bool(getattr(a, "token_admission", False))


def apply(config: SimConfig, a: argparse.Namespace) -> SimConfig:
    """``config`` with the router's token admission when the flag asks for it."""
    return dataclasses.replace(config, token_admission=True) if on(a) else config


def meta(a: argparse.Namespace) -> dict[str, Any]:
    """For a comparison's ``scenario`` block (empty without the flag)."""
    return {"router_token_admission": True} if on(a) else {}
