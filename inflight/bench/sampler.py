"""Samples L from the router while a level runs: ``GET /router/status`` every interval.

The status document is fixed in docs/ARCHITECTURE.md: ``inflight`` is L (held requests
included), ``queued`` the held ones, ``endpoints[].state`` tells how many replicas are
ready. The ready count is the replica timeline the bench checks for frozen runs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from inflight.measure.records import RouterSample

STATUS_PATH = "/router/status"


class StatusError(ValueError):
    """The router's status document is not what ARCHITECTURE.md says."""


def parse_status(doc: Any, t: float) -> RouterSample:
    """One sample from a ``/router/status`` JSON document (pure)."""
    if not isinstance(doc, dict):
        raise StatusError(f"{STATUS_PATH}: expected a JSON object, got {type(doc).__name__}")
    try:
        inflight = int(doc["inflight"])
        queued = int(doc.get("queued", 0))
        endpoints = doc.get("endpoints", [])
        ready = sum(1 for e in endpoints if isinstance(e, dict) and e.get("state") == "ready")
    except (KeyError, TypeError, ValueError) as exc:
        raise StatusError(f"{STATUS_PATH}: bad field in {doc!r}: {exc}") from exc
    return RouterSample(t=t, inflight=inflight, queued=queued, ready=ready)


async def fetch_status(session: aiohttp.ClientSession, router_url: str) -> RouterSample:
    """One poll, stamped halfway between sending it and reading the answer."""
    sent = time.time()
    async with session.get(
        router_url.rstrip("/") + STATUS_PATH, timeout=aiohttp.ClientTimeout(total=5.0)
    ) as resp:
        resp.raise_for_status()
        doc = await resp.json(content_type=None)
    return parse_status(doc, (sent + time.time()) / 2)


class RouterSampler:
    """Polls the router in the background; ``samples`` grows until ``stop()``.

    Failed polls are counted, not fatal: a missing sample only widens the step between
    neighbours in the time-weighted mean, and a level with no sample at all is invalid.
    """

    def __init__(self, session: aiohttp.ClientSession, router_url: str, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError(f"--sample-interval-s must be > 0, got {interval_s}")
        self.session = session
        self.router_url = router_url
        self.interval_s = interval_s
        self.samples: list[RouterSample] = []
        self.errors = 0
        self._task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            try:
                self.samples.append(await fetch_status(self.session, self.router_url))
            except (aiohttp.ClientError, TimeoutError, OSError, StatusError, ValueError):
                self.errors += 1
            await asyncio.sleep(self.interval_s)

    def start(self) -> RouterSampler:
        self._task = asyncio.create_task(self._loop())
        return self

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # Wait for it without raising its CancelledError: suppressing that one here would
            # also swallow a cancellation of the caller (asyncio.run's Ctrl-C) arriving now.
            await asyncio.wait([self._task])
            self._task = None

    def between(self, start_t: float, end_t: float) -> tuple[RouterSample, ...]:
        """Samples in the window, plus the last one before it (it holds at the window start)."""
        before = [s for s in self.samples if s.t <= start_t]
        inside = [s for s in self.samples if start_t < s.t <= end_t]
        return tuple(before[-1:] + inside)
