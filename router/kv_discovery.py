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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import aiohttp

from inflight import names
from inflight.kv_blocks import usable_blocks
from router.dispatch import Dispatcher
from router.pool import DRAINING
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


async def _read(
    session: aiohttp.ClientSession, url: str, timeout_s: float
) -> tuple[KvCache | None, int | None]:
    """(cache, max_model_len) of one endpoint; None where it did not say."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    capacity = length = None
    try:
        async with session.get(url + "/metrics", timeout=timeout) as resp:
            if resp.status == 200:
                capacity = cache_from_metrics(await resp.text())
        async with session.get(url + "/v1/models", timeout=timeout) as resp:
            if resp.status == 200:
                length = max_model_len_from_models(await resp.json(content_type=None))
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        pass
    return capacity, length


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
        if capacity is not None and capacity.tokens != dispatcher.kv_capacity(url):
            log.info("endpoint %s: KV capacity %d usable tokens", url, capacity.tokens)
        if capacity is not None:
            dispatcher.set_kv_capacity(url, *capacity)
        if length is not None:
            lengths.append(length)
    demand = dispatcher.demand
    if lengths and not fixed_len and isinstance(demand, TokenDemand):
        demand.max_model_len = max(lengths)


async def run_kv_discovery(
    dispatcher: Dispatcher | Callable[[], Sequence[Dispatcher]],
    session_getter: Callable[[], aiohttp.ClientSession],
    interval_s: float,
    timeout_s: float,
    fixed_len: bool,
) -> None:
    """Loop forever (cancel to stop): a round at once, then one every ``interval_s``.

    ``dispatcher``: the pool's, or a function giving every model pool's."""
    while True:
        try:
            each = dispatcher() if callable(dispatcher) else (dispatcher,)
            await asyncio.gather(
                *(discover_once(d, session_getter(), timeout_s, fixed_len) for d in each)
            )
        except Exception:  # a bug here must not stop discovery
            log.exception("KV capacity discovery round failed")
        await asyncio.sleep(interval_s)
