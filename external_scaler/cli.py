"""``inflight scaler``: the one wiring site of the KEDA external scaler.

Parses flags, builds the source (Prometheus, or the routers directly), the servicer and
the servers, and runs until SIGTERM/SIGINT, then shuts down gracefully. Heavy imports
stay inside ``run`` so ``inflight --help`` is fast.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, model_validator

from external_scaler.limits import (
    DEFAULT_MAX_QUERIES_PER_S,
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_TRIGGERS,
    DEFAULT_TRIGGER_IDLE_S,
)
from inflight import config, ready
from inflight.config import Cli, ConfigError, FieldError

if TYPE_CHECKING:  # heavy imports wait for _serve (the CLI's --help stays fast)
    import aiohttp

    from external_scaler.metrics import ScalerMetrics
    from external_scaler.server import TlsFiles
    from external_scaler.sources import WindowSource

#: Kept for callers of the old name: a bad flag, variable or combination.
UsageError = ConfigError


def _http_url(text: str) -> bool:
    return text.strip().startswith(("http://", "https://"))


class ScalerSettings(config.Settings):
    """``inflight scaler``'s configuration: flags or ``INFLIGHT_SCALER_*`` variables."""

    SUBCOMMAND = "scaler"

    host: Annotated[str, Cli("listen address (default 127.0.0.1)")] = "127.0.0.1"
    grpc_port: Annotated[
        int, Field(ge=0, le=65535), Cli("gRPC port; 0 = any free one (printed)")
    ] = 0
    metrics_port: Annotated[
        int,
        Field(ge=0, le=65535),
        Cli("port for GET /metrics and /health; 0 = any free one (printed)"),
    ] = 0
    ready_file: Annotated[Path | None, Cli(ready.HELP, metavar="READY_FILE")] = None
    source: Annotated[
        Literal["prometheus", "direct"] | None,
        Cli("where L comes from (default: prometheus when --prometheus-url is given)"),
    ] = None
    prometheus_url: Annotated[
        str | None, Cli("Prometheus base URL, e.g. http://127.0.0.1:9090")
    ] = None
    prometheus_bearer_token_file: Annotated[
        str | None, Cli("file holding a bearer token for Prometheus (re-read when it changes)")
    ] = None
    router_url: Annotated[
        str | None, Cli("--source direct: router base URL(s), comma-separated or a JSON array")
    ] = None
    poll_interval_s: Annotated[
        float,
        Field(ge=0.01),
        Cli("--source direct: seconds between polls of the routers (default 0.5)"),
    ] = 0.5
    cache_ttl_s: Annotated[
        float,
        Field(ge=0.0),
        Cli(
            "reuse a Prometheus window for this long, so KEDA's 3 calls per poll cost one "
            "query (default 1.0; 0 disables)"
        ),
    ] = 1.0
    call_budget_s: Annotated[
        float,
        Field(ge=0.05),
        Cli("most seconds a call may spend on its source (KEDA's deadline is 3 s)"),
    ] = 2.5
    stream_interval_s: Annotated[
        float,
        Field(ge=0.01),
        Cli("StreamIsActive: seconds between activity checks (default 1.0)"),
    ] = 1.0
    max_streams: Annotated[
        int,
        Field(ge=1),
        Cli(
            "most StreamIsActive streams open at once; more are refused with "
            f"RESOURCE_EXHAUSTED (default {DEFAULT_MAX_STREAMS})"
        ),
    ] = DEFAULT_MAX_STREAMS
    max_triggers: Annotated[
        int,
        Field(ge=1),
        Cli(
            "most distinct trigger specs polled within --trigger-idle-s; a new one past "
            f"it is refused with RESOURCE_EXHAUSTED (default {DEFAULT_MAX_TRIGGERS})"
        ),
    ] = DEFAULT_MAX_TRIGGERS
    trigger_idle_s: Annotated[
        float,
        Field(ge=1.0),
        Cli(
            "seconds after its last call that a trigger still counts toward "
            f"--max-triggers (default {DEFAULT_TRIGGER_IDLE_S:g}; KEDA polls every 30 s, "
            "the HPA every 15 s)"
        ),
    ] = DEFAULT_TRIGGER_IDLE_S
    max_queries_per_s: Annotated[
        float,
        Field(ge=0.0),
        Cli(
            "most Prometheus range-query fetches a second across all triggers, after a burst "
            "of --max-triggers (answers from the --cache-ttl-s cache are free); past it a "
            "call is refused with RESOURCE_EXHAUSTED (default 0: no bound; the manifests "
            "set 20)"
        ),
    ] = DEFAULT_MAX_QUERIES_PER_S
    tls_cert: Annotated[
        str | None,
        Cli(
            "server certificate (PEM): serve gRPC over TLS; re-read when the file "
            "changes (cert-manager rotation), no restart needed"
        ),
    ] = None
    tls_key: Annotated[str | None, Cli("server private key (PEM), with --tls-cert")] = None
    tls_client_ca: Annotated[
        str | None, Cli("CA (PEM) that signs client certificates: require one (mutual TLS)")
    ] = None
    log_level: Annotated[str, Cli("logging level (default INFO)")] = "INFO"

    @property
    def source_name(self) -> str:
        """``prometheus`` or ``direct`` (checked by the validator)."""
        return self.source or "prometheus"

    @property
    def router_urls(self) -> list[str]:
        """``router_url`` as a list: ``URL,URL`` or a JSON array."""
        return [str(u).strip() for u in config.split_list(self.router_url or "")]

    @model_validator(mode="after")
    def _check(self) -> ScalerSettings:
        named = self.named
        if self.source is None and not self.prometheus_url:
            raise FieldError(
                None,
                f"give --prometheus-url URL, or --source direct --router-url URL[,URL] "
                f"(or {self.env_var('prometheus_url')}, {self.env_var('source')} and "
                f"{self.env_var('router_url')})",
            )
        if self.source_name == "prometheus":
            if not self.prometheus_url:
                raise FieldError("prometheus_url", "is needed with --source prometheus")
            if not _http_url(self.prometheus_url):
                raise FieldError(
                    "prometheus_url",
                    f"must start with http:// or https://, got {self.prometheus_url!r}",
                )
        else:
            try:
                _ = self.router_urls
            except ValueError as exc:
                raise FieldError("router_url", str(exc)) from None
            if not self.router_urls:
                raise FieldError("router_url", "is needed with --source direct: URL[,URL]")
            bad = [u for u in self.router_urls if not _http_url(u)]
            if bad:
                raise FieldError("router_url", f"not an http(s) URL: {bad[0]!r}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise FieldError(None, f"{named('tls_cert')} and {named('tls_key')} go together")
        if self.tls_client_ca and not self.tls_cert:
            raise FieldError("tls_client_ca", "needs --tls-cert and --tls-key")
        return self


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scaler",
        help="KEDA external scaler (gRPC): scale on requests in flight, read from Prometheus",
        description=(
            "KEDA external scaler (externalscaler.ExternalScaler over gRPC). Reads L, the "
            "requests in flight, from Prometheus (or straight from the routers with "
            "--source direct) and returns the stabilized L so that HPA picks "
            "ceil(L / (slotsPerReplica x targetSaturation)) replicas. Every flag can also "
            "be set as INFLIGHT_SCALER_<FLAG> (e.g. INFLIGHT_SCALER_GRPC_PORT=9090); a flag "
            "wins."
        ),
    )
    config.add_flags(parser, ScalerSettings)  # --ready-file reports {"grpc": G, "metrics": M}
    parser.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> ScalerSettings:
    """Flags over ``INFLIGHT_SCALER_*`` over defaults; ConfigError names flag and variable."""
    return config.load(ScalerSettings, args)


