"""Model pools: one router in front of several models, a pool each, keyed by ``model``.

A pool is what a single-model router is: endpoints with their in-flight counts
(:class:`router.pool.Pool`), L and the held requests (:class:`router.dispatch.Dispatcher`),
the metrics (:class:`router.metrics.RouterMetrics`, on the pool's own registry) and the
proxy (:class:`router.proxy.Proxy`). :class:`ModelFront` sits before the pools' proxies: it
reads the request's ``model`` from the JSON body and hands the request to that pool's proxy,
body put back, so the proxy runs as it would alone. A model no pool serves gets vLLM's 404
(``NotFoundError``, the body vLLM's serving layer writes for an unknown model), and
``GET /v1/models`` is answered here with the models of every pool.

Why one pool a model, and not one pool of endpoints: a replica serves one base model, its
slots are that model's, and the scaler scales each model's Deployment on that model's L
(``router_inflight_requests{model="…"}``): each pool's gauges carry a ``model`` label. A
single-pool router (no ``--model-endpoints-file``, no ``--discover-models``) never builds
any of this: its ``/v1/*`` path reads no body and its metrics have no ``model`` label.

Which endpoint is in which pool: configured (``--model-endpoints-file NAME=PATH``, a
file per model) or discovered (``--discover-models``: each endpoint's ``GET /v1/models``;
the first base model it lists names its pool). Either way the router reads each endpoint's
``/v1/models`` every ``--discover-interval-s``: every model id an endpoint lists (other
served names, LoRA adapters, whose ``parent`` is the base model) routes to that endpoint's
pool, and is listed by the router's ``/v1/models``. An adapter is assumed loaded on every
replica of its base model (vLLM's ``--lora-modules`` at start-up); a request for an adapter
only some replicas have loaded may reach one without it (vLLM's 404).

A request without ``model`` (optional in vLLM, which then uses its first served name), or
whose body is not a JSON object (a multipart audio upload), goes to the first pool:
configured order, else the first discovered. Other metadata calls (``GET``, ``HEAD``,
``OPTIONS`` but ``GET /v1/models``: ``GET /v1/responses/{id}``, a CORS preflight) go to
the first pool with a ready endpoint; a path or method the router does not forward is
answered by the first pool's proxy (400, 404, 405), before the body is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from inflight import names
from router.dispatch import Dispatcher
from router.errors import RequestRefused, error_body
from router.metrics import RouterMetrics
from router.model_check import base_model, read_models
from router.pool import DRAINING, normalize_url
from router.proxy import Message, Proxy, Receive, Scope, Send
from router.uvicorn_protocol import CYCLE, Cycle

log = logging.getLogger(__name__)

#: The label every pool's series carries in a multi-pool router.
MODEL_LABEL = names.ROUTER_MODEL_LABEL
_MODELS_PATH = b"/v1/models"
_JSON = [(b"content-type", b"application/json")]

# Builds a pool's proxy from its dispatcher and metrics (the app's upstream client, limits).
ProxyFactory = Callable[[Dispatcher, RouterMetrics], Proxy]


def model_not_found(model: str) -> bytes:
    """vLLM's body for a model it does not serve (its serving layer's ``NotFoundError``).

    >>> json.loads(model_not_found("x"))["error"]["message"]
    'The model `x` does not exist.'
    """
    error = {
        "message": f"The model `{model}` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    return json.dumps({"error": error}).encode()


def model_of(body: bytes) -> str | None:
    """The ``model`` of a JSON request body; None when absent or not a JSON object.

    A full JSON parse, not a search for ``"model"``: a nested object (a JSON schema in
    ``response_format``) may have a ``model`` key of its own.

    >>> model_of(b'{"messages": [], "model": "a"}'), model_of(b"--x"), model_of(b"{}")
    ('a', None, None)
    """
    if body.lstrip()[:1] != b"{":
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested too deeply: no model named
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


@dataclass(eq=False)
class ModelPool:
    """One model's pool: its dispatcher (and endpoint pool), metrics, and proxy."""

    name: str
    dispatcher: Dispatcher
    registry: CollectorRegistry
    metrics: RouterMetrics
    proxy: Proxy | None = None


