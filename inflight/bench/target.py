"""The router a ``bench run`` sends to: from ``--url`` or an ``inflight up`` state dir, and
its model; shared by the closed-loop and the open-loop run."""

from __future__ import annotations

import argparse
from pathlib import Path

import aiohttp

from inflight import statedir as state
from inflight.procs import pid_alive


class BenchError(RuntimeError):
    """A run cannot start: the message names the flag or file at fault."""


async def discover_model(session: aiohttp.ClientSession, router_url: str) -> str:
    url = router_url.rstrip("/") + "/v1/models"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            resp.raise_for_status()
            doc = await resp.json(content_type=None)
        return str(doc["data"][0]["id"])
    except (aiohttp.ClientError, TimeoutError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise BenchError(f"cannot read the model name from {url} ({exc}); pass --model") from exc


def stack_info(state_dir: Path) -> state.StackInfo:
    """The running stack's ``stack.json``; a file left by a killed run is refused."""
    path = state_dir / state.STACK
    try:
        info = state.read_stack(path)
    except (OSError, ValueError) as exc:
        raise BenchError(
            f"--state-dir: cannot read {path}: {exc} (is `inflight up` running?)"
        ) from exc
    if not pid_alive(info.pid):
        raise BenchError(
            f"--state-dir: {path} was left by an `inflight up` (pid {info.pid}) that is no "
            "longer running; start it again"
        )
    return info


def router_target(args: argparse.Namespace) -> tuple[str, float, state.StackInfo | None]:
    """The router's URL and the time-scale from ``--url``/``--time-scale`` or, for what they
    leave out, ``--state-dir``'s ``stack.json``; and that stack (None without it)."""
    stack = stack_info(args.state_dir) if args.state_dir else None
    url = args.url or (stack.router_url if stack else None)
    if not url:
        raise BenchError("give --url (the router) or --state-dir (an `inflight up` state dir)")
    time_scale = args.time_scale or (stack.time_scale if stack else 1.0)
    return url, time_scale, stack
