"""Open-loop load for the fault run: Poisson arrivals at a fixed rate, streaming requests.

Until the open-loop generator of issue #13 lands, this is the fixed-rate loop the fault
run uses: arrivals do not wait for answers (a closed loop would slow down when the
system does, and hide the faults), inter-arrival gaps are exponential with a seeded RNG.
Requests go round-robin to the routers in ``routers`` (the second router's fault adds
one, then takes it away). Each request is recorded as a :class:`ChaosRequest`, with the
error text the router sent when it failed (the SSE error event or the error body), which
names the endpoint at fault.

The aiohttp session is passed in by the harness.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import aiohttp

from inflight.bench.chaos.model import ChaosRequest
from inflight.bench.loadgen import send_one

#: The error :func:`inflight.bench.loadgen.send_one` records for a refused connection.
REFUSED = "ClientConnectorError"
#: Wait between two attempts of a refused request (wall seconds).
RETRY_WAIT_S = 0.1


async def stream_one(
    session: aiohttp.ClientSession,
    url: str,
    payload: bytes,
    timeout_s: float,
    router: int,
    long: bool = False,
) -> ChaosRequest:
    """POST one streaming completion (:func:`inflight.bench.loadgen.send_one`, the benchmark's own
    sender); ok only with a 200 and a final ``[DONE]``.

    A connection refused (the router restarting on its port) sent nothing: the request is
    tried again every ``RETRY_WAIT_S`` until ``timeout_s`` from its start, as an SDK's
    client retries a connection error; the record keeps the first start and counts the
    refusals (``refused``). Any other failure is final."""
    start_t = time.time()
    refused = 0
    while True:
        record = await send_one(session, url, payload, timeout_s)
        left = start_t + timeout_s - time.time()
        if record.ok or not record.error.startswith(REFUSED) or left <= RETRY_WAIT_S:
            break
        refused += 1
        await asyncio.sleep(RETRY_WAIT_S)
    return ChaosRequest(start_t, record.end_t, record.ok, router, record.error, long, refused)


class OpenLoop:
    """Sends requests at ``rate_per_s`` (wall) until :meth:`stop`; records every one."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        router_urls: list[str],
        payload: bytes,
        rate_per_s: float,
        timeout_s: float,
        seed: int = 15,
    ) -> None:
        if rate_per_s <= 0:
            raise ValueError(f"--rate must be > 0, got {rate_per_s}")
        self.session = session
        self.router_urls = router_urls  # index = ChaosRequest.router
        self.routers: list[int] = [0]  # which of them get new requests
        self.payload = payload
        self.rate_per_s = rate_per_s
        self.timeout_s = timeout_s
        self.records: list[ChaosRequest] = []
        self.inflight = 0
        self.long_inflight = 0  # of which long streams (the scale-down fault's)
        self._rng = random.Random(seed)
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._next = 0

    def _url(self, router: int) -> str:
        return self.router_urls[router].rstrip("/") + "/v1/completions"

    def send(self, payload: bytes | None = None, long: bool = False) -> None:
        """Send one request now (the next router in turn), recorded when it ends. It counts
        in :attr:`inflight` (and :attr:`long_inflight`) from this call on, before its task
        first runs, so a caller topping up to a count sees it at once."""
        router = self.routers[self._next % len(self.routers)]
        self._next += 1
        self.inflight += 1
        self.long_inflight += long
        task = asyncio.create_task(self._one(router, payload or self.payload, long))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _one(self, router: int, payload: bytes, long: bool) -> None:
        try:
            record = await stream_one(
                self.session, self._url(router), payload, self.timeout_s, router, long
            )
        finally:
            self.inflight -= 1
            self.long_inflight -= long
        self.records.append(record)

    async def _arrivals(self) -> None:
        while True:
            self.send()
            await asyncio.sleep(self._rng.expovariate(self.rate_per_s))

    def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._arrivals())

    async def stop(self) -> None:
        """No new arrivals; those in flight go on (see :meth:`drain`)."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None

    async def drain(self, timeout_s: float) -> bool:
        """Wait until every request sent has ended; False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self._tasks and time.monotonic() < deadline:
            await asyncio.wait(set(self._tasks), timeout=max(0.01, deadline - time.monotonic()))
        return not self._tasks
