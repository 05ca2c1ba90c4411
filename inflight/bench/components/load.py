"""The asyncio load generators of ``inflight bench router``: SSE streams (through the
router's own httptools client) and closed-loop completions (aiohttp)."""

from __future__ import annotations

import asyncio
import json
import re
import time
from typing import Any

_EVENT_STAMP = re.compile(rb'"t":(\d+)')


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile by rank (nan when empty): [1, 2, 3, 4], 0.5 → 3."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def streams(url: str, concurrency: int, duration_s: float) -> dict[str, float]:
    """Closed-loop SSE streams; per-event delivery delay (write at the upstream to arrival
    here), stream time and TTFB. The client is the router's own httptools client
    (``router.upstream``): the same, light load generator for every target, so on two
    cores the client is not what limits the figures (aiohttp's parsing of ~20,000
    events/s took most of a core).
    """
    from router.upstream import HttpToolsUpstream, UpstreamFailure

    base = url
    delays_ns: list[int] = []
    durations: list[float] = []
    ttfbs: list[float] = []
    events = 0
    failures = 0
    deadline = time.monotonic() + duration_s
    body = json.dumps({"model": "m", "prompt": "hi", "stream": True}).encode()
    headers = [(b"content-type", b"application/json")]
    client = HttpToolsUpstream(connect_timeout_s=5.0, keepalive_s=30.0)
    find = _EVENT_STAMP.findall
    now_ns = time.monotonic_ns

    async def worker() -> None:
        nonlocal events, failures
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            first = None
            try:
                resp = await client.open(base, b"POST", b"/v1/completions", headers, body)
                ok = resp.status == 200
                async for chunk in resp:
                    arrived = now_ns()
                    if first is None:
                        first = time.monotonic()
                    stamps = find(chunk)
                    events += len(stamps)
                    delays_ns.extend(arrived - int(t) for t in stamps)
                resp.release()
            except UpstreamFailure:
                ok = False
            if not ok:
                failures += 1
                continue
            end = time.monotonic()
            durations.append(end - t0)
            ttfbs.append((first or end) - t0)

    start = time.monotonic()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    elapsed = time.monotonic() - start
    delays_ms = [d / 1e6 for d in delays_ns]
    return {
        "events_per_s": events / elapsed,
        "streams": float(len(durations)),
        "failures": float(failures),
        "event_delay_p50_ms": percentile(delays_ms, 0.50),
        "event_delay_p99_ms": percentile(delays_ms, 0.99),
        "p50_ms": percentile(durations, 0.50) * 1e3,
        "p99_ms": percentile(durations, 0.99) * 1e3,
        "ttfb_p50_ms": percentile(ttfbs, 0.50) * 1e3,
        "ttfb_p99_ms": percentile(ttfbs, 0.99) * 1e3,
    }


async def closed_loop(
    url: str, concurrency: int, requests: int, body: dict[str, Any]
) -> dict[str, float]:
    """``requests`` completions from ``concurrency`` closed-loop clients; latency (ms)."""
    import aiohttp

    latencies: list[float] = []
    remaining = requests
    failures = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal remaining, failures
        while remaining > 0:
            remaining -= 1
            t0 = time.monotonic()
            async with session.post(url + "/v1/completions", json=body) as resp:
                await resp.read()
                if resp.status != 200:
                    failures += 1
                    continue
            latencies.append(time.monotonic() - t0)

    start = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    elapsed = time.monotonic() - start
    return {
        "requests": float(len(latencies)),
        "failures": float(failures),
        "rps": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1e3,
        "p95_ms": percentile(latencies, 0.95) * 1e3,
        "p99_ms": percentile(latencies, 0.99) * 1e3,
    }