@dataclass
class _Cards:
    """What an endpoint's ``GET /v1/models`` listed, in its order."""

    cards: list[dict[str, Any]] = field(default_factory=list)

    @property
    def base(self) -> str | None:
        """The first base model (no ``parent``): the endpoint's pool in discovery."""
        return base_model(self.cards)


class ModelPools:
    """The pools by model name, the model ids that route to each, and what discovery saw.

    ``make_dispatcher`` builds a new pool's dispatcher (the router's slots, holding and
    order); pools are added by configuration (:meth:`add`) or by discovery.
    """

    def __init__(self, make_dispatcher: Callable[[], Dispatcher], discover: bool = False) -> None:
        self._make_dispatcher = make_dispatcher
        self.discover = discover
        self.pools: dict[str, ModelPool] = {}
        self._aliases: dict[str, str] = {}  # model id -> pool name (served names, adapters)
        self._cards: dict[str, _Cards] = {}  # endpoint URL -> its /v1/models
        self._listed: list[str] = []  # discovery: the source's URLs, in order
        self._assigned: dict[str, str] = {}  # discovery: endpoint URL -> pool name
        self._proxy: ProxyFactory | None = None
        self.changed = asyncio.Event()  # discovery: new URLs to probe

    # --- pools ----------------------------------------------------------------------------
    def add(self, name: str) -> ModelPool:
        """The pool of ``name``, made (empty) if new."""
        pool = self.pools.get(name)
        if pool is None:
            dispatcher = self._make_dispatcher()
            registry = CollectorRegistry()
            metrics = RouterMetrics(registry, dispatcher)
            pool = ModelPool(name, dispatcher, registry, metrics)
            if self._proxy is not None:
                pool.proxy = self._proxy(dispatcher, metrics)
            self.pools[name] = pool
            log.info("model pool %s", name)
        return pool

    def bind(self, proxy: ProxyFactory) -> None:
        """Give every pool (and every later one) its proxy (called by the app)."""
        self._proxy = proxy
        for pool in self.pools.values():
            pool.proxy = proxy(pool.dispatcher, pool.metrics)

    def lookup(self, model: str) -> ModelPool | None:
        """The pool a request for ``model`` goes to (a pool's name, or an id it lists)."""
        pool = self.pools.get(model)
        if pool is None:
            name = self._aliases.get(model)
            pool = self.pools.get(name) if name is not None else None
        return pool

    def default(self) -> ModelPool | None:
        """The first pool: configured order, else discovery's."""
        return next(iter(self.pools.values()), None)

    def dispatchers(self) -> list[Dispatcher]:
        return [pool.dispatcher for pool in self.pools.values()]

    def has_ready(self) -> bool:
        return any(pool.dispatcher.pool.has_ready() for pool in self.pools.values())

    # --- endpoints ---------------------------------------------------------------------------
    def set_endpoints(self, name: str, urls: Sequence[str]) -> None:
        """A configured pool's endpoint list (its file changed)."""
        pool = self.add(name)
        added, removed = pool.dispatcher.pool.set_endpoints(urls)
        if added or removed:
            log.info("model %s endpoints: +%s -%s", name, added, removed)
            self.changed.set()
        if removed:
            pool.dispatcher.forget(removed)
        pool.dispatcher.pump()

    def apply(self, urls: Sequence[str]) -> None:
        """Discovery: the source's whole list. Endpoints that left leave their pool now;
        new ones join a pool once their ``/v1/models`` has answered (:meth:`learn`)."""
        self._listed = list(dict.fromkeys(normalize_url(u) for u in urls))
        listed = set(self._listed)
        for url in [u for u in self._assigned if u not in listed]:
            del self._assigned[url]
        for url in [u for u in self._cards if u not in listed]:
            del self._cards[url]
        self._reassign()
        if any(u not in self._assigned for u in self._listed):
            self.changed.set()

    def to_probe(self) -> list[str]:
        """Every endpoint whose ``/v1/models`` the router reads: the listed ones
        (discovery) or those of every pool (configured), draining ones left out."""
        if self.discover:
            return list(self._listed)
        return [
            ep.url
            for pool in self.pools.values()
            for ep in pool.dispatcher.pool.endpoints()
            if ep.state != DRAINING
        ]

    def learn(self, url: str, cards: list[dict[str, Any]]) -> None:
        """Record what ``url``'s ``/v1/models`` listed: its pool (discovery) and the model
        ids that route there."""
        if self.discover and url not in self._listed:
            return  # left discovery while it was probed
        self._cards[url] = _Cards(cards)
        if self.discover:
            base = self._cards[url].base
            if base is not None and self._assigned.get(url) != base:
                self._assigned[url] = base
                self._reassign()
        self._alias()

    def _reassign(self) -> None:
        """Discovery: each pool's endpoints are the listed URLs assigned to it. A pool
        once seen stays (0 endpoints: its requests are held until one comes back)."""
        wanted: dict[str, list[str]] = {name: [] for name in self.pools}
        for url in self._listed:
            name = self._assigned.get(url)
            if name is not None:
                wanted.setdefault(name, []).append(url)
        for name, urls in wanted.items():
            self.set_endpoints(name, urls)
        self._alias()

    def _pool_of(self, url: str) -> str | None:
        if self.discover:
            return self._assigned.get(url)
        for pool in self.pools.values():
            if pool.dispatcher.pool.get(url) is not None:
                return pool.name
        return None

    def _alias(self) -> None:
        aliases: dict[str, str] = {}
        for url, listed in self._cards.items():
            name = self._pool_of(url)
            if name is None:
                continue
            for card in listed.cards:
                aliases.setdefault(str(card["id"]), name)
        self._aliases = aliases

    # --- answers ---------------------------------------------------------------------------
    def models_list(self, now_s: float | None = None) -> dict[str, Any]:
        """``GET /v1/models``: every model id the endpoints list (first card seen for an
        id), and a card for each pool none lists now (no replica yet: its requests are
        held)."""
        data: dict[str, dict[str, Any]] = {}
        for url, listed in self._cards.items():
            if self._pool_of(url) is None:
                continue
            for card in listed.cards:
                data.setdefault(str(card["id"]), card)
        created = int(time.time() if now_s is None else now_s)
        for name in self.pools:
            if name not in data:
                data[name] = {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "vllm",
                    "root": name,
                    "parent": None,
                    "permission": [],
                }
        return {"object": "list", "data": list(data.values())}

    def collector(self) -> Collector:
        """Every pool's series with its ``model`` label, for the router's registry."""
        return _Labelled(self)


