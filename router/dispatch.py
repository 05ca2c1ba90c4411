"""Slots and the router's own FIFO: take a slot, wait for one, give it back exactly once.

L (``router_inflight_requests``) is counted here: a request is in L from the moment it is
accepted until its ``finally`` runs, whether it is held in the router's queue, waiting in a
replica's queue, or running. ``queued`` is the part of L held here, not yet dispatched.

Without ``--hold-when-full`` a request goes to the least-loaded ready endpoint even when
every slot is busy (vLLM queues it), and with no ready endpoint it fails at once (503).
With it, a request waits here in FIFO order until a slot frees or an endpoint appears
(scale from zero), bounded by ``max_queue`` and ``queue_timeout_s``. A slot is assigned
to the head waiter *at the moment it frees* (in ``release``/``pump``), so no request can
overtake the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque

from router.errors import NoEndpoint, QueueFull, QueueTimeout
from router.pool import Endpoint, Pool


class Dispatcher:
    """Owns the accounting around :class:`Pool`: L, the hold queue, acquire/release."""

    def __init__(
        self,
        pool: Pool,
        hold_when_full: bool = False,
        max_queue: int = 1024,
        queue_timeout_s: float = 60.0,
    ) -> None:
        if max_queue < 0:
            raise ValueError(f"--max-queue must be ≥ 0, got {max_queue}")
        if queue_timeout_s <= 0:
            raise ValueError(f"--queue-timeout-s must be > 0, got {queue_timeout_s}")
        self.pool = pool
        self.hold_when_full = hold_when_full
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.inflight = 0  # L: accepted and not finished, held ones included
        self._waiters: deque[asyncio.Future[Endpoint]] = deque()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> Endpoint:
        """A slot on an endpoint; waits (FIFO) with ``hold_when_full``.

        Raises NoEndpoint (no ready endpoint, not holding), QueueFull, QueueTimeout.
        """
        if not self._waiters:
            ep = self.pool.choose(below_slots=self.hold_when_full)
            if ep is not None:
                self.pool.acquire(ep)
                return ep
        if not self.hold_when_full:
            raise NoEndpoint("no ready endpoint")
        if len(self._waiters) >= self.max_queue:
            raise QueueFull(f"router queue is full ({self.max_queue} requests held)")
        fut: asyncio.Future[Endpoint] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                return await fut
        except BaseException as exc:
            if fut.done() and not fut.cancelled():
                # A slot was handed over at the instant we gave up (timeout or client
                # gone): pass it on so it is neither lost nor counted twice.
                self.release(fut.result())
            else:
                fut.cancel()
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            if isinstance(exc, TimeoutError):
                raise QueueTimeout(
                    f"no slot freed within --queue-timeout-s={self.queue_timeout_s:g} s"
                ) from None
            raise

    def release(self, ep: Endpoint) -> None:
        """Give back a slot taken by ``acquire`` (call exactly once, in a ``finally``)."""
        self.pool.release(ep)
        if self._waiters:
            self.pump()

    def pump(self) -> None:
        """Hand free slots to held requests, oldest first (call after any pool change)."""
        while self._waiters:
            ep = self.pool.choose(below_slots=True)
            if ep is None:
                return
            fut = self._waiters.popleft()
            if fut.done():  # cancelled while waiting
                continue
            self.pool.acquire(ep)
            fut.set_result(ep)
