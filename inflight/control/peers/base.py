"""What every peer's decider is given and what it returns (values only).

A peer reads a :class:`Signal` (the loop in :mod:`inflight.planes.peers` turns it into a
Prometheus query, or the simulator into a read of its scrapes), sees the Deployment as
:class:`Replicas`, and answers with a :class:`Decision`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Signal(Enum):
    """A quantity a peer reads. The value is a short name used in logs and records."""

    #: L at the router: requests in flight, held ones included (Knative's concurrency,
    #: Ray's ongoing requests).
    INFLIGHT = "inflight"
    #: Requests held at the router, not dispatched (llm-d's flow-control queue size).
    ROUTER_QUEUED = "router_queued"
    #: Requests waiting inside the replicas (vLLM's own queue; production-stack's trigger).
    VLLM_WAITING = "vllm_waiting"
    #: Arrivals per second at the router over the rate window (wall requests/s).
    ARRIVAL_RATE = "arrival_rate"


@dataclass(frozen=True)
class Replicas:
    """The Deployment as a peer sees it: ``desired`` is the count asked for (its
    ``spec.replicas``; Ray's ``target_num_replicas``), ``ready`` the ready ones (Knative's
    ReadyCount, Ray's running replicas, ``current_num_replicas``)."""

    desired: int
    ready: int


@dataclass(frozen=True)
class Decision:
    """One decision: ask for ``desired`` replicas (``Replicas.desired`` when nothing
    changes), having read ``value`` against ``target`` (both ``None`` when there was
    nothing to decide on: "no data" is a decision too, written down as one), because of
    ``reason`` (without the peer's name, which the loop puts in front)."""

    desired: int
    value: float | None
    target: float | None
    reason: str
