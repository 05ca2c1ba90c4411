"""``GET /router/status``: the document docs/ARCHITECTURE.md fixes, as a typed model.

FastAPI serves it with this model as the response model, so the router's OpenAPI schema
(``GET /openapi.json``) describes it, and readers (the bench, dashboards, people) can
validate what they get against the schema the router itself publishes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from router.dispatch import Dispatcher

if TYPE_CHECKING:
    from router.model_pools import ModelPools


class EndpointStatus(BaseModel):
    """One upstream replica as the router sees it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="base URL of the replica")
    state: Literal["ready", "draining", "unhealthy", "wrong_model"] = Field(
        description="ready: takes requests; draining: left discovery, finishing its requests; "
        "unhealthy: refused or timed out, backed off; wrong_model: serves another model than "
        "the pool's (a single-pool router: router/model_check.py)"
    )
    inflight: int = Field(ge=0, description="requests the router has on this replica now")
    cached_blocks: int | None = Field(
        default=None,
        ge=0,
        description="prefix-cache blocks the router's index says this replica holds "
        "(--dispatch prefix only)",
    )
    unique_blocks: int | None = Field(
        default=None,
        ge=0,
        description="of those, the blocks no other replica holds: the cache lost with it on "
        "a scale-down (--dispatch prefix only; inflight/control/scale_down.py)",
    )


class ModelStatus(BaseModel):
    """One model's pool (a router with several, :mod:`router.model_pools`)."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="the pool's model: requests with this `model` come here")
    inflight: int = Field(ge=0, description="this model's L, held requests included")
    queued: int = Field(ge=0, description="this model's requests held at the router")
    endpoints: list[EndpointStatus]


class RouterStatus(BaseModel):
    """L and where it is: ``inflight`` counts held requests too, ``queued`` only those.

    With several model pools the top-level figures are the sums over them, and ``models``
    has each pool's; it is null for a single-pool router."""

    model_config = ConfigDict(extra="forbid")

    inflight: int = Field(ge=0, description="L: requests in flight, held ones included")
    queued: int = Field(ge=0, description="requests held at the router (--hold-when-full)")
    slots_per_endpoint: int = Field(ge=1, description="vLLM's --max-num-seqs per replica")
    endpoints: list[EndpointStatus]
    models: list[ModelStatus] | None = Field(
        default=None, description="each model pool, when the router has several"
    )


def _endpoints(dispatcher: Dispatcher) -> list[EndpointStatus]:
    index = dispatcher.prefix
    if index is None:
        return [
            EndpointStatus(url=v.url, state=v.state, inflight=v.inflight)  # type: ignore[arg-type]
            for v in dispatcher.pool.snapshot()
        ]
    return [
        EndpointStatus(
            url=v.url,
            state=v.state,  # type: ignore[arg-type]
            inflight=v.inflight,
            cached_blocks=index.held(v.url),
            unique_blocks=index.unique_blocks(v.url),
        )
        for v in dispatcher.pool.snapshot()
    ]


def router_status(dispatcher: Dispatcher, models: ModelPools | None = None) -> RouterStatus:
    """The status now (pure: reads the dispatcher and its pool, or every model pool)."""
    if models is None:
        return RouterStatus(
            inflight=dispatcher.inflight,
            queued=dispatcher.queued,
            slots_per_endpoint=dispatcher.pool.slots,
            endpoints=_endpoints(dispatcher),
        )
    pools = [
        ModelStatus(
            model=name,
            inflight=pool.dispatcher.inflight,
            queued=pool.dispatcher.queued,
            endpoints=_endpoints(pool.dispatcher),
        )
        for name, pool in models.pools.items()
    ]
    return RouterStatus(
        inflight=sum(p.inflight for p in pools),
        queued=sum(p.queued for p in pools),
        slots_per_endpoint=dispatcher.pool.slots,
        endpoints=[e for p in pools for e in p.endpoints],
        models=pools,
    )
