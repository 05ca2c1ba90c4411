"""Each endpoint's KV capacity in tokens, read from the endpoint (``--discover-kv-tokens``).

Every ``--discover-interval-s`` the router reads each known endpoint's ``/metrics`` for
vLLM's ``vllm:cache_config_info`` (an info gauge whose labels describe the KV cache:
``num_gpu_blocks`` less vLLM's null block × ``block_size``, demands charged in whole
blocks; else ``kv_cache_size_tokens``: :func:`cache_from_metrics`) and its ``/v1/models``
for ``max_model_len`` (the output budget of a request without ``max_tokens``,
:mod:`router.tokens`). The capacity goes to the dispatcher (:meth:`Dispatcher.set_kv_capacity`,
which dispatches held requests that now fit); an endpoint that does not say keeps the
configured ``--kv-tokens`` (or is bounded by slots only). These calls go over the
background session, never through the dispatcher: they hold no slot.

**On add** (:class:`AddedReads`): an endpoint a source adds (a scale-up: the endpoints
file, Kubernetes, model-pool discovery, and the list at start-up) is read at once, not at
the next round, so a fresh vLLM whose cache fits two long requests is not sent four by
slots alone for up to ``--discover-interval-s``. Until the read ends the endpoint takes one
request at a time (:meth:`Dispatcher.mark_kv_unread`: the most any cache admits, since a
request larger than a whole cache is also sent alone to an empty endpoint) and
``router_endpoint_kv_tokens`` says 0 (unknown). Each GET is bounded by
``--health-timeout-s``. The read gives a capacity: it applies, as a round's would. It gives
none (``/metrics`` refused, reset, timed out, not 200, or without
``vllm:cache_config_info``): a warning names the endpoint and the reason,
``router_kv_capacity_read_failures_total`` counts it (every failed read counts, a round's
too), and the endpoint falls back to ``--kv-tokens``, else slots, until a round reads it.
An endpoint removed while it is read gets nothing applied (forgotten: its mark is dropped;
added again meanwhile: its own read decides); a read cut short when the router stops falls
back, uncounted. Held requests stay in the dispatcher's queue on every path and are pumped
when the capacity (or the fallback) applies; the read takes no slot, so none can leak.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import aiohttp

from inflight import names
from inflight.kv_blocks import usable_blocks
from router.dispatch import Dispatcher
from router.pool import DRAINING, Endpoint
from router.tokens import TokenDemand

log = logging.getLogger(__name__)

_INFO_PREFIX = names.VLLM_CACHE_CONFIG_INFO + "{"


def _labels(line: str) -> dict[str, str]:
    """The labels of one exposition line ``name{a="1",b="x"} value``."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(line + "\n"):
        for sample in family.samples:
            return dict(sample.labels)
    return {}


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


class KvCache(NamedTuple):
    """What an endpoint's cache admits: ``tokens`` (its usable capacity) and
    ``block_size`` (None: unknown, a demand is then counted in tokens as it is)."""

    tokens: int
    block_size: int | None


def cache_from_metrics(text: str) -> KvCache | None:
    """The KV cache a vLLM ``/metrics`` page states (``vllm:cache_config_info``), or None.

    With ``block_size`` and ``num_gpu_blocks`` (else ``kv_cache_size_tokens`` ÷
    ``block_size``): the usable blocks (all but vLLM's null block,
    :func:`inflight.kv_blocks.usable_blocks`, as the emulator's engine) × the block size,
    and demands are charged in whole blocks. With ``kv_cache_size_tokens`` alone: that
    many tokens, no rounding (the block is not known).

    >>> cache_from_metrics('vllm:cache_config_info{block_size="128",num_gpu_blocks="40"} 1.0')
    KvCache(tokens=4992, block_size=128)
    >>> cache_from_metrics('vllm:cache_config_info{kv_cache_size_tokens="4992"} 1.0')
    KvCache(tokens=4992, block_size=None)
    >>> cache_from_metrics("vllm:num_requests_running 0.0") is None
    True
    """
    for line in text.splitlines():
        if not line.startswith(_INFO_PREFIX):
            continue
        labels = _labels(line)
        stated = _int(labels.get("kv_cache_size_tokens"))
        blocks, size = _int(labels.get("num_gpu_blocks")), _int(labels.get("block_size"))
        if size is not None and size > 0:
            if blocks is None and stated is not None:
                blocks = stated // size
            if blocks is not None and usable_blocks(blocks) > 0:
                return KvCache(usable_blocks(blocks) * size, size)
        if stated is not None and stated > 0:
            return KvCache(stated, None)
    return None


def capacity_from_metrics(text: str) -> int | None:
    """The usable KV capacity in tokens a vLLM ``/metrics`` page states, or None
    (:func:`cache_from_metrics`).

    >>> capacity_from_metrics('vllm:cache_config_info{block_size="128",num_gpu_blocks="40"} 1.0')
    4992
    """
    cache = cache_from_metrics(text)
    return cache.tokens if cache is not None else None


