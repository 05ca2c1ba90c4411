"""``inflight scaler``: the one wiring site of the KEDA external scaler.

Parses flags, builds the source (Prometheus, or the routers directly), the servicer and
the servers, and runs until SIGTERM/SIGINT, then shuts down gracefully. Heavy imports
stay inside ``run`` so ``inflight --help`` is fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from external_scaler.limits import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_TRIGGERS,
    DEFAULT_TRIGGER_IDLE_S,
)
from inflight import ready


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scaler",
        help="KEDA external scaler (gRPC): scale on requests in flight, read from Prometheus",
        description=(
            "KEDA external scaler (externalscaler.ExternalScaler over gRPC). Reads L, the "
            "requests in flight, from Prometheus (or straight from the routers with "
            "--source direct) and returns the stabilized L so that HPA picks "
            "ceil(L / (slotsPerReplica x targetSaturation)) replicas."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument(
        "--grpc-port", type=int, default=0, help="gRPC port; 0 = any free one (printed)"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        help="port for GET /metrics and /health; 0 = any free one (printed)",
    )
    ready.add_argument(parser)  # reports {"grpc": G, "metrics": M}
    parser.add_argument(
        "--source",
        choices=("prometheus", "direct"),
        default=None,
        help="where L comes from (default: prometheus when --prometheus-url is given)",
    )
    parser.add_argument("--prometheus-url", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    parser.add_argument(
        "--prometheus-bearer-token-file",
        help="file holding a bearer token for Prometheus (re-read when it changes)",
    )
    parser.add_argument("--router-url", help="--source direct: router base URL(s), comma-separated")
    parser.add_argument(
        "--poll-interval-s",
        type=float,
        default=0.5,
        help="--source direct: seconds between polls of the routers (default 0.5)",
    )
    parser.add_argument(
        "--cache-ttl-s",
        type=float,
        default=1.0,
        help="reuse a Prometheus window for this long, so KEDA's 3 calls per poll cost one "
        "query (default 1.0; 0 disables)",
    )
    parser.add_argument(
        "--call-budget-s",
        type=float,
        default=2.5,
        help="most seconds a call may spend on its source (KEDA's deadline is 3 s)",
    )
    parser.add_argument(
        "--stream-interval-s",
        type=float,
        default=1.0,
        help="StreamIsActive: seconds between activity checks (default 1.0)",
    )
    parser.add_argument(
        "--max-streams",
        type=int,
        default=DEFAULT_MAX_STREAMS,
        help="most StreamIsActive streams open at once; more are refused with "
        "RESOURCE_EXHAUSTED (default %(default)s)",
    )
    parser.add_argument(
        "--max-triggers",
        type=int,
        default=DEFAULT_MAX_TRIGGERS,
        help="most distinct trigger specs polled within --trigger-idle-s; a new one past "
        "it is refused with RESOURCE_EXHAUSTED (default %(default)s)",
    )
    parser.add_argument(
        "--trigger-idle-s",
        type=float,
        default=DEFAULT_TRIGGER_IDLE_S,
        help="seconds after its last call that a trigger still counts toward "
        "--max-triggers (default %(default)g; KEDA polls every 30 s, the HPA every 15 s)",
    )
    parser.add_argument(
        "--tls-cert",
        help="server certificate (PEM): serve gRPC over TLS; re-read when the file "
        "changes (cert-manager rotation), no restart needed",
    )
    parser.add_argument("--tls-key", help="server private key (PEM), with --tls-cert")
    parser.add_argument(
        "--tls-client-ca",
        help="CA (PEM) that signs client certificates: require one (mutual TLS)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    parser.set_defaults(func=run)


class UsageError(ValueError):
    """A flag is missing or has a bad value; the message names it."""


def validate(args: argparse.Namespace) -> str:
    """Check flag combinations; return the source name. Raises UsageError naming the flag."""
    source = args.source or ("prometheus" if args.prometheus_url else None)
    if source is None:
        raise UsageError("give --prometheus-url URL, or --source direct --router-url URL[,URL]")
    if source == "prometheus" and not args.prometheus_url:
        raise UsageError("--source prometheus needs --prometheus-url URL")
    if source == "prometheus" and not args.prometheus_url.startswith(("http://", "https://")):
        raise UsageError(
            f"--prometheus-url must start with http:// or https://, got {args.prometheus_url!r}"
        )
    if source == "direct":
        urls = [u for u in (args.router_url or "").split(",") if u.strip()]
        if not urls:
            raise UsageError("--source direct needs --router-url URL[,URL]")
        bad = [u for u in urls if not u.strip().startswith(("http://", "https://"))]
        if bad:
            raise UsageError(f"--router-url: not an http(s) URL: {bad[0]!r}")
    for flag, value in (("--max-streams", args.max_streams), ("--max-triggers", args.max_triggers)):
        if value < 1:
            raise UsageError(f"{flag} must be ≥ 1, got {value}")
    for flag, value in (("--grpc-port", args.grpc_port), ("--metrics-port", args.metrics_port)):
        if not 0 <= value <= 65535:
            raise UsageError(f"{flag} must be 0..65535, got {value}")
    for flag, value, low in (
        ("--poll-interval-s", args.poll_interval_s, 0.01),
        ("--cache-ttl-s", args.cache_ttl_s, 0.0),
        ("--call-budget-s", args.call_budget_s, 0.05),
        ("--stream-interval-s", args.stream_interval_s, 0.01),
        ("--trigger-idle-s", args.trigger_idle_s, 1.0),
    ):
        if not value >= low:
            raise UsageError(f"{flag} must be ≥ {low:g}, got {value}")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise UsageError("--tls-cert and --tls-key go together")
    if args.tls_client_ca and not args.tls_cert:
        raise UsageError("--tls-client-ca needs --tls-cert and --tls-key")
    return str(source)


def run(args: argparse.Namespace) -> int:
    try:
        source_name = validate(args)
    except UsageError as exc:
        print(f"inflight scaler: {exc}", file=sys.stderr)
        return 2
    import asyncio

    from inflight import logs

    logs.configure(args.log_level)
    from external_scaler.errors import ScalerError

    try:
        return asyncio.run(_serve(args, source_name))
    except (UsageError, ValueError, OSError, ScalerError) as exc:
        print(f"inflight scaler: {exc}", file=sys.stderr)
        return 2


async def _serve(args: argparse.Namespace, source_name: str) -> int:
    import asyncio
    import signal
    from pathlib import Path

    import aiohttp
    from prometheus_client import CollectorRegistry

    from external_scaler.limits import Limits
    from external_scaler.metrics import ScalerMetrics
    from external_scaler.server import ScalerApp, TlsFiles
    from external_scaler.servicer import ExternalScalerServicer
    from external_scaler.sources import WindowSource
    from external_scaler.sources.direct import DirectSource
    from external_scaler.sources.prometheus import BearerToken, PrometheusSource

    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=30))
    source: WindowSource
    try:
        if source_name == "prometheus":
            token = None
            if args.prometheus_bearer_token_file:
                token = BearerToken(Path(args.prometheus_bearer_token_file))
            source = PrometheusSource(
                args.prometheus_url,
                session,
                metrics,
                bearer_token=token,
                cache_ttl_s=args.cache_ttl_s,
            )
            where = f"Prometheus {args.prometheus_url}"
        else:
            urls = [u.strip() for u in args.router_url.split(",") if u.strip()]
            direct = DirectSource(urls, session, metrics, poll_interval_s=args.poll_interval_s)
            direct.start()
            source = direct
            where = "routers " + ",".join(urls)
        tls = None
        if args.tls_cert:
            tls = TlsFiles(
                Path(args.tls_cert),
                Path(args.tls_key),
                Path(args.tls_client_ca) if args.tls_client_ca else None,
            )
        servicer = ExternalScalerServicer(
            source,
            metrics,
            call_budget_s=args.call_budget_s,
            stream_interval_s=args.stream_interval_s,
            limits=Limits(
                max_streams=args.max_streams,
                max_triggers=args.max_triggers,
                trigger_idle_s=args.trigger_idle_s,
            ),
        )
        app = ScalerApp(
            servicer,
            registry,
            host=args.host,
            grpc_port=args.grpc_port,
            metrics_port=args.metrics_port,
            tls=tls,
        )
        await app.start()
        mode = "plaintext" if tls is None else ("mTLS" if tls.client_ca else "TLS")
        print(
            f"inflight scaler: gRPC on {args.host}:{app.grpc_port} ({mode}), "
            f"metrics on http://{args.host}:{app.metrics_port}/metrics, L from {where}",
            flush=True,
        )
        if args.ready_file is not None:
            ready.write(args.ready_file, {"grpc": app.grpc_port, "metrics": app.metrics_port})
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await app.stop(grace_s=3.0)
        return 0
    finally:
        await session.close()
