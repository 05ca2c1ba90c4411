"""Slots and the router's own FIFO: take a slot, wait for one, give it back exactly once.

L (``router_inflight_requests``) is counted here, by one owner: :meth:`Dispatcher.admit`,
an ``async with`` that a work request enters when it is accepted and leaves when it is done.
Entering counts it in L, takes a slot, opens the upstream request and, when that request
never reached the endpoint, gives the slot back and tries once more on another; leaving
(or failing to enter) gives back the slot it holds and takes it out of L, exactly once,
whatever happened: normal end, upstream error, timeout, client gone, cancellation. A
request is in L whether it is held in the router's queue, waiting in a replica's queue, or
running. ``queued`` is the part of L held here, not yet dispatched.

Without ``--hold-when-full`` a request goes to the least-loaded ready endpoint even when
every slot is busy (vLLM queues it), and with no ready endpoint it fails at once (503).
With it, a request waits here in FIFO order until a slot frees or an endpoint appears
(scale from zero), bounded by ``max_queue`` and ``queue_timeout_s``. A slot is assigned
to the head waiter *at the moment it frees* (in ``release``/``pump``), so no request can
overtake the queue.

``hold_deadline_s`` (``--hold-deadline-s``) changes the order under overload only: a
request held longer than that has already missed its time-to-first-token target, so the
held requests still within it are served first (oldest first: earliest deadline first),
then the late ones (oldest first). Without overload nobody waits that long and the order
is plain FIFO. This is the adaptive LIFO of Maurer, "Fail at Scale", ACM Queue 13(8),
2015 (serve the newest when a queue is congested, because the oldest are already lost)
with a bounded reordering: a late request is overtaken only by requests that can still
be on time, and is never dropped (``queue_timeout_s`` still bounds its wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Generic, Protocol, TypeVar

from router.errors import NoEndpoint, NotDelivered, QueueFull, QueueTimeout, UpstreamUnavailable
from router.pool import Endpoint, Pool

R = TypeVar("R")
# Sends the request to an endpoint; returns once its response has begun (the proxy's
# upstream call). NotDelivered from it means: never reached that endpoint, try another.
Opener = Callable[[Endpoint], Awaitable[R]]
# Told of each endpoint that did not take the request (the proxy counts it and marks the
# endpoint unhealthy, so the retry goes elsewhere).
OnNotDelivered = Callable[[Endpoint, NotDelivered], None]


class Waiter(Protocol):
    """A held request: an ``asyncio.Future[Endpoint]`` live, a plain object in ``inflight/sim/``."""

    def done(self) -> bool: ...

    def set_result(self, result: Endpoint, /) -> None: ...


class Dispatcher:
    """Owns the accounting around :class:`Pool`: L, the hold queue, acquire/release."""

    def __init__(
        self,
        pool: Pool,
        hold_when_full: bool = False,
        max_queue: int = 1024,
        queue_timeout_s: float = 60.0,
        hold_deadline_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_queue < 0:
            raise ValueError(f"--max-queue must be ≥ 0, got {max_queue}")
        if queue_timeout_s <= 0:
            raise ValueError(f"--queue-timeout-s must be > 0, got {queue_timeout_s}")
        if hold_deadline_s is not None and not hold_deadline_s > 0:
            raise ValueError(f"--hold-deadline-s must be > 0, got {hold_deadline_s}")
        self.pool = pool
        self.hold_when_full = hold_when_full
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        self.hold_deadline_s = hold_deadline_s
        self._clock = clock
        self.inflight = 0  # L: accepted and not finished, held ones included
        # Held requests, oldest first: those still within hold_deadline_s (with the time
        # each was held), and those past it (all of them when there is no deadline, so
        # the order is plain FIFO and no clock is read).
        self._fresh: deque[tuple[float, Waiter]] = deque()
        self._late: deque[Waiter] = deque()
        self.late_total = 0  # held requests that waited past hold_deadline_s

    @property
    def queued(self) -> int:
        return len(self._fresh) + len(self._late)

    @property
    def queued_late(self) -> int:
        """Held requests already past ``hold_deadline_s`` (as of the last pump)."""
        return len(self._late) if self.hold_deadline_s is not None else 0

    def admit(self, open: Opener[R], not_delivered: OnNotDelivered) -> Admission[R]:
        """``async with dispatcher.admit(open, not_delivered) as ticket:`` — see
        :class:`Admission`; ``ticket.ep`` and ``ticket.response`` inside."""
        return Admission(self, open, not_delivered)

    def try_acquire(self) -> Endpoint | None:
        """A slot at once if one can be had without overtaking a held request, else None.

        ``acquire``'s first step, callable without a coroutine (the admission's hot path).
        """
        if not self._fresh and not self._late:
            ep = self.pool.choose(below_slots=self.hold_when_full)
            if ep is not None:
                self.pool.acquire(ep)
                return ep
        return None

    async def acquire(self) -> Endpoint:
        """A slot on an endpoint; waits (FIFO) with ``hold_when_full``.

        Raises NoEndpoint (no ready endpoint, not holding), QueueFull, QueueTimeout.
        """
        ep = self.try_acquire()
        if ep is not None:
            return ep
        if not self.hold_when_full:
            raise NoEndpoint("no ready endpoint")
        fut: asyncio.Future[Endpoint] = asyncio.get_running_loop().create_future()
        self.hold(fut)
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
                self.unhold(fut)
            if isinstance(exc, TimeoutError):
                raise QueueTimeout(
                    f"no slot freed within --queue-timeout-s={self.queue_timeout_s:g} s"
                ) from None
            raise

    def hold(self, waiter: Waiter) -> None:
        """Queue ``waiter`` for the next free slot; QueueFull at ``max_queue``.

        ``acquire``'s holding step, apart so the simulator (``inflight/sim/``), whose waiters are
        not asyncio futures, holds requests by the same rule: :meth:`pump` hands the slot
        over with ``waiter.set_result(ep)``.
        """
        if self.queued >= self.max_queue:
            raise QueueFull(f"router queue is full ({self.max_queue} requests held)")
        if self.hold_deadline_s is None:
            self._late.append(waiter)
        else:
            self._fresh.append((self._clock(), waiter))

    def unhold(self, waiter: Waiter) -> None:
        """Take a waiter that gave up (timeout, client gone) out of the queue, if there."""
        for i, (_, held) in enumerate(self._fresh):
            if held is waiter:
                del self._fresh[i]
                return
        with contextlib.suppress(ValueError):
            self._late.remove(waiter)

    def _next_waiter(self) -> Waiter:
        """The held request a free slot goes to (the queue is not empty): the oldest one
        still within ``hold_deadline_s``, else the oldest late one."""
        fresh = self._fresh
        if fresh and self.hold_deadline_s is not None:
            cutoff = self._clock() - self.hold_deadline_s
            while fresh and fresh[0][0] <= cutoff:
                self._late.append(fresh.popleft()[1])
                self.late_total += 1
        if fresh:
            return fresh.popleft()[1]
        return self._late.popleft()

    def release(self, ep: Endpoint) -> None:
        """Give back a slot taken by ``acquire`` (call exactly once, in a ``finally``)."""
        self.pool.release(ep)
        if self._fresh or self._late:
            self.pump()

    def pump(self) -> None:
        """Hand free slots to held requests in :meth:`_next_waiter`'s order (call after
        any pool change)."""
        while self._fresh or self._late:
            ep = self.pool.choose(below_slots=True)
            if ep is None:
                return
            fut = self._next_waiter()
            if fut.done():  # cancelled while waiting
                continue
            self.pool.acquire(ep)
            fut.set_result(ep)


class Admission(Generic[R]):
    """One work request's stay in L, and the slot it holds: the single owner of both.

    ``__aenter__``: L += 1; take a slot (``acquire``: at once, or held in the FIFO with
    ``--hold-when-full``); ``response = await open(ep)``. If ``open`` raises NotDelivered,
    call ``not_delivered(ep, exc)``, give that slot back and do it once more (another
    endpoint, since the failed one is no longer ready); a second NotDelivered is
    UpstreamUnavailable (502). If entering fails (NoEndpoint, QueueFull, QueueTimeout, an
    upstream error or timeout from ``open``, cancellation), the slot held, if any, is given
    back and L -= 1 before the error propagates: ``async with`` does not call
    ``__aexit__`` then, so nothing else has to.

    ``__aexit__``: give the slot back and L -= 1, whatever ended the block.

    The same without ``async with``: ``await admission.enter()`` then, in a ``finally``,
    ``admission.leave()`` (what the proxy does: one coroutine a request instead of two, and
    ``leave`` is plain code, so nothing can suspend or be cancelled between the end of the
    request and the slot's return). ``leave`` is idempotent.

    ``ep`` stays set after the slot is given back (the endpoint the request went to, for the
    metrics' label); it is None when no endpoint took it. ``retried`` says whether the
    request was sent a second time.
    """

    __slots__ = ("_d", "_done", "_holding", "_not_delivered", "_open", "ep", "response", "retried")

    response: R

    def __init__(
        self, dispatcher: Dispatcher, open: Opener[R], not_delivered: OnNotDelivered
    ) -> None:
        self._d = dispatcher
        self._open = open
        self._not_delivered = not_delivered
        self.ep: Endpoint | None = None
        self.retried = False
        self._holding = False
        self._done = False

    async def enter(self) -> Admission[R]:
        """Count in L, take a slot, open the request (retried once): see the class doc."""
        d = self._d
        d.inflight += 1
        try:
            ep = d.try_acquire()
            if ep is None:
                ep = await d.acquire()
            self.ep = ep
            self._holding = True  # no await since the slot was taken: cannot be lost
            try:
                self.response = await self._open(ep)
            except NotDelivered as first:
                await self._retry(ep, first)
        except BaseException:
            self.leave()
            raise
        return self

    __aenter__ = enter

    async def _retry(self, ep: Endpoint, first: NotDelivered) -> None:
        self._not_delivered(ep, first)
        self._holding = False
        self.ep = None
        self._d.release(ep)
        self.retried = True
        ep = self.ep = await self._d.acquire()
        self._holding = True
        try:
            self.response = await self._open(ep)
        except NotDelivered as second:
            self._not_delivered(ep, second)
            raise UpstreamUnavailable(
                f"upstream {ep.label} {second.reason}; retried once"
            ) from None

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.leave()

    def leave(self) -> None:
        """Give back the slot held, if any, and leave L: once, however often called
        (``__aexit__`` without a coroutine)."""
        if self._done:
            return
        self._done = True
        if self._holding:
            self._holding = False
            assert self.ep is not None
            self._d.release(self.ep)
        self._d.inflight -= 1