def max_model_len_from_models(doc: Any) -> int | None:
    """The largest ``max_model_len`` of a ``/v1/models`` answer's cards, or None.

    >>> max_model_len_from_models({"data": [{"id": "m", "max_model_len": 2048}]})
    2048
    """
    lengths = [
        card["max_model_len"]
        for card in (doc.get("data") if isinstance(doc, dict) else None) or []
        if isinstance(card, dict) and isinstance(card.get("max_model_len"), int)
    ]
    return max(lengths) if lengths else None


class _Read(NamedTuple):
    """What one GET gave: the value (None: it did not say), why not (``problem``), and
    whether the endpoint answered at all."""

    value: Any
    problem: str | None
    answered: bool = True


async def _get(
    session: aiohttp.ClientSession,
    url: str,
    timeout_s: float,
    parse: Callable[[aiohttp.ClientResponse], Any],
) -> _Read:
    """GET ``url``, parsed by ``parse`` (a coroutine function) when it answers 200."""
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return _Read(None, f"HTTP {resp.status}")
            return _Read(await parse(resp), None)
    except TimeoutError:
        return _Read(None, f"no answer within {timeout_s:g} s (--health-timeout-s)", False)
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return _Read(None, f"{type(exc).__name__}: {exc}".rstrip(": "), False)


async def _cache_text(resp: aiohttp.ClientResponse) -> KvCache | None:
    return cache_from_metrics(await resp.text())


async def _models_len(resp: aiohttp.ClientResponse) -> int | None:
    return max_model_len_from_models(await resp.json(content_type=None))


async def read_cache(session: aiohttp.ClientSession, url: str, timeout_s: float) -> _Read:
    """An endpoint's KV cache from its ``/metrics``; ``problem`` says why when none."""
    got = await _get(session, url + "/metrics", timeout_s, _cache_text)
    if got.value is None and got.problem is None:
        return _Read(None, f"/metrics states no {names.VLLM_CACHE_CONFIG_INFO}")
    return got


async def _read(
    session: aiohttp.ClientSession, url: str, timeout_s: float
) -> tuple[KvCache | None, int | None]:
    """(cache, max_model_len) of one endpoint; None where it did not say."""
    capacity = await read_cache(session, url, timeout_s)
    if not capacity.answered:
        return None, None  # unreachable: do not wait on its /v1/models too
    length = await _get(session, url + "/v1/models", timeout_s, _models_len)
    return capacity.value, length.value


async def discover_once(
    dispatcher: Dispatcher, session: aiohttp.ClientSession, timeout_s: float, fixed_len: bool
) -> None:
    """Read every non-draining endpoint and apply what they say (``fixed_len``:
    ``--max-model-len`` was given, so the endpoints' is not used)."""
    urls = [ep.url for ep in dispatcher.pool.endpoints() if ep.state != DRAINING]
    if not urls:
        return
    found = await asyncio.gather(*(_read(session, u, timeout_s) for u in urls))
    lengths = []
    for url, (capacity, length) in zip(urls, found, strict=True):
        if capacity is None:
            dispatcher.kv_read_failures += 1
        elif capacity.tokens != dispatcher.kv_capacity(url):
            log.info("endpoint %s: KV capacity %d usable tokens", url, capacity.tokens)
        if capacity is not None:
            dispatcher.set_kv_capacity(url, *capacity)
        if length is not None:
            lengths.append(length)
    demand = dispatcher.demand
    if lengths and not fixed_len and isinstance(demand, TokenDemand):
        demand.max_model_len = max(lengths)


def _fallback(dispatcher: Dispatcher) -> str:
    """What an endpoint whose capacity is not known is admitted on (for the log)."""
    if dispatcher.kv_tokens is not None:
        return f"--kv-tokens={dispatcher.kv_tokens}"
    return f"request slots only ({dispatcher.pool.slots} a replica)"


