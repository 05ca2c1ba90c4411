"""``inflight bench upstream-client``: the router's two upstream clients side by side.

``--concurrency`` concurrent POSTs from this one process, closed loop, to an upstream that
answers at once (Debian's nginx when installed, else the synthetic asyncio upstream of
``inflight.bench.components.upstream``), through ``router.upstream.HttpToolsUpstream`` and
``router.upstream.AiohttpUpstream`` — the real classes the router uses, not prototypes.
Prints requests/s and µs of this process per request for each, alternating the two
``--rounds`` times. (Until 2026-12-01 this was ``scripts/bench_upstream_client.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from inflight.bench.components.nginx import nginx_binary, start_nginx_static
from inflight.bench.components.procs import Stack
from inflight.bench.components.upstream import start_upstream
from inflight.bench.components.wrk import POST_BODY

HEADERS = [(b"content-type", b"application/json")]
KINDS = ("httptools", "aiohttp")


async def measure(kind: str, base: str, requests: int, concurrency: int) -> tuple[float, float]:
    """(requests/s, CPU µs of this process per request) for one client kind."""
    from router.upstream import build

    client = build(kind, 5.0, None, 30.0)
    left = 0

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            resp = await client.open(base, b"POST", b"/v1/completions", HEADERS, POST_BODY)
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{kind}: upstream answered {resp.status}")
            resp.release()

    try:
        left = concurrency * 20  # warm-up: connections open, code paths warm
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        left = requests
        wall0, cpu0 = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        await client.close()
    return requests / wall, cpu / requests * 1e6


def _runner() -> Callable[[Coroutine[Any, Any, tuple[float, float]]], tuple[float, float]]:
    """Run a coroutine on the event loop the router runs on: uvicorn's "auto" choice
    (uvloop with uvicorn[standard], else asyncio)."""
    from uvicorn.loops.auto import auto_loop_factory

    factory = auto_loop_factory()

    def run(coro: Coroutine[Any, Any, tuple[float, float]]) -> tuple[float, float]:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)

    return run


def main(args: argparse.Namespace) -> int:
    run = _runner()
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        stack = Stack(Path(tmp))
        try:
            if nginx_binary() is not None:
                base, upstream = start_nginx_static(stack), "nginx"
            else:
                base, upstream = start_upstream(stack, "instant"), "asyncio"
            print(f"upstream: {upstream} at {base}; {args.concurrency} concurrent, "
                  f"{args.requests} requests per measurement")  # fmt: skip
            for _ in range(args.rounds):
                for kind in KINDS:
                    rps, cpu_us = run(measure(kind, base, args.requests, args.concurrency))
                    print(f"  {kind:10s} {rps:9.0f} requests/s  {cpu_us:6.1f} µs CPU/request",
                          flush=True)  # fmt: skip
        finally:
            stack.stop_all()
    return 0
