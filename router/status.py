"""``GET /router/status``: the document docs/ARCHITECTURE.md fixes, as a typed model.

FastAPI serves it with this model as the response model, so the router's OpenAPI schema
(``GET /openapi.json``) describes it, and readers (the bench, dashboards, people) can
validate what they get against the schema the router itself publishes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from router.dispatch import Dispatcher


class EndpointStatus(BaseModel):
    """One upstream replica as the router sees it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="base URL of the replica")
    state: Literal["ready", "draining", "unhealthy"] = Field(
        description="ready: takes requests; draining: left discovery, finishing its requests; "
        "unhealthy: refused or timed out, backed off"
    )
    inflight: int = Field(ge=0, description="requests the router has on this replica now")


class RouterStatus(BaseModel):
    """L and where it is: ``inflight`` counts held requests too, ``queued`` only those."""

    model_config = ConfigDict(extra="forbid")

    inflight: int = Field(ge=0, description="L: requests in flight, held ones included")
    queued: int = Field(ge=0, description="requests held at the router (--hold-when-full)")
    slots_per_endpoint: int = Field(ge=1, description="vLLM's --max-num-seqs per replica")
    endpoints: list[EndpointStatus]


def router_status(dispatcher: Dispatcher) -> RouterStatus:
    """The status now (pure: reads the dispatcher and its pool)."""
    return RouterStatus(
        inflight=dispatcher.inflight,
        queued=dispatcher.queued,
        slots_per_endpoint=dispatcher.pool.slots,
        endpoints=[
            EndpointStatus(url=v.url, state=v.state, inflight=v.inflight)  # type: ignore[arg-type]
            for v in dispatcher.pool.snapshot()
        ],
    )
