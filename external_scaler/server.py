"""Serving: the gRPC server (scaler, health, reflection, optional TLS/mTLS) and /metrics.

TLS files are re-read when they change (``external_scaler.tls``), so a rotated
certificate is served to new connections without a restart.

Importable and testable without the CLI: ``ScalerApp`` takes its source, registry and
settings from the wiring site (``external_scaler.cli``) and owns only their lifecycle.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from external_scaler.servicer import ExternalScalerServicer
from external_scaler.tls import TlsFiles

__all__ = ["SERVICE_NAME", "ScalerApp", "TlsFiles"]

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name


class ScalerApp:
    """One scaler process: gRPC on ``grpc_address``, Prometheus text on the metrics port."""

    def __init__(
        self,
        servicer: ExternalScalerServicer,
        registry: CollectorRegistry,
        *,
        host: str = "127.0.0.1",
        grpc_port: int = 0,
        metrics_port: int = 0,
        tls: TlsFiles | None = None,
    ) -> None:
        self.servicer = servicer
        self.registry = registry
        self.host = host
        self.grpc_port = grpc_port
        self.metrics_port = metrics_port
        self.tls = tls
        self.health = HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        pb_grpc.add_ExternalScalerServicer_to_server(self.servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (
                SERVICE_NAME,
                health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                reflection.SERVICE_NAME,
            ),
            server,
        )
        address = f"{self.host}:{self.grpc_port}"
        try:
            if self.tls is None:
                port = server.add_insecure_port(address)
            else:
                port = server.add_secure_port(address, self.tls.credentials())
        except RuntimeError as exc:  # grpc's "Failed to bind to address"
            await server.stop(None)
            raise OSError(f"--grpc-port: cannot listen on {address}: {exc}") from None
        except ValueError:
            await server.stop(None)
            raise
        self.grpc_port = port

        # /metrics and /health before gRPC serves: a port clash fails start-up cleanly.
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health", self._healthz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.metrics_port)
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            await server.stop(None)
            raise OSError(
                f"--metrics-port: cannot listen on {self.host}:{self.metrics_port}: {exc.strerror}"
            ) from None
        server_obj: Any = site._server  # aiohttp keeps the asyncio Server here
        if server_obj is not None and server_obj.sockets:
            self.metrics_port = server_obj.sockets[0].getsockname()[1]

        await server.start()
        self._server = server
        await self.health.set("", health_pb2.HealthCheckResponse.SERVING)
        await self.health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)

    async def _metrics(self, _request: web.Request) -> web.Response:
        self.servicer.forget_idle()  # a gone trigger's gauges leave this scrape
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        if self._server is None:
            return web.json_response({"status": "starting"}, status=503)
        return web.json_response({"status": "ok", "grpc_port": self.grpc_port})

    async def wait(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Report NOT_SERVING, let calls in flight finish (up to ``grace_s``), then close."""
        await self.health.enter_graceful_shutdown()
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._runner is not None:
            await self._runner.cleanup()
        await self.servicer.source.close()
