"""The closed-loop load generator: N workers, each sends its next request when the last ends.

This is the seed's client model (docs/workload.md): with N workers the system holds N requests
at all times, so L is fixed by the client and λ = N / W follows from the service. A level
stops issuing when it has sent ``requests`` requests, or when ``stop_after_t`` has passed
(time-bounded phases of the slowing-model scenario); requests already sent always finish,
so every request of a level lies inside its window.

The aiohttp session is passed in (one per run, owned by the caller's wiring site).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from inflight.bench.sse import SseCounter
from inflight.measure.records import RequestRecord


@dataclass(frozen=True)
class LevelPlan:
    """One level: how many workers, how many requests (or until when), what to send."""

    concurrency: int
    requests: int | None  # None: time-bounded by stop_after_t
    body: dict[str, Any]
    timeout_s: float  # wall seconds per request, connect to last byte
    stop_after_t: float | None = None  # unix seconds: no request is sent after this
    # (unix seconds from which, body): a request sent at t uses the last body whose time
    # is <= t. The slowing-model scenario lengthens answers this way at constant concurrency.
    schedule: tuple[tuple[float, dict[str, Any]], ...] = ()

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"--concurrency values must be >= 1, got {self.concurrency}")
        if self.requests is None and self.stop_after_t is None:
            raise ValueError("a level needs a request count or a stop time")
        if self.requests is not None and self.requests < 1:
            raise ValueError(f"--requests must be >= 1, got {self.requests}")


# How much of a failed stream's last bytes its error keeps: the router's SSE error event
# names the endpoint at fault (the fault run attributes failures with it).
_TAIL_BYTES = 600


async def send_one(
    session: aiohttp.ClientSession, url: str, payload: bytes, timeout_s: float
) -> RequestRecord:
    """POST one streaming request; time the first data event and the last byte.

    A failure's ``error`` is the status and body, or the exception and the stream's last
    bytes, or "stream ended without [DONE]" and those bytes.
    """
    start = time.time()
    first: float | None = None
    counter = SseCounter()
    tail = b""
    try:
        async with session.post(
            url,
            data=payload,
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            if resp.status != 200:
                text = (await resp.read())[:300].decode(errors="replace")
                return RequestRecord(
                    start, time.time(), None, 0, False, f"HTTP {resp.status}: {text}"
                )
            async for chunk in resp.content.iter_any():
                if first is None and b"data:" in chunk:
                    first = time.time()
                counter.feed(chunk)
                tail = (tail + chunk)[-_TAIL_BYTES:]
        end = time.time()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        if tail:
            error += f" {tail.decode(errors='replace')}"
        return RequestRecord(start, time.time(), first, 0, False, error)
    if not counter.done:
        error = f"stream ended without [DONE]: {tail.decode(errors='replace')}"
        return RequestRecord(start, end, first, counter.output_tokens(), False, error)
    return RequestRecord(start, end, first, counter.output_tokens(), True)


async def closed_loop(
    session: aiohttp.ClientSession,
    url: str,
    plan: LevelPlan,
    on_done: Callable[[RequestRecord], None] | None = None,
) -> list[RequestRecord]:
    """Run one level; return its records in completion order."""
    payload = json.dumps(plan.body).encode()
    timed = [(t, json.dumps(b).encode()) for t, b in sorted(plan.schedule, key=lambda x: x[0])]

    def payload_now() -> bytes:
        now = time.time()
        chosen = payload
        for t, p in timed:
            if t <= now:
                chosen = p
        return chosen

    records: list[RequestRecord] = []
    issued = 0

    def may_send() -> bool:
        nonlocal issued
        if plan.requests is not None and issued >= plan.requests:
            return False
        if plan.stop_after_t is not None and time.time() >= plan.stop_after_t:
            return False
        issued += 1
        return True

    async def worker() -> None:
        while may_send():
            record = await send_one(session, url, payload_now(), plan.timeout_s)
            records.append(record)
            if on_done is not None:
                on_done(record)

    await asyncio.gather(*(worker() for _ in range(plan.concurrency)))
    return records