async def read_added(
    dispatcher: Dispatcher,
    ep: Endpoint,
    session: aiohttp.ClientSession,
    timeout_s: float,
    fixed_len: bool,
) -> None:
    """The on-add read of ``ep`` (marked unread by :meth:`AddedReads.added`): its capacity
    or the fallback applies, unless it left the pool (or a round read it) meanwhile."""
    url = ep.url
    demand = dispatcher.demand
    # max_model_len is read with the capacity, not after it: an endpoint admitting on a
    # known capacity with max_model_len unknown would take any budget (issue 39).
    wants_len = not fixed_len and isinstance(demand, TokenDemand)
    try:
        if wants_len:
            got, models = await asyncio.gather(
                read_cache(session, url, timeout_s),
                _get(session, url + "/v1/models", timeout_s, _models_len),
            )
            length = models.value
        else:
            got, length = await read_cache(session, url, timeout_s), None
        if dispatcher.pool.get(url) is not ep or not dispatcher.kv_unread(url):
            return  # gone, added again (its own read decides), or a round read it first
        cache: KvCache | None = got.value
        if cache is None:
            dispatcher.kv_read_failures += 1
            log.warning(
                "endpoint %s: KV capacity not read on add (%s); admitting it on %s until a "
                "later read (--discover-interval-s)",
                url, got.problem, _fallback(dispatcher),
            )  # fmt: skip
            dispatcher.set_kv_capacity(url, None)
            return
        log.info("endpoint %s: KV capacity %d usable tokens (read on add)", url, cache.tokens)
        known = demand.max_model_len if isinstance(demand, TokenDemand) else None
        if isinstance(demand, TokenDemand) and length is not None and length > (known or 0):
            demand.max_model_len = length
        dispatcher.set_kv_capacity(url, *cache)
    finally:
        _fall_back(dispatcher, ep)


def _fall_back(dispatcher: Dispatcher, ep: Endpoint) -> None:
    """An on-add read of ``ep`` ended without a capacity (forgotten while read, cancelled or
    never begun as the router stops, a bug): the mark goes and the endpoint falls back; an
    endpoint added again under the same URL keeps its own mark (its own read decides)."""
    if dispatcher.kv_unread(ep.url) and dispatcher.pool.get(ep.url) in (ep, None):
        dispatcher.set_kv_capacity(ep.url, None)


class AddedReads:
    """The on-add reads (module doc): each endpoint a watched pool adds is marked unread
    in its dispatcher at once (before the pool's caller pumps held requests) and read by
    :meth:`run`, the reader task :func:`run_kv_discovery` keeps."""

    def __init__(self) -> None:
        self._queue: list[tuple[Dispatcher, Endpoint]] = []
        self._wake = asyncio.Event()  # bound to a loop only when first awaited

    def watch(self, dispatcher: Dispatcher) -> None:
        """Read every endpoint ``dispatcher``'s pool adds from now on (the wiring calls it
        for each pool's dispatcher as it is made, before any endpoint is added)."""
        dispatcher.pool.on_added = functools.partial(self.added, dispatcher)

    def added(self, dispatcher: Dispatcher, urls: Sequence[str]) -> None:
        """The pool added ``urls`` (its ``on_added``)."""
        for url in urls:
            ep = dispatcher.pool.get(url)
            if ep is not None:
                dispatcher.mark_kv_unread(url)
                self._queue.append((dispatcher, ep))
        self._wake.set()

    async def run(
        self,
        session_getter: Callable[[], aiohttp.ClientSession],
        timeout_s: float,
        fixed_len: bool,
    ) -> None:
        """Read each endpoint added, at once and side by side (cancel to stop: the reads
        under way and those not begun fall back, :func:`read_added`)."""
        reads: set[asyncio.Task[None]] = set()
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                batch, self._queue = self._queue, []
                for d, ep in batch:
                    task = asyncio.ensure_future(
                        read_added(d, ep, session_getter(), timeout_s, fixed_len)
                    )
                    reads.add(task)
                    task.add_done_callback(_done(reads))
        finally:
            for task in reads:
                task.cancel()
            for task in list(reads):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            batch, self._queue = self._queue, []
            for d, ep in batch:  # never begun
                _fall_back(d, ep)


def _done(reads: set[asyncio.Task[None]]) -> Callable[[asyncio.Task[None]], None]:
    """A read's end: out of ``reads``, and a bug in it logged (it must not go unseen)."""

    def done(task: asyncio.Task[None]) -> None:
        reads.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("KV capacity read on add failed", exc_info=task.exception())

    return done


async def run_kv_discovery(
    dispatcher: Dispatcher | Callable[[], Sequence[Dispatcher]],
    session_getter: Callable[[], aiohttp.ClientSession],
    interval_s: float,
    timeout_s: float,
    fixed_len: bool,
    added: AddedReads | None = None,
) -> None:
    """Loop forever (cancel to stop): a round at once, then one every ``interval_s``; with
    ``added``, its on-add reads beside the rounds.

    ``dispatcher``: the pool's, or a function giving every model pool's."""
    reader = None
    if added is not None:
        reader = asyncio.ensure_future(added.run(session_getter, timeout_s, fixed_len))
    try:
        while True:
            try:
                each = dispatcher() if callable(dispatcher) else (dispatcher,)
                await asyncio.gather(
                    *(discover_once(d, session_getter(), timeout_s, fixed_len) for d in each)
                )
            except Exception:  # a bug here must not stop discovery
                log.exception("KV capacity discovery round failed")
            await asyncio.sleep(interval_s)
    finally:
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