def validate(args: argparse.Namespace) -> str:
    """The source name the flags (and environment) select; ConfigError names the fault."""
    return settings_from_args(args).source_name


def run(args: argparse.Namespace) -> int:
    import sys

    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        return config.report(ScalerSettings, exc)
    if config.wants_print(args):
        return config.print_config(settings)
    import asyncio

    from external_scaler.errors import ScalerError
    from inflight import logs

    logs.configure(settings.log_level)
    try:
        return asyncio.run(_serve(settings))
    except (ValueError, OSError, ScalerError) as exc:
        print(f"inflight scaler: {exc}", file=sys.stderr)
        return 2


def _source(
    settings: ScalerSettings, session: aiohttp.ClientSession, metrics: ScalerMetrics
) -> tuple[WindowSource, str]:
    """The window source ``settings`` name, started, and where it reads L from (for the log)."""
    from external_scaler.limits import QueryRate
    from external_scaler.sources.direct import DirectSource
    from external_scaler.sources.prometheus import BearerToken, PrometheusSource

    if settings.source_name == "prometheus":
        token = None
        if settings.prometheus_bearer_token_file:
            token = BearerToken(Path(settings.prometheus_bearer_token_file))
        assert settings.prometheus_url is not None  # the validator checked it
        source = PrometheusSource(
            settings.prometheus_url,
            session,
            metrics,
            bearer_token=token,
            cache_ttl_s=settings.cache_ttl_s,
            query_rate=(
                QueryRate(settings.max_queries_per_s, burst=settings.max_triggers)
                if settings.max_queries_per_s > 0
                else None
            ),
        )
        return source, f"Prometheus {settings.prometheus_url}"
    urls = settings.router_urls
    direct = DirectSource(urls, session, metrics, poll_interval_s=settings.poll_interval_s)
    direct.start()
    return direct, "routers " + ",".join(urls)


