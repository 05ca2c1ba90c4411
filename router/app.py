"""The router's ASGI application: ``/v1/*`` to the raw proxy, the admin routes to FastAPI.

``/v1/*`` is the measured hot path: a raw ASGI handler (:mod:`router.proxy`), with no
framework in between. The admin routes (``/health``, ``/ready``, ``/metrics``,
``/router/status`` and their OpenAPI schema, ``/openapi.json``) are a FastAPI app,
``/router/status`` with its typed model (:mod:`router.status`).

Built from collaborators passed in (dispatcher, registry, background tasks); the one
place that creates them is :mod:`router.cli`. The upstream client of the hot path
(:mod:`router.upstream`) and the aiohttp session of the background jobs (health checks)
are created at startup (they need the running loop) and closed at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiohttp
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from router import routes, upstream
from router.dispatch import Dispatcher
from router.limits import DoorLimits
from router.metrics import ClientErrors, RouterMetrics
from router.model_pools import ModelFront, ModelPools
from router.priority import PrioritySource
from router.proxy import Proxy, Receive, Scope, Send
from router.status import RouterStatus, router_status
from router.upstream import Upstream
from router.uvicorn_protocol import FAST_ROUTES, LIMITS

log = logging.getLogger(__name__)

# A background job: runs for the app's lifetime, gets the live session, cancelled at exit.
Background = Callable[[Callable[[], aiohttp.ClientSession]], Awaitable[None]]


@dataclass(frozen=True)
class UpstreamSettings:
    """The shared session's limits, in seconds."""

    connect_timeout_s: float = 5.0
    total_timeout_s: float | None = None  # None: LLM requests may take minutes
    # Below uvicorn's 5 s keep-alive (vLLM's server): a pooled connection is dropped by
    # us before the upstream closes it, so a POST never lands on a stale socket.
    keepalive_s: float = 4.0
    client: str = "httptools"  # --upstream-client

    def build(self) -> Upstream:
        return upstream.build(
            self.client, self.connect_timeout_s, self.total_timeout_s, self.keepalive_s
        )

    def session(self) -> aiohttp.ClientSession:
        return upstream.make_session(self.connect_timeout_s, self.total_timeout_s, self.keepalive_s)


class RouterApp:
    """The ASGI callable uvicorn serves."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        registry: CollectorRegistry,
        max_body_bytes: int,
        unhealthy_backoff_s: float,
        upstream: UpstreamSettings = UpstreamSettings(),
        background: Sequence[Background] = (),
        allow_routes: Sequence[routes.Route] = (),
        models: ModelPools | None = None,
        limits: Callable[[Callable[[str], None]], DoorLimits] | None = None,
        priority: PrioritySource | None = None,
    ) -> None:
        """``limits``: the limits at the door, made with the router's refusal counter
        (router.uvicorn_protocol's LIMITS; None: its defaults)."""
        self.dispatcher = dispatcher  # with ``models``: unused, the pools have their own
        self.registry = registry
        self.models = models
        # router_client_errors_total: the door's and every pool's proxy's, one for the router
        # (with model pools registered here, beside the pools' labelled series).
        self.client_errors = ClientErrors()
        self.metrics = RouterMetrics(
            registry if models is None else CollectorRegistry(),
            dispatcher,
            client_errors=self.client_errors,
        )
        if limits is not None:
            setattr(self, LIMITS, limits(self.client_errors))
        self._session: aiohttp.ClientSession | None = None
        self._client: Upstream | None = None
        self._upstream = upstream
        self._background = list(background)
        self.proxy = Proxy(
            dispatcher,
            self.metrics,
            self.client,
            max_body_bytes=max_body_bytes,
            unhealthy_backoff_s=unhealthy_backoff_s,
            routes=routes.RouteTable((*routes.OPENAI_ROUTES, *allow_routes)),
            client_errors=self.client_errors,
            priority=priority,
        )
        # The /v1/* app: the proxy, or with several model pools the front that picks one.
        self._v1: Callable[[Scope, Receive, Send], Awaitable[None]] = self.proxy
        if models is not None:  # several model pools (router.model_pools): a proxy each
            table = self.proxy.routes
            models.bind(
                lambda d, m: Proxy(
                    d,
                    m,
                    self.client,
                    max_body_bytes,
                    unhealthy_backoff_s,
                    routes=table,
                    client_errors=self.client_errors,
                    priority=priority,
                )
            )
            registry.register(models.collector())
            registry.register(self.client_errors)
            self._v1 = ModelFront(models, max_body_bytes)
        else:
            # router.uvicorn_protocol's fast path: the table's exact work routes go to the proxy
            # without ASGI (a request there it cannot take at once comes back this way).
            setattr(self, FAST_ROUTES, self.proxy.fast_routes())
        self.rest = self._admin()

    def session(self) -> aiohttp.ClientSession:
        """The background jobs' session (health checks)."""
        if self._session is None:
            raise RuntimeError("router session used before startup")
        return self._session

    def client(self) -> Upstream:
        """The hot path's upstream client."""
        if self._client is None:
            raise RuntimeError("router upstream client used before startup")
        return self._client

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine itself: it hands over the chosen app's, so a request's coroutine
        # chain (resumed at each wake-up) is one level shorter.
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            return self._v1(scope, receive, send)
        return self.rest(scope, receive, send)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        self._session = self._upstream.session()
        self._client = self._upstream.build()
        tasks = [asyncio.ensure_future(job(self.session)) for job in self._background]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await self._client.close()
            await self._session.close()

    def _admin(self) -> FastAPI:
        """The admin routes; no interactive docs (they would load scripts from a CDN)."""
        app = FastAPI(
            title="inflight router",
            summary="admin routes; /v1/* is proxied to the replicas and not described here",
            docs_url=None,
            redoc_url=None,
            lifespan=self._lifespan,
        )

        @app.get("/health")
        async def health() -> dict[str, str]:
            """200 whenever the router process is up, even with zero endpoints."""
            return {"status": "ok"}

        @app.get("/ready", responses={503: {"description": "no ready endpoint"}})
        async def ready() -> JSONResponse:
            """200 only with at least one ready endpoint (for a load balancer in front)."""
            models = self.models
            ok = models.has_ready() if models is not None else self.dispatcher.pool.has_ready()
            return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

        @app.get("/metrics", response_class=Response)
        async def metrics() -> Response:
            """The router's Prometheus metrics."""
            self.metrics.prune()
            return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)

        @app.get("/router/status", response_model_exclude_none=True)  # ``models``: several only
        async def status() -> RouterStatus:
            """L, the held requests, and each endpoint's state and in-flight count."""
            return router_status(self.dispatcher, self.models)

        return app
