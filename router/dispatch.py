"""Slots and the router's own FIFO: take a slot, wait for one, give it back exactly once.

L (``router_inflight_requests``) is counted here and nowhere else: :meth:`Dispatcher.enter`
counts a work request in when it is accepted and :meth:`Dispatcher.leave` counts it out
(giving back the slot it holds, if any) when it is done. They are plain synchronous code,
and they are the only writers of the count: the live router's :class:`Admission` (an
``async with`` a request enters and leaves, the proxy's ASGI way and its fast path alike)
and the simulator's router (``inflight/sim/router.py``) both call them. Entering an
admission counts the request in L, takes a slot, opens the upstream request and, when
that request never reached the endpoint, gives the slot back and tries once more on
another; leaving (or failing to enter) gives back the slot it holds and takes it out of L,
exactly once, whatever happened: normal end, upstream error, timeout, client gone,
cancellation. A request is in L whether it is held in the router's queue, waiting in a
replica's queue, or running. ``queued`` is the part of L held here, not yet dispatched.

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
be on time. ``max_late_s`` (``--max-late-s``) bounds how long: a request overtaken after
its deadline plus that is refused (503 + Retry-After), so under sustained overload no
request waits without bound. Priority classes (``--priority-class``) add lanes: classes in
priority order, each with its own deadline. The order is one pure rule,
:func:`inflight.control.hold_order.next_step`; this module keeps the lanes and applies it.

**Token admission** (``kv_tokens``, ``discover_kv_tokens``: ``--kv-tokens``,
``--discover-kv-tokens``; needs holding). A request also carries its demand in KV tokens
(:mod:`router.tokens`: prompt plus output budget), and an endpoint is offered it only when
its tokens in flight plus that demand fit its capacity (configured for every endpoint, or
the endpoint's own as discovered from its ``vllm:cache_config_info``; an endpoint whose
capacity is not known is bounded by slots only). The excess waits here, in the same hold
order: the head of the order is served first or nobody is (a large request is never
overtaken by smaller ones, so it cannot starve; the price is head-of-line blocking while it
waits for room). A request larger than a whole endpoint's capacity is admitted by an
endpoint with nothing in flight (vLLM then runs it alone, or rejects it): it waits for an
empty endpoint, never forever. The tokens an endpoint has in flight are the demand its
admitted requests were charged, given back with their slot. Without token capacity none
of this runs: the demand is 0 and never computed, and no tokens are counted.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Generic, NamedTuple, Protocol, TypeVar

from inflight.control.hold_order import LATE, SERVE, HoldPlan, next_step, single_plan
from inflight.kv_blocks import blocks_for
from router.errors import (
    HeldTooLong,
    NoEndpoint,
    NotDelivered,
    QueueFull,
    QueueTimeout,
    Shed,
    UpstreamUnavailable,
)
from router.pool import READY, Endpoint, Pool
from router.prefix_index import PrefixIndex, PromptBlocks, SharedBlocks, prefer, uncached
from router.tokens import DEFAULT_CHARS_PER_TOKEN, DEFAULT_MAX_PROMPT_ITEMS

R = TypeVar("R")


class Charge(NamedTuple):
    """What a request holds on its endpoint under token admission (:meth:`Dispatcher.cached`):
    ``tokens``, and the prompt ``blocks`` it references there (counted once for all the
    requests in flight that share them); give both back at its end."""

    tokens: int
    blocks: Sequence[int] = ()


# The block size a prompt is hashed in until an endpoint says its own (vLLM's default on GPUs).
DEFAULT_PREFIX_BLOCK_SIZE = 16
# Sends the request to an endpoint; returns once its response has begun (the proxy's
# upstream call). NotDelivered from it means: never reached that endpoint, try another.
Opener = Callable[[Endpoint], Awaitable[R]]
# Told of each endpoint that did not take the request (the proxy counts it and marks the
# endpoint unhealthy, so the retry goes elsewhere).
OnNotDelivered = Callable[[Endpoint, NotDelivered], None]
# One lane of held requests, oldest first: (when held, the waiter, its demand in tokens).
Lane = deque[tuple[float, "Waiter", int]]


class Waiter(Protocol):
    """A held request: an ``asyncio.Future[Endpoint]`` live, a plain object in ``inflight/sim/``."""

    def done(self) -> bool: ...

    def set_result(self, result: Endpoint, /) -> None: ...

    def set_exception(self, exception: BaseException, /) -> None: ...


# Seconds: the buckets of a class's hold waits (from the deadlines' ~1 s to the queue
# timeout's minutes).
WAIT_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class ClassCounts:
    """One priority class's counters (exported per class, :mod:`router.metrics`)."""

    __slots__ = ("held", "late", "name", "received", "shed", "too_long", "wait_counts",
                 "wait_sum_s")  # fmt: skip

    def __init__(self, name: str) -> None:
        self.name = name
        self.received = 0  # work requests of the class (counted by the proxy with classes)
        self.held = 0  # requests held (no slot free at once)
        self.late = 0  # held past the class's deadline
        self.too_long = 0  # refused by the lateness bound (503)
        self.shed = 0  # refused as sheddable (429)
        # The waits of held requests that got a slot (timed orders only: FIFO reads no
        # clock): a count a WAIT_BUCKETS_S bucket (not cumulative; the last is +Inf's).
        self.wait_counts = [0] * (len(WAIT_BUCKETS_S) + 1)
        self.wait_sum_s = 0.0

    def waited(self, wait_s: float) -> None:
        self.wait_counts[bisect_left(WAIT_BUCKETS_S, wait_s)] += 1
        self.wait_sum_s += wait_s


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
        max_late_s: float | None = None,
        plan: HoldPlan | None = None,
        kv_tokens: int | None = None,
        discover_kv_tokens: bool = False,
        demand: Callable[[bytes, bytes], int] | None = None,
        prefix_balance: int | None = None,
        prefix_block_size: int = DEFAULT_PREFIX_BLOCK_SIZE,
        chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
        max_prompt_items: int = DEFAULT_MAX_PROMPT_ITEMS,
    ) -> None:
        if max_queue < 0:
            raise ValueError(f"--max-queue must be ≥ 0, got {max_queue}")
        if queue_timeout_s <= 0:
            raise ValueError(f"--queue-timeout-s must be > 0, got {queue_timeout_s}")
        if hold_deadline_s is not None and not hold_deadline_s > 0:
            raise ValueError(f"--hold-deadline-s must be > 0, got {hold_deadline_s}")
        if max_late_s is not None and not max_late_s > 0:
            raise ValueError(f"--max-late-s must be > 0, got {max_late_s}")
        if plan is not None and (hold_deadline_s is not None or max_late_s is not None):
            raise ValueError("give a plan or --hold-deadline-s/--max-late-s, not both")
        if kv_tokens is not None and kv_tokens < 1:
            raise ValueError(f"--kv-tokens must be ≥ 1, got {kv_tokens}")
        if prefix_balance is not None and prefix_balance < 0:
            raise ValueError(f"--prefix-balance must be ≥ 0, got {prefix_balance}")
        if prefix_block_size < 1:
            raise ValueError(f"--prefix-block-size must be ≥ 1, got {prefix_block_size}")
        token_aware = kv_tokens is not None or discover_kv_tokens
        if token_aware and not hold_when_full:
            raise ValueError(
                "token admission (--kv-tokens) holds the excess: it needs --hold-when-full"
            )
        self.pool = pool
        self.hold_when_full = hold_when_full
        self.max_queue = max_queue
        self.queue_timeout_s = queue_timeout_s
        if plan is None:
            plan = single_plan(hold_deadline_s, max_late_s if hold_deadline_s else None)
        self.plan = plan
        self.hold_deadline_s = plan.classes[0].deadline_s if len(plan.classes) == 1 else None
        # Whether the order reads the clock: a plain FIFO never does.
        self._timed = plan.timed
        self._clock = clock
        self._inflight = 0  # L: accepted and not finished, held ones included
        # The lanes (lane 2c: class c on time, 2c + 1: its late ones), oldest first.
        self._lanes: list[Lane] = [deque() for _ in range(plan.lanes)]
        self._held = 0  # requests in all lanes
        self.classes = [ClassCounts(c.name) for c in plan.classes]
        self.late_total = 0  # held requests that waited past their deadline
        # Since when the pool has had a ready endpoint (the lateness bound counts from it);
        # -inf: always, as far as the order knows.
        self._ready_since_s = float("-inf")
        self._no_ready = False
        # Token admission (see the module doc): on with a configured or discovered capacity.
        self.token_aware = token_aware
        # The proxy's demand of a request, ``demand(path, body)`` (router.tokens.TokenDemand);
        # None without token admission: no body is read for it.
        self.demand = demand if token_aware else None
        self.kv_tokens = kv_tokens  # every endpoint's capacity, unless discovered
        self._kv_found: dict[str, int] = {}  # discovered capacity, by endpoint URL
        self._kv_block: dict[str, int] = {}  # discovered block size, by endpoint URL
        self._tokens: dict[str, int] = {}  # tokens in flight, by endpoint URL
        # Endpoints added whose capacity is being read (router.kv_discovery's on-add read).
        self._kv_unread: set[str] = set()
        # Reads of an endpoint's capacity that gave none (router_kv_capacity_read_failures).
        self.kv_read_failures = 0
        self.queued_tokens = 0  # the demand of the requests held here
        # Bytes of request bodies being admitted (held for a slot, or opening upstream) and
        # their cap (--max-held-bytes; None: none): the proxy counts them around
        # ``Admission.enter`` (router_held_bytes), beside ``max_queue``'s count.
        self.held_bytes = 0
        self.max_held_bytes: int | None = None
        # Prefix-aware dispatch (--dispatch prefix, router/prefix_index.py): the index of
        # what each endpoint probably caches, None when off (nothing is hashed or looked
        # up); how far over the least loaded the cache's endpoint may be; the block size a
        # request's prompt is hashed in (an endpoint's discovered one, else the flag's).
        self.prefix = PrefixIndex() if prefix_balance is not None else None
        # The prompt blocks the requests in flight reference on each endpoint (with the
        # index and token admission: a block shared in flight is counted once).
        self.shared = SharedBlocks()
        # A raw request's prompt blocks (the proxy's, with the feature on; None when off).
        self.prompt_blocks = (
            PromptBlocks(chars_per_token, max_prompt_items) if self.prefix is not None else None
        )
        self.prefix_balance = prefix_balance if prefix_balance is not None else 0
        self.prefix_block_size = prefix_block_size
        self.prefix_hits = 0  # blocks found cached where a request was sent (estimated)
        self.prefix_queries = 0  # blocks of the requests sent with a prompt hashed

    @property
    def inflight(self) -> int:
        """L: work requests accepted and not finished, held ones included."""
        return self._inflight

    @property
    def queued(self) -> int:
        return self._held

    # --- L: its only writers ------------------------------------------------------------------
    def enter(self) -> None:
        """A work request was accepted: it is in L from now until :meth:`leave`."""
        self._inflight += 1

    def leave(
        self, ep: Endpoint | None = None, tokens: int = 0, blocks: Sequence[int] = ()
    ) -> None:
        """A work request is done (call once for each :meth:`enter`): the slot it holds on
        ``ep`` (None: it holds none: never dispatched, refused, or given back already), its
        ``tokens`` and the prompt ``blocks`` it references go back (:meth:`release`; both
        as :meth:`cached` returned them), and it leaves L."""
        if ep is not None:
            self.release(ep, tokens, blocks)
        self._inflight -= 1

    @property
    def queued_late(self) -> int:
        """Held requests already past their deadline (as of the last pump)."""
        return sum(len(lane) for lane in self._lanes[1::2])

    def queued_by_class(self) -> list[int]:
        """Held requests by class, in the plan's order."""
        lanes = self._lanes
        return [len(lanes[2 * c]) + len(lanes[2 * c + 1]) for c in range(len(self.classes))]

    def now(self) -> float:
        """The hold clock (a request's place in the order), for a caller that keeps it."""
        return self._clock() if self._timed else 0.0

    # --- token capacity --------------------------------------------------------------------
    def kv_capacity(self, url: str) -> int | None:
        """An endpoint's capacity in KV tokens: discovered, else configured; None: unknown
        (bounded by slots only)."""
        if url in self._kv_unread:
            return None
        return self._kv_found.get(url, self.kv_tokens)

    def mark_kv_unread(self, url: str) -> None:
        """``url`` was just added and its capacity is being read (router.kv_discovery): until
        :meth:`set_kv_capacity` it takes one request at a time (a capacity of one token, so
        only an empty endpoint fits a request, as one larger than any cache, see
        :meth:`fits`; requests of demand 0 are not bound) and states none
        (:meth:`kv_capacity` is None). Not on the per-request path: called on add."""
        self._kv_unread.add(url)
        self._kv_found[url] = 1
        self._kv_block.pop(url, None)

    def kv_unread(self, url: str) -> bool:
        """Whether ``url``'s capacity is still being read (:meth:`mark_kv_unread`)."""
        return url in self._kv_unread

    def set_kv_capacity(self, url: str, tokens: int | None, block_size: int | None = None) -> None:
        """Discovery read an endpoint's capacity (None: it no longer says) and, where it
        says, its block size (a request's demand there is then charged in whole blocks);
        held requests that now fit are dispatched. It ends an on-add read
        (:meth:`mark_kv_unread`): None then falls back to ``--kv-tokens``, else slots."""
        self._kv_unread.discard(url)
        if tokens is None:
            self._kv_found.pop(url, None)
            self._kv_block.pop(url, None)
        elif tokens >= 1:
            self._kv_found[url] = tokens
            if block_size is not None and block_size >= 1:
                self._kv_block[url] = block_size
            else:
                self._kv_block.pop(url, None)
        if self.prefix is not None:
            self._size_prefix(url, tokens, block_size)
        if self._held:
            self.pump()

    def _size_prefix(self, url: str, tokens: int | None, block_size: int | None) -> None:
        """The index holds at most ``url``'s KV blocks, and prompts are hashed in its
        block size (the engine's, read from its ``vllm:cache_config_info``)."""
        assert self.prefix is not None
        if block_size is not None and block_size >= 1:
            self.prefix_block_size = block_size
        size = self._kv_block.get(url)
        blocks = max(1, tokens // size) if tokens is not None and size else None
        self.prefix.set_capacity(url, blocks)

    def forget(self, urls: Sequence[str]) -> None:
        """Endpoints removed from the pool: what the prefix index had of them goes at once
        (a replica that comes back under the same address starts cold)."""
        if self.prefix is not None:
            for url in urls:
                self.prefix.forget(url)
                self.shared.forget(url)

    def cached(self, ep: Endpoint, blocks: Sequence[int], tokens: int = 0) -> Charge:
        """A request with the prompt ``blocks`` got a slot on ``ep`` (from any path: at
        once, held, retried): they are counted as found or not there, and as cached there
        from now on (its owner calls this: :class:`Admission`, the simulator's router).

        With token admission, what it holds on ``ep`` changes from its whole demand
        ``tokens`` (charged when the slot was taken) to its part outside its prompt's
        blocks, and each of its blocks that no other request in flight there references
        (:class:`router.prefix_index.SharedBlocks`): a prefix that requests in flight
        share is one prefix of KV cache, as vLLM holds it. So
        ``router_endpoint_inflight_tokens``, and the scaler's token dimension with it, count
        the cache in use, not each request's whole prompt. Returns the :class:`Charge` to
        give back at the request's end (:meth:`leave`)."""
        index = self.prefix
        if index is None or not blocks:
            return Charge(tokens)
        url = ep.url
        self.prefix_queries += len(blocks)
        self.prefix_hits += index.matched(url, blocks)
        index.record(url, blocks)
        if not tokens or not self.token_aware:
            return Charge(tokens)
        size = self.prefix_block_size
        rest = uncached(tokens, len(blocks), size)
        new = self.shared.hold(url, blocks)
        held = self._tokens.get(url, 0) - self.charge_of(url, tokens)
        self._tokens[url] = max(0, held + self.charge_of(url, rest) + new * size)
        return Charge(rest, blocks)

    def _choose_prefix(self, tokens: int, blocks: Sequence[int]) -> Endpoint | None:
        """The endpoint for a request with the prompt ``blocks``: the one holding its
        longest cached prefix while within ``prefix_balance`` requests of the least loaded
        candidate (:func:`router.prefix_index.prefer`), else the least loaded
        (:meth:`Pool.choose`). Candidates: ready, with a free slot (holding), and fitting
        ``tokens`` (token admission)."""
        index = self.prefix
        assert index is not None
        limit = self.pool.slots if self.hold_when_full else 1 << 62
        token_aware = self.token_aware
        size = self.prefix_block_size
        candidates: list[tuple[Endpoint, int, int]] = []
        for candidate in self.pool.endpoints():
            if candidate.state != READY or candidate.inflight >= limit:
                continue
            url = candidate.url
            # With token admission, what it would add there: its demand less the blocks
            # requests in flight there already reference.
            if token_aware and not self.fits(
                candidate, uncached(tokens, self.shared.held(url, blocks), size)
            ):
                continue
            candidates.append((candidate, candidate.inflight, index.matched(url, blocks)))
        ep, _ = prefer(candidates, self.prefix_balance)
        if ep is not None:
            return ep
        if token_aware:
            return self._choose(tokens)
        return self.pool.choose(below_slots=self.hold_when_full)

    def tokens_in_flight(self, url: str) -> int:
        """The demand of the requests dispatched to an endpoint and not finished."""
        return self._tokens.get(url, 0)

    def charge_of(self, url: str, tokens: int) -> int:
        """What a demand of ``tokens`` takes on an endpoint: whole blocks where its block
        size is known (vLLM allocates a block at a time), else the tokens as they are."""
        size = self._kv_block.get(url)
        return blocks_for(tokens, size) * size if size else tokens

    def fits(self, ep: Endpoint, tokens: int) -> bool:
        """Whether ``ep`` can admit ``tokens`` more: its tokens in flight plus them (in
        whole blocks, :meth:`charge_of`) within its capacity, or nothing in flight there (a
        request larger than a whole endpoint goes to an empty one), or no known capacity."""
        if ep.inflight == 0:
            return True
        cap = self._kv_found.get(ep.url, self.kv_tokens)
        return cap is None or self._tokens.get(ep.url, 0) + self.charge_of(ep.url, tokens) <= cap

    def _choose(self, tokens: int) -> Endpoint | None:
        """The least-loaded ready endpoint with a free slot that fits ``tokens``."""
        return self.pool.choose(below_slots=True, fits=lambda ep: self.fits(ep, tokens))

    def _charge(self, ep: Endpoint, tokens: int) -> None:
        if tokens:
            self._tokens[ep.url] = self._tokens.get(ep.url, 0) + self.charge_of(ep.url, tokens)

    # --- slots -------------------------------------------------------------------------------
    def try_acquire(self, tokens: int = 0, blocks: Sequence[int] = ()) -> Endpoint | None:
        """A slot at once if one can be had without overtaking a held request, else None.

        ``acquire``'s first step, callable without a coroutine (the admission's hot path).
        ``tokens``: the request's demand (0 without token capacity). ``blocks``: its
        prompt's block hashes with prefix-aware dispatch (empty without): the endpoint is
        then chosen for its cache within the load's bound (:meth:`_choose_prefix`); the
        caller records where it went (:meth:`cached`).
        """
        if not self._held:
            if blocks and self.prefix is not None:
                ep = self._choose_prefix(tokens, blocks)
                if ep is not None:
                    self.pool.acquire(ep)
                    self._charge(ep, tokens)
                return ep
            if self.token_aware:
                return self._try_tokens(tokens)
            ep = self.pool.choose(below_slots=self.hold_when_full)
            if ep is not None:
                self.pool.acquire(ep)
                return ep
        return None

    def _try_tokens(self, tokens: int) -> Endpoint | None:
        """:meth:`try_acquire` with token admission (nothing held)."""
        ep = self._choose(tokens)
        if ep is not None:
            self.pool.acquire(ep)
            self._charge(ep, tokens)
        return ep

    async def acquire(
        self, cls: int = 0, held_at: float | None = None, again: bool = False, tokens: int = 0
    ) -> Endpoint:
        """A slot on an endpoint; waits (in the hold order) with ``hold_when_full``.

        ``held_at``, ``again``: the request's place in the order (:meth:`hold`). Raises NoEndpoint
        (no ready endpoint, not holding), Shed (a sheddable class, no free slot), QueueFull,
        QueueTimeout, HeldTooLong.
        """
        ep = self.try_acquire(tokens)
        if ep is not None:
            return ep
        if not self.hold_when_full:
            raise NoEndpoint("no ready endpoint")
        fut: asyncio.Future[Endpoint] = asyncio.get_running_loop().create_future()
        self.hold(fut, cls, held_at, again, tokens)
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                return await fut
        except BaseException as exc:
            if fut.done() and not fut.cancelled():
                if fut.exception() is None:
                    # A slot was handed over at the instant we gave up (timeout or client
                    # gone): pass it on so it is neither lost nor counted twice.
                    self.release(fut.result(), tokens)
            else:
                fut.cancel()
                self.unhold(fut)
            if isinstance(exc, TimeoutError):
                raise QueueTimeout(
                    f"no slot freed within --queue-timeout-s={self.queue_timeout_s:g} s"
                ) from None
            raise

    def hold(
        self,
        waiter: Waiter,
        cls: int = 0,
        held_at: float | None = None,
        again: bool = False,
        tokens: int = 0,
    ) -> None:
        """Queue ``waiter`` (of class ``cls``) for a free slot; QueueFull at ``max_queue``,
        Shed for a sheddable class.

        ``held_at``: when it was held (the hold clock, :meth:`now`; None: now). ``again``:
        a request held again (a retry after its endpoint refused it) keeps its place: by
        ``held_at``, or ahead of its class if it never waited (``held_at`` None).
        ``acquire``'s holding step, apart so the simulator (``inflight/sim/``), whose
        waiters are not asyncio futures, holds requests by the same rule: :meth:`pump`
        hands the slot over with ``waiter.set_result(ep)``, or refuses it with
        ``waiter.set_exception(exc)``. ``tokens``: its demand (charged to the endpoint it
        gets; give the same to :meth:`release`).
        """
        counts = self.classes[cls]
        if self.plan.classes[cls].sheddable:
            counts.shed += 1
            raise Shed(f"no free slot for the sheddable class {counts.name!r}")
        if self._held >= self.max_queue:
            raise QueueFull(f"router queue is full ({self.max_queue} requests held)")
        counts.held += 1
        lane = self._lanes[2 * cls]
        if not again:
            lane.append((self.now() if held_at is None else held_at, waiter, tokens))
        elif held_at is None or not self._timed:
            # Ahead of its class (FIFO: a request held again was ahead of all held now),
            # its hold counted from now at most.
            now_s = self.now()
            lane.appendleft((min(now_s, lane[0][0]) if lane else now_s, waiter, tokens))
        else:
            _insert(lane, held_at, waiter, tokens)
        self._held += 1
        self.queued_tokens += tokens
        if self._timed and not self.pool.has_ready():
            self._no_ready = True

    def unhold(self, waiter: Waiter) -> None:
        """Take a waiter that gave up (timeout, client gone) out of the queue, if there."""
        for lane in self._lanes:
            for i, (_, held, tokens) in enumerate(lane):
                if held is waiter:
                    del lane[i]
                    self._held -= 1
                    self.queued_tokens -= tokens
                    return

    def _next_waiter(self) -> tuple[int, float, Waiter, int]:
        """The held request a free slot goes to (the queue is not empty), in
        :func:`inflight.control.hold_order.next_step`'s order, taken out of its lane: (its
        lane, when held, the waiter, its demand). The late are moved and the overtaken
        past their bound refused on the way."""
        lanes = self._lanes
        if not self._timed:
            for i, lane in enumerate(lanes):
                if lane:
                    self._held -= 1
                    held_at, waiter, tokens = lane.popleft()
                    self.queued_tokens -= tokens
                    return i, held_at, waiter, tokens
        now_s = self._clock()
        if self._no_ready:  # a ready endpoint after none: the bound counts from now
            self._no_ready = False
            self._ready_since_s = now_s
        while True:
            step = next_step(
                self.plan, [lane[0][0] if lane else None for lane in lanes], now_s,
                self._ready_since_s,
            )  # fmt: skip
            lane = lanes[step.lane]
            held_at, waiter, tokens = lane.popleft()
            if step.action == SERVE:
                self._held -= 1
                self.queued_tokens -= tokens
                return step.lane, held_at, waiter, tokens
            counts = self.classes[step.lane // 2]
            if step.action == LATE:
                if not waiter.done():
                    counts.late += 1
                    self.late_total += 1
                _insert(lanes[step.lane + 1], held_at, waiter, tokens)
                continue
            self._held -= 1  # SHED
            self.queued_tokens -= tokens
            if not waiter.done():
                counts.too_long += 1
                waiter.set_exception(
                    HeldTooLong(
                        f"held {now_s - held_at:.1f} s, past the {counts.name!r} class's "
                        "deadline plus --max-late-s while others were served"
                    )
                )

    def release(self, ep: Endpoint, tokens: int = 0, blocks: Sequence[int] = ()) -> None:
        """Give back a slot taken by ``acquire`` (call exactly once, in a ``finally``), and
        the ``tokens`` it holds (and the prompt ``blocks`` it references: :meth:`cached`)."""
        self.pool.release(ep)
        if tokens and self.token_aware:
            # An endpoint with nothing in flight holds no tokens (a block size discovered
            # anew under requests in flight cannot leave a remainder behind).
            left = 0
            url = ep.url
            if ep.inflight:
                freed = self.charge_of(url, tokens)
                if blocks:
                    freed += self.shared.drop(url, blocks) * self.prefix_block_size
                left = max(0, self._tokens[url] - freed)
            else:
                self.shared.forget(url)
            if left or not ep.removed:
                self._tokens[url] = left
            else:  # drained and forgotten: no series left behind
                del self._tokens[url]
        if self._held:
            self.pump()

    def pump(self) -> None:
        """Hand free slots to held requests in :meth:`_next_waiter`'s order (call after
        any pool change)."""
        if self.token_aware:
            self._pump_tokens()
            return
        while self._held:
            ep = self.pool.choose(below_slots=True)
            if ep is None:
                if self._timed and not self.pool.has_ready():
                    self._no_ready = True
                return
            lane, held_at, fut, _ = self._next_waiter()
            if fut.done():  # cancelled while waiting
                continue
            self._served(lane, held_at)
            self.pool.acquire(ep)
            fut.set_result(ep)

    def _pump_tokens(self) -> None:
        """:meth:`pump` with token admission: the next request in the order gets the
        least-loaded endpoint with a free slot that fits its demand, or, when none does,
        stays at the head of the order and nobody is served."""
        while self._held:
            if not self.pool.has_free_slot():  # no free slot at all (and no RNG draw)
                if self._timed and not self.pool.has_ready():
                    self._no_ready = True
                return
            lane, held_at, fut, tokens = self._next_waiter()
            if fut.done():  # cancelled while waiting
                continue
            ep = self._choose(tokens)
            if ep is None:  # no room in tokens: it stays first in the order
                self._lanes[lane].appendleft((held_at, fut, tokens))
                self._held += 1
                self.queued_tokens += tokens
                return
            self._served(lane, held_at)
            self.pool.acquire(ep)
            self._charge(ep, tokens)
            fut.set_result(ep)

    def _served(self, lane: int, held_at: float) -> None:
        """A held request of ``lane`` got its slot: its class's wait (timed orders only)."""
        if self._timed:
            self.classes[lane // 2].waited(self._clock() - held_at)


def _insert(lane: Lane, held_at: float, waiter: Waiter, tokens: int = 0) -> None:
    """Put ``waiter`` in ``lane`` by ``held_at`` (oldest first; at the end usually)."""
    i = len(lane)
    while i and lane[i - 1][0] > held_at:
        i -= 1
    lane.insert(i, (held_at, waiter, tokens))


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
    request was sent a second time. ``cls``: its priority class (the plan's index).
    ``tokens``: its demand in KV tokens (token admission; 0 without), charged to the
    endpoint with the slot and given back with it.

    A retried request keeps its place in the hold order: it is held again, if it must
    wait, at the hold time it had (or, if it never waited, ahead of every request of its
    class held since), not as a newcomer.
    """

    __slots__ = ("_d", "_done", "_held_at", "_holding", "_not_delivered", "_open", "_refs",
                 "blocks", "cls", "demand", "ep", "response", "retried", "tokens")  # fmt: skip

    response: R

    def __init__(
        self,
        dispatcher: Dispatcher,
        open: Opener[R],
        not_delivered: OnNotDelivered,
        cls: int = 0,
        tokens: int = 0,
        blocks: Sequence[int] = (),
    ) -> None:
        self._d = dispatcher
        self._open = open
        self._not_delivered = not_delivered
        self.cls = cls
        # Its demand in tokens (0 without token admission), and what it holds where it has
        # a slot: with prefix dispatch, its part outside its prompt's blocks, the blocks
        # counted once for all that share them (Dispatcher.cached).
        self.demand = tokens
        self.tokens = tokens
        self._refs: Sequence[int] = ()  # the prompt blocks it references (Dispatcher.cached)
        self.blocks = blocks
        self.ep: Endpoint | None = None
        self.retried = False
        self._holding = False
        self._done = False
        self._held_at: float | None = None  # its place in the hold order, once held

    async def enter(self) -> Admission[R]:
        """Count in L, take a slot, open the request (retried once): see the class doc."""
        d = self._d
        d.enter()
        try:
            ep = d.try_acquire(self.tokens, self.blocks)
            if ep is None:
                self._held_at = d.now()
                ep = await d.acquire(self.cls, self._held_at, tokens=self.tokens)
            self.ep = ep
            self._holding = True  # no await since the slot was taken: cannot be lost
            if self.blocks:
                self.tokens, self._refs = d.cached(ep, self.blocks, self.tokens)
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
        self._d.release(ep, self.tokens, self._refs)
        self.retried = True
        self.tokens, self._refs = self.demand, ()
        # Its place: the hold time it had, or ahead of all held since it took its slot.
        ep = self.ep = await self._d.acquire(self.cls, self._held_at, True, self.tokens)
        self._holding = True
        if self.blocks:
            self.tokens, self._refs = self._d.cached(ep, self.blocks, self.tokens)
        try:
            self.response = await self._open(ep)
        except NotDelivered as second:
            self._not_delivered(ep, second)
            raise UpstreamUnavailable(
                f"upstream {ep.label} {second.reason}; retried once"
            ) from None

    def enter_now(self) -> Endpoint | None:
        """:meth:`enter`'s steps up to the opener when they need no wait (the proxy's fast
        path, without a coroutine): count in L and take a slot at once, returning the
        endpoint; else None, having changed nothing (then :meth:`enter` as usual). The
        caller records the prompt's blocks once the request is sent there
        (:meth:`Dispatcher.cached`): it may still give the slot back and go the way of
        :meth:`enter`, which records them itself."""
        d = self._d
        ep = d.try_acquire(self.tokens, self.blocks)
        if ep is None:
            return None
        d.enter()
        self.ep = ep
        self._holding = True
        return ep

    def hold(self, charge: Charge) -> None:
        """What it holds where it was sent (:meth:`Dispatcher.cached`; the fast path's call,
        made once the request is sent)."""
        self.tokens, self._refs = charge

    async def retry(self, first: NotDelivered) -> None:
        """What :meth:`enter` does when its opener raised ``first`` for the endpoint it
        holds (the fast path's failed send): once more elsewhere."""
        assert self.ep is not None
        await self._retry(self.ep, first)

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
            self._d.leave(self.ep, self.tokens, self._refs)
        else:
            self._d.leave()