def _tls(settings: ScalerSettings) -> TlsFiles | None:
    """The TLS files ``settings`` name (both or neither, as the validator checked)."""
    from external_scaler.server import TlsFiles

    if settings.tls_cert and settings.tls_key:
        return TlsFiles(
            Path(settings.tls_cert),
            Path(settings.tls_key),
            Path(settings.tls_client_ca) if settings.tls_client_ca else None,
        )
    return None


async def _serve(settings: ScalerSettings) -> int:
    """The wiring: reads ``settings`` only."""
    import asyncio
    import signal

    import aiohttp
    from prometheus_client import CollectorRegistry

    from external_scaler.limits import Limits
    from external_scaler.metrics import ScalerMetrics
    from external_scaler.server import ScalerApp
    from external_scaler.servicer import ExternalScalerServicer

    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=30))
    try:
        source, where = _source(settings, session, metrics)
        tls = _tls(settings)
        servicer = ExternalScalerServicer(
            source,
            metrics,
            call_budget_s=settings.call_budget_s,
            stream_interval_s=settings.stream_interval_s,
            limits=Limits(
                max_streams=settings.max_streams,
                max_triggers=settings.max_triggers,
                trigger_idle_s=settings.trigger_idle_s,
            ),
        )
        app = ScalerApp(
            servicer,
            registry,
            host=settings.host,
            grpc_port=settings.grpc_port,
            metrics_port=settings.metrics_port,
            tls=tls,
        )
        await app.start()
        mode = "plaintext" if tls is None else ("mTLS" if tls.client_ca else "TLS")
        print(
            f"inflight scaler: gRPC on {settings.host}:{app.grpc_port} ({mode}), "
            f"metrics on http://{settings.host}:{app.metrics_port}/metrics, L from {where}",
            flush=True,
        )
        if settings.ready_file is not None:
            ready.write(settings.ready_file, {"grpc": app.grpc_port, "metrics": app.metrics_port})
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await app.stop(grace_s=3.0)
        return 0
    finally:
        await session.close()
