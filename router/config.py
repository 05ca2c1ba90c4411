"""The router's configuration: parsed once from the command line, validated, frozen.

Every error names the flag at fault.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from router.routes import Route, RouteSpecError, parse_route

LOG_LEVELS = ("debug", "info", "warning", "error")
# --upstream-client: router.upstream.build makes each.
UPSTREAM_CLIENTS = ("httptools", "aiohttp")


class ConfigError(ValueError):
    """A bad flag value; the message names the flag."""


@dataclass(frozen=True)
class K8sSource:
    namespace: str
    service: str
    port_name: str | None


@dataclass(frozen=True)
class RouterConfig:
    host: str
    port: int
    slots_per_endpoint: int
    endpoints: tuple[str, ...] | None  # --endpoints (static), None when another source
    endpoints_file: Path | None
    k8s: K8sSource | None
    hold_when_full: bool
    max_queue: int
    queue_timeout_s: float
    max_body_bytes: int
    dispatch: str
    health_interval_s: float
    health_timeout_s: float
    unhealthy_backoff_s: float
    connect_timeout_s: float
    upstream_timeout_s: float | None  # None: no overall limit (LLM requests can be long)
    upstream_client: str
    file_poll_s: float
    log_level: str
    allow_routes: tuple[Route, ...]  # --allow-route: forwarded beside router.routes' table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="listen port (default 8000)")
    p.add_argument(
        "--slots-per-endpoint",
        type=int,
        default=4,
        help="requests one replica runs at once: vLLM's --max-num-seqs (default 4)",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--endpoints", help='static list: URL,URL ("" = zero endpoints)')
    src.add_argument(
        "--endpoints-file",
        type=Path,
        help="JSON or YAML list of base URLs, re-read when it changes",
    )
    src.add_argument("--k8s-namespace", help="watch EndpointSlices in this namespace")
    p.add_argument("--k8s-service", help="Service whose EndpointSlices to watch")
    p.add_argument("--k8s-port-name", help="the EndpointSlice port to use, by name")
    p.add_argument(
        "--hold-when-full",
        action="store_true",
        help="hold requests in a FIFO here when every slot is busy or no endpoint is ready",
    )
    p.add_argument("--max-queue", type=int, default=1024, help="held requests at most (503 beyond)")
    p.add_argument(
        "--queue-timeout-s", type=float, default=300.0, help="longest hold before 504 (seconds)"
    )
    p.add_argument(
        "--max-body-bytes", type=int, default=16 * 1024 * 1024, help="413 above this body size"
    )
    p.add_argument(
        "--dispatch",
        choices=("least-outstanding", "random"),
        default="least-outstanding",
        help="endpoint choice (random only as a benchmark baseline)",
    )
    p.add_argument("--health-interval-s", type=float, default=2.0, help="active health checks")
    p.add_argument("--health-timeout-s", type=float, default=2.0, help="one health check")
    p.add_argument(
        "--unhealthy-backoff-s",
        type=float,
        default=2.0,
        help="an endpoint that refused a connection gets no requests for this long",
    )
    p.add_argument("--connect-timeout-s", type=float, default=5.0, help="upstream connect")
    p.add_argument(
        "--upstream-timeout-s",
        type=float,
        default=0.0,
        help="overall upstream limit per request, 0 = none (default)",
    )
    p.add_argument(
        "--upstream-client",
        choices=UPSTREAM_CLIENTS,
        default="httptools",
        help="the /v1/* client: httptools (asyncio + llhttp, default, ~4x less CPU a "
        "request) or aiohttp (ClientSession; the benchmark's peer)",
    )
    p.add_argument("--file-poll-s", type=float, default=1.0, help="--endpoints-file poll period")
    p.add_argument(
        "--allow-route",
        action="append",
        default=[],
        metavar="METHOD:/v1/PATH",
        help="also forward this method and path (repeatable; a {name} segment matches one "
        "segment), e.g. POST:/v1/load_lora_adapter. Only vLLM's OpenAI routes are forwarded "
        "otherwise: other paths get 404, other methods 405",
    )
    p.add_argument("--log-level", default="warning", help="|".join(LOG_LEVELS))


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, got {value}")


def from_args(args: argparse.Namespace) -> RouterConfig:
    """Validate the parsed flags; raise ConfigError naming the flag at fault."""
    from router.sources import SourceError, parse_endpoints_flag  # yaml: keep --help fast

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be 0..65535, got {args.port}")
    if args.slots_per_endpoint < 1:
        raise ConfigError(f"--slots-per-endpoint must be ≥ 1, got {args.slots_per_endpoint}")
    if args.max_queue < 0:
        raise ConfigError(f"--max-queue must be ≥ 0, got {args.max_queue}")
    if args.max_body_bytes < 1:
        raise ConfigError(f"--max-body-bytes must be ≥ 1, got {args.max_body_bytes}")
    for flag in (
        "queue_timeout_s",
        "health_interval_s",
        "health_timeout_s",
        "connect_timeout_s",
        "file_poll_s",
    ):
        _positive("--" + flag.replace("_", "-"), getattr(args, flag))
    if args.unhealthy_backoff_s < 0:
        raise ConfigError(f"--unhealthy-backoff-s must be ≥ 0, got {args.unhealthy_backoff_s}")
    if args.upstream_timeout_s < 0:
        raise ConfigError(f"--upstream-timeout-s must be ≥ 0, got {args.upstream_timeout_s}")
    log_level = args.log_level.lower()  # logging and uvicorn would fail on it at startup
    if log_level not in LOG_LEVELS:
        raise ConfigError(f"--log-level must be {'|'.join(LOG_LEVELS)}, got {args.log_level}")
    try:
        allow_routes = tuple(parse_route(text) for text in args.allow_route)
    except RouteSpecError as exc:
        raise ConfigError(f"--allow-route {exc}") from exc
    endpoints: tuple[str, ...] | None = None
    k8s: K8sSource | None = None
    if args.endpoints is not None:
        try:
            endpoints = tuple(parse_endpoints_flag(args.endpoints))
        except SourceError as exc:
            raise ConfigError(str(exc)) from exc
    if args.k8s_namespace is not None:
        if not args.k8s_service:
            raise ConfigError("--k8s-namespace needs --k8s-service NAME")
        k8s = K8sSource(args.k8s_namespace, args.k8s_service, args.k8s_port_name)
    elif args.k8s_service or args.k8s_port_name:
        raise ConfigError("--k8s-service/--k8s-port-name need --k8s-namespace")
    return RouterConfig(
        host=args.host,
        port=args.port,
        slots_per_endpoint=args.slots_per_endpoint,
        endpoints=endpoints,
        endpoints_file=args.endpoints_file,
        k8s=k8s,
        hold_when_full=args.hold_when_full,
        max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout_s,
        max_body_bytes=args.max_body_bytes,
        dispatch=args.dispatch,
        health_interval_s=args.health_interval_s,
        health_timeout_s=args.health_timeout_s,
        unhealthy_backoff_s=args.unhealthy_backoff_s,
        connect_timeout_s=args.connect_timeout_s,
        upstream_timeout_s=args.upstream_timeout_s or None,
        upstream_client=args.upstream_client,
        file_poll_s=args.file_poll_s,
        log_level=log_level,
        allow_routes=allow_routes,
    )
