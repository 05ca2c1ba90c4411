"""``inflight router``: the one wiring site of the router.

Loads :class:`router.config.RouterSettings` (flags over ``INFLIGHT_ROUTER_*`` variables
over defaults, validated once), builds the pool, dispatcher, registry, discovery source and
health checker, and serves the app with uvicorn. Heavy imports stay inside :func:`run`
so ``inflight --help`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from inflight import config as settings_io
from inflight import ready
from router.config import ConfigError, RouterSettings, add_arguments


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "router",
        help="least-outstanding router for vLLM with exact in-flight accounting",
        description=(
            "An OpenAI-compatible reverse proxy for /v1/* that sends each request to the "
            "ready replica with the fewest requests in flight and exports L (requests in "
            "flight) at /metrics and /router/status. Every flag can also be set as "
            "INFLIGHT_ROUTER_<FLAG> (e.g. INFLIGHT_ROUTER_SLOTS_PER_ENDPOINT=4); a flag wins."
        ),
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        settings = settings_io.load(RouterSettings, args)
    except ConfigError as exc:
        return settings_io.report(RouterSettings, exc)
    if settings_io.wants_print(args):
        return settings_io.print_config(settings)
    return serve(settings)


def serve(config: RouterSettings) -> int:
    """The wiring: reads ``config`` (the validated settings) only."""
    import functools
    import gc

    import uvicorn
    from prometheus_client import CollectorRegistry

    from inflight import logs
    from router import endpoint_lists, health
    from router.app import Background, RouterApp, UpstreamSettings
    from router.dispatch import Dispatcher
    from router.pool import Pool
    from router.priority import PrioritySource
    from router.tokens import TokenDemand

    logs.configure(config.log_level)
    added_reads = None
    if config.discover_kv_tokens:  # an endpoint's capacity is read as it is added
        from router.kv_discovery import AddedReads

        added_reads = AddedReads()

    def make_dispatcher() -> Dispatcher:
        """A pool's dispatcher (the router's, or each model pool's)."""
        prefix = config.dispatch == "prefix"
        made = Dispatcher(
            Pool(
                config.slots_per_endpoint,
                dispatch="least-outstanding" if prefix else config.dispatch,
            ),
            hold_when_full=config.hold_when_full,
            max_queue=config.max_queue,
            queue_timeout_s=config.queue_timeout_s,
            plan=config.dispatch_plan,
            kv_tokens=config.dispatch_kv_tokens,
            discover_kv_tokens=config.discover_kv_tokens,
            demand=(
                TokenDemand(
                    config.demand_max_model_len, config.chars_per_token, config.max_prompt_items
                )
                if config.token_admission
                else None
            ),
            prefix_balance=config.prefix_balance if prefix else None,
            prefix_block_size=config.prefix_block_size,
            chars_per_token=config.chars_per_token,
            max_prompt_items=config.max_prompt_items,
        )
        if config.max_held_bytes:
            made.max_held_bytes = config.max_held_bytes
        if added_reads is not None:
            added_reads.watch(made)
        return made

    dispatcher = make_dispatcher()
    background: list[Background] = []
    endpoint_urls = config.endpoint_urls
    k8s_source = config.k8s
    models = None
    sink: endpoint_lists.Sink = dispatcher
    if config.model_pools:  # a pool a model (router.model_pools); ``dispatcher`` stays unused
        from router import model_pools

        pools = model_pools.ModelPools(make_dispatcher, discover=config.discover_models)
        models = sink = pools
        for name, path in config.model_files.items():
            try:
                pools.set_endpoints(name, endpoint_lists.read_endpoints_file(path))
            except endpoint_lists.SourceError as exc:
                print(f"inflight router: error: {exc}", file=sys.stderr)
                return 2
            sink_of = endpoint_lists.ModelSink(pools, name)
            background.append(
                functools.partial(endpoint_lists.watch_file_job, sink_of, path, config.file_poll_s)
            )
        background.append(
            lambda get_session: model_pools.run_discovery(
                pools,
                get_session,
                interval_s=config.discover_interval_s,
                timeout_s=config.health_timeout_s,
            )
        )
    else:  # one pool: its endpoints must serve one model (router.model_check)
        from router import model_check

        check = model_check.ModelCheck(dispatcher.pool)
        background.append(
            lambda get_session: model_check.run_model_check(
                check,
                get_session,
                interval_s=config.discover_interval_s,
                timeout_s=config.health_timeout_s,
            )
        )
    if endpoint_urls is not None:
        endpoint_lists.apply(sink, endpoint_urls)
    elif config.endpoints_file is not None:
        path = config.endpoints_file
        try:
            endpoint_lists.apply(sink, endpoint_lists.read_endpoints_file(path))
        except endpoint_lists.SourceError as exc:
            print(f"inflight router: error: {exc}", file=sys.stderr)
            return 2
        background.append(
            functools.partial(endpoint_lists.watch_file_job, sink, path, config.file_poll_s)
        )
    elif k8s_source is not None:
        from router import k8s

        try:
            k8s.load_config()
        except k8s.K8sConfigError as exc:
            print(f"inflight router: error: {exc}", file=sys.stderr)
            return 2
        background.append(functools.partial(k8s.watch_service_job, sink, k8s_source))
        if config.deletion_cost:
            from router import deletion_cost

            background.append(
                functools.partial(
                    deletion_cost.deletion_cost_job,
                    (lambda: [dispatcher]) if models is None else models.dispatchers,
                    k8s_source,
                    config.deletion_cost_interval_s,
                )
            )
    background.append(
        lambda get_session: health.run_health_checks(
            dispatcher if models is None else models.dispatchers,
            get_session,
            interval_s=config.health_interval_s,
            timeout_s=config.health_timeout_s,
            backoff_s=config.unhealthy_backoff_s,
            timeouts=config.health_timeouts,
        )
    )
    if config.discover_kv_tokens:
        from router.kv_discovery import run_kv_discovery

        background.append(
            lambda get_session: run_kv_discovery(
                dispatcher if models is None else models.dispatchers,
                get_session,
                interval_s=config.discover_interval_s,
                timeout_s=config.health_timeout_s,
                fixed_len=bool(config.max_model_len),
                added=added_reads,
            )
        )
    app = RouterApp(
        dispatcher,
        CollectorRegistry(),
        max_body_bytes=config.max_body_bytes,
        unhealthy_backoff_s=config.unhealthy_backoff_s,
        upstream=UpstreamSettings(
            connect_timeout_s=config.connect_timeout_s,
            total_timeout_s=config.upstream_total_timeout_s,
            client=config.upstream_client,
        ),
        background=background,
        allow_routes=config.allow_routes,
        models=models,
        limits=config.door_limits,
        priority=PrioritySource(
            config.priority_header_name, config.client_priority, config.route_priorities
        ),
    )
    from router.uvicorn_protocol import HookedHttpToolsProtocol

    try:
        # Bound and listening here (--port 0: the OS picks), so the port can be reported
        # before uvicorn runs; connections queue until it accepts them.
        sock = ready.listen(config.host, config.port)
    except OSError as exc:
        print(f"inflight router: error: --port: {exc}", file=sys.stderr)
        return 1
    port = ready.bound_port(sock)
    # The garbage collector (issue 27). Everything built so far (the imports: FastAPI,
    # pydantic, uvicorn, aiohttp; the app) lives as long as the process: frozen out of its
    # sight, so a full collection scans what the serving loop made (~3,000 objects, not
    # ~88,000: 3.6 ms, not 93 ms, on this machine). And the young generation is collected
    # every 10,000 net allocations rather than 700: the requests in flight make no cycles
    # (their objects go by reference count), yet their allocations started a young
    # collection every ~100 requests, each scanning the objects of every request then in
    # flight; 10,000 is a few MB of cyclic garbage at most between collections.
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, *gc.get_threshold()[1:])
    if config.ready_file is not None:
        ready.write(config.ready_file, {"http": port})
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            http=HookedHttpToolsProtocol,  # disconnects reach the proxy without a task each
            # RouterApp's __call__ returns the chosen app's awaitable (not a coroutine
            # function itself), which uvicorn's detection would take for ASGI 2.
            interface="asgi3",
            host=config.host,
            port=port,
            log_level=config.log_level,
            access_log=False,
            lifespan="on",
            # Clients (SDKs, the bench) reuse connections; keep them a little longer than
            # uvicorn's 5 s default so an idle pause between load levels does not reconnect.
            timeout_keep_alive=30,
            # The upstream's own Date/Server headers pass through; uvicorn's would
            # duplicate them.
            server_header=False,
            date_header=False,
            proxy_headers=False,  # X-Forwarded-* are not trusted; the middleware costs µs
        )
    )
    server.run(sockets=[sock])
    if not server.started:  # start-up failed (uvicorn logged why); as uvicorn.run exits
        return 3
    return 0
