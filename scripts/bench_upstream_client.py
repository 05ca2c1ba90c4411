#!/usr/bin/env python
"""The router's two upstream clients side by side, in one run (not a timed test).

64 concurrent POSTs from this one process, closed loop, to an upstream that answers at
once (Debian's nginx when installed, else ``bench_router.py``'s asyncio upstream), through
``router.upstream.HttpToolsUpstream`` and ``router.upstream.AiohttpUpstream`` — the real
classes the router uses, not prototypes. Prints requests/s and µs of this process per
request for each, alternating the two ``--rounds`` times.

Usage::

    .venv/bin/python scripts/bench_upstream_client.py [--requests 40000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_router  # noqa: E402

from router.upstream import build  # noqa: E402

BODY = bench_router.POST_BODY
HEADERS = [(b"content-type", b"application/json")]


async def _measure(kind: str, base: str, requests: int, concurrency: int) -> tuple[float, float]:
    """(requests/s, CPU µs of this process per request) for one client kind."""
    client = build(kind, 5.0, None, 30.0)
    left = 0

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            resp = await client.open(base, b"POST", b"/v1/completions", HEADERS, BODY)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=40000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.requests < 1 or args.concurrency < 1 or args.rounds < 1:
        parser.error("--requests, --concurrency and --rounds must be ≥ 1")
    try:
        import uvloop

        run = uvloop.run  # the router runs on uvloop (uvicorn[standard])
    except ImportError:
        run = asyncio.run
    with tempfile.TemporaryDirectory(prefix="bench-client-") as tmp:
        stack = bench_router.Stack(Path(tmp))
        try:
            if shutil.which("nginx") or Path("/usr/sbin/nginx").exists():
                base, upstream = bench_router.start_nginx_static(stack), "nginx"
            else:
                base, upstream = bench_router.start_upstream(stack, "instant"), "asyncio"
            print(f"upstream: {upstream} at {base}; {args.concurrency} concurrent, "
                  f"{args.requests} requests per measurement")  # fmt: skip
            for _ in range(args.rounds):
                for kind in ("httptools", "aiohttp"):
                    rps, cpu_us = run(_measure(kind, base, args.requests, args.concurrency))
                    print(f"  {kind:10s} {rps:9.0f} requests/s  {cpu_us:6.1f} µs CPU/request",
                          flush=True)  # fmt: skip
        finally:
            stack.stop_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
