"""One pool, one model: what a single-pool router does when its endpoints serve different
models (issue 38, item 0).

A router with no model flags (no ``--model-endpoints-file``, no ``--discover-models``) has
one pool and sends every request to any of its endpoints: right when they all serve one
model, a 404 from vLLM for every request sent to an endpoint serving another. So it reads
each endpoint's ``GET /v1/models`` (every ``--discover-interval-s``, beside the health
checks; never through the dispatcher) and takes the pool's model to be the base model most
of them serve (a tie: the one served by the endpoint listed first). An endpoint serving
another is kept out of rotation (its state ``wrong_model``: no request is sent there; the
health checks leave it so) and the router logs an error that names the flag that serves
both: ``--discover-models`` (a pool a model) or ``--model-endpoints-file``. When its model
changes back, or the others change, it rejoins at the next round. An endpoint that has not
answered its ``/v1/models`` yet keeps its state: the check never holds up a fleet that
serves one model, and costs the request path nothing (a background job).

:func:`read_models` and :func:`base_model` are also the model pools' discovery's
(:mod:`router.model_pools`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from router.pool import DRAINING, Pool

log = logging.getLogger(__name__)

FLAG_HINT = (
    "give the router --discover-models (a pool a model, each request to its body's model) "
    "or --model-endpoints-file MODEL=PATH"
)


async def read_models(
    session: aiohttp.ClientSession, url: str, timeout_s: float
) -> list[dict[str, Any]] | None:
    """``url``'s ``GET /v1/models`` cards; None when it does not answer a list."""
    try:
        async with session.get(
            url + "/v1/models", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None
    cards = data.get("data") if isinstance(data, dict) else None
    if not isinstance(cards, list):
        return None
    return [c for c in cards if isinstance(c, dict) and isinstance(c.get("id"), str)]


def base_model(cards: Sequence[dict[str, Any]]) -> str | None:
    """The first base model a ``/v1/models`` lists (no ``parent``: not a LoRA adapter)."""
    for card in cards:
        if not card.get("parent"):
            return str(card["id"])
    return None


def pool_model(served: Sequence[tuple[str, str]]) -> str | None:
    """The model a single pool serves: the one most endpoints serve; a tie goes to the one
    the earliest listed endpoint serves. ``served``: (endpoint URL, its base model), in the
    pool's order.

    >>> pool_model([("a", "beta"), ("b", "alpha"), ("c", "alpha")])
    'alpha'
    >>> pool_model([("a", "beta"), ("b", "alpha")])
    'beta'
    """
    if not served:
        return None
    counts = Counter(model for _, model in served)
    most = max(counts.values())
    return next(model for _, model in served if counts[model] == most)


class ModelCheck:
    """The single pool's model, and which endpoints serve another."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.model: str | None = None
        self._served: dict[str, str] = {}  # endpoint URL -> the base model it last listed

    def to_read(self) -> list[str]:
        """Every endpoint whose ``/v1/models`` is read: all but the draining ones."""
        return [ep.url for ep in self.pool.endpoints() if ep.state != DRAINING]

    def learn(self, answers: dict[str, str | None]) -> None:
        """One round's answers (URL -> base model; None: no answer, its last one stands):
        the pool's model, then each endpoint in or out of rotation."""
        for url, model in answers.items():
            if model is not None:
                self._served[url] = model
        order = [ep.url for ep in self.pool.endpoints()]
        for url in [u for u in self._served if u not in order]:
            del self._served[url]  # gone from the pool
        served = [(u, self._served[u]) for u in order if u in self._served]
        model = pool_model(served)
        if model != self.model and model is not None:
            log.info("the pool serves model %r (%d of %d endpoints read)",
                     model, sum(m == model for _, m in served), len(served))  # fmt: skip
        self.model = model
        for url, served_model in served:
            ok = served_model == model
            if self.pool.set_model_match(url, ok) and not ok:
                log.error(
                    "endpoint %s serves model %r, not the pool's %r: kept out of rotation "
                    "(a request sent there would get 404); %s",
                    url, served_model, model, FLAG_HINT,
                )  # fmt: skip


async def check_once(check: ModelCheck, session: aiohttp.ClientSession, timeout_s: float) -> None:
    """Read every endpoint's ``/v1/models`` concurrently, then :meth:`ModelCheck.learn`."""
    urls = check.to_read()
    if not urls:
        return
    results = await asyncio.gather(*(read_models(session, u, timeout_s) for u in urls))
    check.learn(
        {
            url: base_model(cards) if cards is not None else None
            for url, cards in zip(urls, results, strict=True)
        }
    )


async def run_model_check(
    check: ModelCheck,
    session_getter: Callable[[], aiohttp.ClientSession],
    interval_s: float,
    timeout_s: float,
) -> None:
    """Loop forever (cancel to stop): a round every ``interval_s`` seconds."""
    while True:
        try:
            await check_once(check, session_getter(), timeout_s)
        except Exception:  # a bug here must not stop the check
            log.exception("model check round failed")
        await asyncio.sleep(interval_s)