# router_client_errors_total as prometheus_client names its family (no ``_total``).
_CLIENT_ERRORS = names.ROUTER_CLIENT_ERRORS.removesuffix("_total")


class _Labelled(Collector):
    """The pools' registries merged, each sample labelled with its pool's model."""

    def __init__(self, pools: ModelPools) -> None:
        self._pools = pools

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for pool in list(self._pools.pools.values()):
            pool.metrics.prune()
            for family in pool.registry.collect():
                if family.name == _CLIENT_ERRORS:
                    continue  # the router's own (the door comes before the pools): not a pool's
                out = families.get(family.name)
                if out is None:
                    out = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = out
                for s in family.samples:
                    labels = {**s.labels, MODEL_LABEL: pool.name}
                    out.samples.append(Sample(s.name, labels, s.value, s.timestamp, s.exemplar))
        yield from families.values()


class ModelFront:
    """The ``/v1/*`` app of a multi-pool router: the request's ``model`` → its pool's proxy."""

    def __init__(self, pools: ModelPools, max_body_bytes: int) -> None:
        self.pools = pools
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        path: bytes = scope.get("raw_path") or scope["path"].encode()
        if path == _MODELS_PATH and method in ("GET", "HEAD"):
            body = json.dumps(self.pools.models_list()).encode()
            await _reply(send, 200, b"" if method == "HEAD" else body, len(body))
            return
        default = self.pools.default()
        if default is None or default.proxy is None:
            body = error_body(503, "no_ready_endpoint", "no model discovered yet")
            await _reply(send, 503, body, len(body), retry_after=b"1")
            return
        if method in ("GET", "HEAD", "OPTIONS"):
            await self._ready_pool(default.proxy)(scope, receive, send)
            return
        try:
            default.proxy.routes.lookup(method, path)
        except RequestRefused:  # the proxy answers it (400/404/405), counted there
            await default.proxy(scope, receive, send)
            return
        if _declared(scope) > self.max_body_bytes:  # refused before it is read
            await self._too_large(send)
            return
        cycle: Cycle | None = scope.get(CYCLE)
        body_in = cycle.whole_body() if cycle is not None else None
        if body_in is None:
            body_in = await _read(receive, self.max_body_bytes)
            if body_in is None:
                return  # the client left
        if len(body_in) > self.max_body_bytes:
            await self._too_large(send)
            return
        model = model_of(body_in)
        pool = default if model is None else self.pools.lookup(model)
        if pool is None or pool.proxy is None:
            body = model_not_found(model or "")
            await _reply(send, 404, body, len(body))
            return
        if cycle is not None:
            cycle.put_back(body_in)
        else:
            receive = _replay(body_in, receive)
        await pool.proxy(scope, receive, send)

    async def _too_large(self, send: Send) -> None:
        """The proxy's 413 (its error body)."""
        message = f"request body larger than --max-body-bytes={self.max_body_bytes}"
        body = error_body(413, "request_too_large", message)
        await _reply(send, 413, body, len(body))

    def _ready_pool(self, default: Proxy) -> Proxy:
        """The proxy of a pool with a ready endpoint for a metadata call, else the default."""
        for pool in self.pools.pools.values():
            if pool.proxy is not None and pool.dispatcher.pool.has_ready():
                return pool.proxy
        return default


