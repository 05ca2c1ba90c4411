"""The router's configuration: flags or ``INFLIGHT_ROUTER_*`` variables, validated once.

:class:`RouterSettings` is the one type: one field a flag (:mod:`inflight.config` does the
rest: flag > environment > default, errors naming the flag and its variable), frozen once
validated, and the values the wiring (:func:`router.cli.serve`) needs in another form than
the flag's are its properties (the endpoint URLs normalized, the Kubernetes source, the
parsed extra routes, ``0 = none`` as None).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, get_args

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from inflight import config, names, ready
from inflight.config import Cli, FieldError
from inflight.control.hold_order import (
    DEFAULT_MAX_LATE_S,
    MAX_LATE_S,
    HoldClassError,
    HoldPlan,
    plan_from_classes,
    single_plan,
)
from router.limits import DoorLimits
from router.priority import parse_route_priority
from router.routes import Route, RouteSpecError, parse_route
from router.tokens import DEFAULT_CHARS_PER_TOKEN, DEFAULT_MAX_PROMPT_ITEMS

LOG_LEVELS = ("debug", "info", "warning", "error")
# --upstream-client: router.upstream.build makes each.
UpstreamClient = Literal["httptools", "aiohttp"]
UPSTREAM_CLIENTS: tuple[str, ...] = get_args(UpstreamClient)

#: Kept for callers of the old name: a bad flag, variable or combination.
ConfigError = config.ConfigError


@dataclass(frozen=True)
class K8sSource:
    namespace: str
    service: str
    port_name: str | None


class RouterSettings(config.Settings):
    """``inflight router``'s configuration: flags or ``INFLIGHT_ROUTER_*`` variables, and
    what the wiring reads."""

    SUBCOMMAND = "router"
    REQUIRED_GROUPS = ("source",)

    host: Annotated[str, Cli("listen address (default 127.0.0.1)")] = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535), Cli("listen port (default 8000)")] = 8000
    ready_file: Annotated[Path | None, Cli(ready.HELP, metavar="READY_FILE")] = None
    slots_per_endpoint: Annotated[
        int,
        Field(ge=1),
        Cli(
            "requests one replica runs at once: vLLM's --max-num-seqs "
            f"(default {names.DEFAULT_SLOTS_PER_REPLICA})"
        ),
    ] = names.DEFAULT_SLOTS_PER_REPLICA
    endpoints: Annotated[
        str | None,
        Cli('static list: URL,URL or a JSON array ("" = zero endpoints)', group="source"),
    ] = None
    endpoints_file: Annotated[
        Path | None,
        Cli("JSON or YAML list of base URLs, re-read when it changes", group="source"),
    ] = None
    k8s_namespace: Annotated[
        str | None, Cli("watch EndpointSlices in this namespace", group="source")
    ] = None
    k8s_service: Annotated[str | None, Cli("Service whose EndpointSlices to watch")] = None
    k8s_port_name: Annotated[str | None, Cli("the EndpointSlice port to use, by name")] = None
    deletion_cost: Annotated[
        bool,
        Cli(
            "keep controller.kubernetes.io/pod-deletion-cost on the Service's pods (the "
            "scale-down rule's order: fewest in flight, least unique cache leave first; "
            "needs --k8s-namespace and RBAC patch on pods, router/deletion_cost.py)"
        ),
    ] = False
    deletion_cost_interval_s: Annotated[
        float,
        Field(gt=0),
        Cli("--deletion-cost: at most one PATCH a pod per this many seconds"),
    ] = 30.0
    model_endpoints_file: Annotated[
        list[str],
        NoDecode,
        Cli(
            "a model pool fed by its own endpoints file (repeatable: one a model; requests "
            "go to the pool of their body's model, router/model_pools.py)",
            metavar="MODEL=PATH",
            repeat=True,
            group="source",
        ),
    ] = Field(default_factory=list)
    discover_models: Annotated[
        bool,
        Cli(
            "a model pool a model: each endpoint joins the pool of the first base model its "
            "GET /v1/models lists (requests go to the pool of their body's model)"
        ),
    ] = False
    discover_interval_s: Annotated[
        float,
        Field(gt=0),
        Cli(
            "how often each endpoint's /v1/models is read (model pools; with one pool, to "
            "keep an endpoint serving another model out of rotation), and its /metrics "
            "(--discover-kv-tokens)"
        ),
    ] = 5.0
    hold_when_full: Annotated[
        bool,
        Cli("hold requests in a FIFO here when every slot is busy or no endpoint is ready"),
    ] = False
    max_queue: Annotated[int, Field(ge=0), Cli("held requests at most (503 beyond)")] = 1024
    queue_timeout_s: Annotated[float, Field(gt=0), Cli("longest hold before 504 (seconds)")] = 300.0
    hold_deadline_s: Annotated[
        float,
        Field(ge=0),
        Cli(
            "with --hold-when-full: a request held longer than this has missed its "
            "time-to-first-token target, so held requests still within it go first (oldest "
            "first), then the late ones (oldest first); set it to the TTFT target minus the "
            "prefill time. 0 = plain FIFO (default)"
        ),
    ] = 0.0
    max_late_s: Annotated[
        float,
        Field(ge=0),
        Cli(
            "the bound on lateness: a held request overtaken by another after its deadline "
            "(--hold-deadline-s or its class's) plus this many seconds is refused with 503 "
            f"and Retry-After (inflight/control/hold_order.py; {MAX_LATE_S:g} for sustained "
            "overload); 0 = no bound: the late wait up to --queue-timeout-s"
        ),
    ] = DEFAULT_MAX_LATE_S
    priority_class: Annotated[
        list[str],
        NoDecode,
        Cli(
            "a priority class, repeatable: requests whose priority (vLLM's: lower first; 0 if "
            "absent; from --priority-header, or with --client-priority the client's "
            "x-request-priority header or body priority) is at most MAX_PRIORITY (and above "
            "the previous class's) are held with their own deadline, classes served in "
            "priority order; DEADLINE_S seconds, 'fifo', or 'shed' (never held: 429 with "
            "Retry-After when no slot is free). Needs --hold-when-full (env: "
            "comma-separated or a JSON array)",
            metavar="NAME:MAX_PRIORITY:DEADLINE_S",
            repeat=True,
        ),
    ] = Field(default_factory=list)
    priority_header: Annotated[
        str | None,
        Cli(
            "a request header the deployment's gateway sets (overwriting the client's): its "
            "integer value is the request's priority for --priority-class (trusted)",
            metavar="NAME",
        ),
    ] = None
    client_priority: Annotated[
        bool,
        Cli(
            "trust the client's own x-request-priority header and body priority for "
            "--priority-class (off: a client cannot choose its class; every request without "
            "--priority-header's header has priority 0)"
        ),
    ] = False
    route_priority: Annotated[
        list[str],
        NoDecode,
        Cli(
            "a route's priority for --priority-class, repeatable: every request on ROUTE (the "
            "path, query string aside) has PRIORITY unless --priority-header's header gives "
            "one (trusted: the operator's; env: comma-separated or a JSON array)",
            metavar="ROUTE=PRIORITY",
            repeat=True,
        ),
    ] = Field(default_factory=list)
    kv_tokens: Annotated[
        int,
        Field(ge=0),
        Cli(
            "token admission: every endpoint's usable KV cache in tokens ((vLLM's "
            "num_gpu_blocks − 1, its null block) × block_size), taken as given, a demand not "
            "rounded to blocks; a request (prompt + output budget, router/tokens.py) goes to "
            "an endpoint only while its tokens in flight fit, the excess is held here. Needs "
            "--hold-when-full; 0 = slots only (default)"
        ),
    ] = 0
    discover_kv_tokens: Annotated[
        bool,
        Cli(
            "token admission with each endpoint's own KV capacity, read from its /metrics "
            "(vllm:cache_config_info: (num_gpu_blocks − 1) × block_size, demands charged in "
            "whole blocks) and its max_model_len from /v1/models, every "
            "--discover-interval-s; before an endpoint's is read, --kv-tokens (or slots "
            "only). Needs --hold-when-full"
        ),
    ] = False
    max_model_len: Annotated[
        int,
        Field(ge=0),
        Cli(
            "token admission: the engines' --max-model-len, so a request without max_tokens "
            "counts max_model_len − prompt output tokens; 0 = discovered "
            "(--discover-kv-tokens), else --kv-tokens"
        ),
    ] = 0
    chars_per_token: Annotated[
        float,
        Field(gt=0),
        Cli(
            "token admission: characters a token when estimating a text prompt "
            "(results/2026-12-02-token-estimate/ measures it)"
        ),
    ] = DEFAULT_CHARS_PER_TOKEN
    max_prompt_items: Annotated[
        int,
        Field(ge=1),
        Cli(
            "token admission and --dispatch prefix: 400 for a body with more prompt items than "
            "this (a batched completion's prompts; a chat's messages and content parts), "
            "counted before any is read"
        ),
    ] = DEFAULT_MAX_PROMPT_ITEMS
    max_body_bytes: Annotated[int, Field(ge=1), Cli("413 above this body size")] = 16 * 1024 * 1024
    # The limits at the door (router/uvicorn_protocol.py's DoorLimits; issue 39).
    max_url_bytes: Annotated[
        int, Field(ge=64), Cli("414 for a URL longer than this (nginx: 8 KiB)")
    ] = DoorLimits.max_url_bytes
    max_header_bytes: Annotated[
        int,
        Field(ge=1024),
        Cli("431 for a request head (request line and headers) larger than this (Envoy: 60 KiB)"),
    ] = DoorLimits.max_header_bytes
    max_headers: Annotated[
        int, Field(ge=1), Cli("431 for more request headers than this (Envoy: 100)")
    ] = DoorLimits.max_headers
    header_timeout_s: Annotated[
        float,
        Field(ge=0),
        Cli(
            "408 and close when a request head is not all in this long after its first byte "
            "(or the connection's opening; nginx's client_header_timeout); 0 = none"
        ),
    ] = DoorLimits.header_timeout_s or 0.0
    body_timeout_s: Annotated[
        float,
        Field(ge=0),
        Cli(
            "408 and close when a request body receives nothing for this long (nginx's "
            "client_body_timeout); 0 = none"
        ),
    ] = DoorLimits.body_timeout_s or 0.0
    max_connections: Annotated[
        int,
        Field(ge=0),
        Cli("client connections open at most: one past it is answered 503 and closed; 0 = none"),
    ] = DoorLimits.max_connections or 0
    write_stall_s: Annotated[
        float,
        Field(ge=0),
        Cli(
            "a client that reads nothing of its response for this long (its buffer full) is "
            "cut off, the upstream request cancelled and the slot given back (nginx's "
            "send_timeout); 0 = never"
        ),
    ] = DoorLimits.write_stall_s or 0.0
    max_held_bytes: Annotated[
        int,
        Field(ge=0),
        Cli(
            "bytes of request bodies waiting to be admitted (held for a slot) at most, beside "
            "--max-queue's count: 503 with Retry-After past it; 0 = none"
        ),
    ] = 256 * 1024 * 1024
    dispatch: Annotated[
        Literal["least-outstanding", "prefix", "random"],
        Cli(
            "endpoint choice: least-outstanding; prefix (the endpoint holding the longest "
            "cached prefix of the prompt, within --prefix-balance of the least loaded, "
            "router/prefix_index.py); random only as a benchmark baseline"
        ),
    ] = "least-outstanding"
    prefix_balance: Annotated[
        int,
        Field(ge=0),
        Cli(
            "with --dispatch prefix: requests in flight the cache's endpoint may have over "
            "the least loaded one before the load's choice wins"
        ),
    ] = 2
    prefix_block_size: Annotated[
        int,
        Field(ge=1),
        Cli(
            "with --dispatch prefix: tokens a prompt block is hashed in until an endpoint's "
            "own block size is read from its vllm:cache_config_info (--discover-kv-tokens)"
        ),
    ] = 16
    health_interval_s: Annotated[float, Field(gt=0), Cli("active health checks")] = 2.0
    health_timeout_s: Annotated[float, Field(gt=0), Cli("one health check")] = 2.0
    health_timeouts: Annotated[
        int,
        Field(ge=1),
        Cli(
            "health checks in a row that time out before an endpoint is unhealthy (a refusal "
            "or an error answer: at once; Kubernetes' readiness failureThreshold)"
        ),
    ] = 3
    unhealthy_backoff_s: Annotated[
        float,
        Field(ge=0),
        Cli("an endpoint that refused a connection gets no requests for this long"),
    ] = 2.0
    connect_timeout_s: Annotated[float, Field(gt=0), Cli("upstream connect")] = 5.0
    upstream_timeout_s: Annotated[
        float,
        Field(ge=0),
        Cli("overall upstream limit per request, 0 = none (default)"),
    ] = 0.0
    upstream_client: Annotated[
        UpstreamClient,
        Cli(
            "the /v1/* client: httptools (asyncio + llhttp, default, ~4x less CPU a "
            "request) or aiohttp (ClientSession; the benchmark's peer)"
        ),
    ] = "httptools"
    file_poll_s: Annotated[float, Field(gt=0), Cli("--endpoints-file poll period")] = 1.0
    allow_route: Annotated[
        list[str],
        NoDecode,
        Cli(
            "also forward this method and path (repeatable; a {name} segment matches one "
            "segment), e.g. POST:/v1/load_lora_adapter. Only vLLM's OpenAI routes are "
            "forwarded otherwise: other paths get 404, other methods 405 (env: "
            "comma-separated or a JSON array)",
            metavar="METHOD:/v1/PATH",
            repeat=True,
        ),
    ] = Field(default_factory=list)
    log_level: Annotated[str, Cli("|".join(LOG_LEVELS))] = "warning"

    _split_routes = field_validator("allow_route", mode="before")(config.split_list)
    _split_classes = field_validator("priority_class", mode="before")(config.split_list)
    _split_route_priority = field_validator("route_priority", mode="before")(config.split_list)

    @field_validator("route_priority")
    @classmethod
    def _route_priority(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for text in value:
            route, _ = parse_route_priority(text)
            if route in seen:
                raise ValueError(f"--route-priority names {route} twice")
            seen.add(route)
        return value

    _split_models = field_validator("model_endpoints_file", mode="before")(config.split_list)

    @field_validator("model_endpoints_file")
    @classmethod
    def _model_files(cls, value: list[str]) -> list[str]:
        seen: set[str] = set()
        for text in value:
            name, sep, path = text.partition("=")
            if not sep or not name.strip() or not path.strip():
                raise ValueError(f"expected MODEL=PATH, got {text!r}")
            if name.strip() in seen:
                raise ValueError(f"model {name.strip()!r} given twice")
            seen.add(name.strip())
        return value

    @property
    def model_files(self) -> dict[str, Path]:
        """``--model-endpoints-file`` by model, in the order given (the first is the
        default pool); empty: no configured pools."""
        out: dict[str, Path] = {}
        for text in self.model_endpoints_file:
            name, _, path = text.partition("=")
            out[name.strip()] = Path(path.strip())
        return out

    @property
    def model_pools(self) -> bool:
        """Several model pools (router/model_pools.py), configured or discovered."""
        return bool(self.model_endpoints_file) or self.discover_models

    @field_validator("allow_route")
    @classmethod
    def _routes(cls, value: list[str]) -> list[str]:
        for text in value:
            try:
                parse_route(text)
            except RouteSpecError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.lower()  # logging and uvicorn would fail on it at startup
        if level not in LOG_LEVELS:
            raise ValueError(f"must be {'|'.join(LOG_LEVELS)}, got {value!r}")
        return level

    @property
    def endpoint_urls(self) -> tuple[str, ...] | None:
        """``endpoints`` (``URL,URL`` or a JSON array) normalized, checked by the validator;
        None: another source."""
        if self.endpoints is None:
            return None
        from router.pool import normalize_url

        return tuple(normalize_url(str(u)) for u in config.split_list(self.endpoints))

    @property
    def k8s(self) -> K8sSource | None:
        """The Kubernetes source (``--k8s-namespace``), None: another source."""
        if self.k8s_namespace is None or not self.k8s_service:
            return None
        return K8sSource(self.k8s_namespace, self.k8s_service, self.k8s_port_name)

    @property
    def allow_routes(self) -> tuple[Route, ...]:
        """``--allow-route`` parsed (checked by the validator): forwarded beside
        :mod:`router.routes`' table."""
        return tuple(parse_route(text) for text in self.allow_route)

    def door_limits(self, count: Callable[[str], None]) -> DoorLimits:
        """The limits at the door (0 = none), counting refusals with ``count``."""
        return DoorLimits(
            max_url_bytes=self.max_url_bytes,
            max_header_bytes=self.max_header_bytes,
            max_headers=self.max_headers,
            header_timeout_s=self.header_timeout_s or None,
            body_timeout_s=self.body_timeout_s or None,
            max_connections=self.max_connections or None,
            write_stall_s=self.write_stall_s or None,
            count=count,
        )

    @property
    def route_priorities(self) -> dict[str, int]:
        """``--route-priority``'s routes and their priorities."""
        return dict(parse_route_priority(text) for text in self.route_priority)

    @property
    def priority_header_name(self) -> bytes | None:
        """``--priority-header`` as the proxy matches it (lowercase bytes); None: none."""
        if not self.priority_header:
            return None
        return self.priority_header.strip().lower().encode("latin-1")

    @property
    def upstream_total_timeout_s(self) -> float | None:
        """``--upstream-timeout-s``, None for 0: no overall limit (LLM requests can be long)."""
        return self.upstream_timeout_s or None

    @property
    def dispatch_hold_deadline_s(self) -> float | None:
        """``--hold-deadline-s`` as the dispatcher takes it: None for 0, plain FIFO."""
        return self.hold_deadline_s or None

    @property
    def dispatch_plan(self) -> HoldPlan:
        """The hold order the dispatcher runs (checked by the validator): the classes of
        ``--priority-class``, else one class with ``--hold-deadline-s``; the lateness
        bound ``--max-late-s`` (None for 0, and without a deadline, where FIFO needs none)."""
        max_late_s = self.max_late_s or None
        if self.priority_class:
            return plan_from_classes(self.priority_class, max_late_s)
        deadline_s = self.dispatch_hold_deadline_s
        return single_plan(deadline_s, max_late_s if deadline_s is not None else None)

    @property
    def token_admission(self) -> bool:
        """Dispatch admits on KV tokens as well as slots (router/dispatch.py)."""
        return bool(self.kv_tokens) or self.discover_kv_tokens

    @property
    def dispatch_kv_tokens(self) -> int | None:
        """``--kv-tokens`` as the dispatcher takes it: None for 0."""
        return self.kv_tokens or None

    @property
    def demand_max_model_len(self) -> int | None:
        """The ``max_model_len`` a request without max_tokens is costed with until one is
        discovered: ``--max-model-len``, else ``--kv-tokens`` (a sequence fits the cache)."""
        return self.max_model_len or self.kv_tokens or None

    @model_validator(mode="after")
    def _check(self) -> RouterSettings:
        named = self.named
        sources = [f for f in ("endpoints", "endpoints_file", "k8s_namespace")
                   if getattr(self, f) is not None]  # fmt: skip
        if self.model_endpoints_file:
            sources.append("model_endpoints_file")
            if self.discover_models:
                raise FieldError(
                    "discover_models",
                    f"finds the pools of one endpoint source; {named('model_endpoints_file')} "
                    "names them already",
                )
        if len(sources) > 1:  # a flag and a variable, or two variables
            raise FieldError(
                None, "give one endpoint source, not " + " and ".join(named(f) for f in sources)
            )
        try:
            _ = self.endpoint_urls
        except ValueError as exc:
            raise FieldError("endpoints", str(exc)) from None
        if self.k8s_namespace is not None:
            if not self.k8s_service:
                raise FieldError("k8s_service", "is needed with --k8s-namespace: NAME")
        elif self.k8s_service or self.k8s_port_name:
            raise FieldError(
                None,
                f"{named('k8s_service')}/{named('k8s_port_name')} need {named('k8s_namespace')}",
            )
        if self.deletion_cost and self.k8s_namespace is None:
            raise FieldError("deletion_cost", f"needs {named('k8s_namespace')}: the pods' API")
        for field in ("kv_tokens", "discover_kv_tokens"):
            if getattr(self, field) and not self.hold_when_full:
                raise FieldError(
                    field,
                    f"holds what does not fit in tokens, so it needs {named('hold_when_full')}",
                )
        if self.max_model_len and not self.token_admission:
            raise FieldError(
                "max_model_len",
                f"costs requests in tokens, so it needs {named('kv_tokens')} or "
                f"{named('discover_kv_tokens')}",
            )
        if self.hold_deadline_s and not self.hold_when_full:
            raise FieldError(
                "hold_deadline_s",
                f"orders held requests, so it needs {named('hold_when_full')}",
            )
        if self.priority_class:
            if not self.hold_when_full:
                raise FieldError(
                    "priority_class", f"orders held requests, so it needs {named('hold_when_full')}"
                )
            if self.hold_deadline_s:
                raise FieldError(
                    "hold_deadline_s",
                    f"each {named('priority_class')} has its own deadline; give one or the other",
                )
            try:
                _ = self.dispatch_plan
            except HoldClassError as exc:
                raise FieldError("priority_class", str(exc)) from None
        return self


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The router's flags (one a field of :class:`RouterSettings`) and --print-config."""
    config.add_flags(p, RouterSettings)


def settings_from_args(args: argparse.Namespace) -> RouterSettings:
    """Flags over ``INFLIGHT_ROUTER_*`` over defaults; ConfigError names flag and variable."""
    return config.load(RouterSettings, args)