def _declared(scope: Scope) -> int:
    """The request's declared Content-Length (0: none or unreadable; the largest if several)."""
    declared = 0
    for name, value in scope["headers"]:
        if name.lower() == b"content-length":
            with contextlib.suppress(ValueError):
                declared = max(declared, int(value))
    return declared


async def _read(receive: Receive, limit: int) -> bytes | None:
    """The whole body through ASGI ``receive()`` (read no further than ``limit`` + 1
    bytes); None when the client left."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        chunks.append(chunk)
        if size > limit:
            return b"".join(chunks)  # over the limit: answered 413
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` that first gives ``body`` back whole, then passes through."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def _reply(
    send: Send, status: int, body: bytes, length: int, retry_after: bytes | None = None
) -> None:
    headers = [*_JSON, (b"content-length", str(length).encode())]
    if retry_after is not None:
        headers.append((b"retry-after", retry_after))
    try:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    except OSError:
        pass  # the client left


# --- /v1/models of every endpoint: discovery and the ids that route to each pool ----------
async def probe_once(pools: ModelPools, session: aiohttp.ClientSession, timeout_s: float) -> None:
    """Read every endpoint's ``/v1/models`` concurrently and record what each lists."""
    urls = pools.to_probe()
    if not urls:
        return
    results = await asyncio.gather(*(read_models(session, u, timeout_s) for u in urls))
    for url, cards in zip(urls, results, strict=True):
        if cards is not None:
            pools.learn(url, cards)


async def run_discovery(
    pools: ModelPools,
    session_getter: Callable[[], aiohttp.ClientSession],
    interval_s: float,
    timeout_s: float,
) -> None:
    """Loop forever (cancel to stop): a round every ``interval_s`` seconds, and at once
    when endpoints were added."""
    while True:
        try:
            await probe_once(pools, session_getter(), timeout_s)
        except Exception:  # a bug here must not stop discovery
            log.exception("model discovery round failed")
        pools.changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pools.changed.wait(), interval_s)
