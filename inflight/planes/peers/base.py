"""What every peer's control loop is given, and how it writes a decision down.

A loop is built with a :class:`PeerIO` (all I/O injected: the live stack passes its
Prometheus reader and supervisor, the simulator its virtual ones) and is driven with
``start(now_s)`` then ``tick(now_s) -> bool`` (True when a decision was made), the shape
of :class:`inflight.planes.autoscaler.Autoscaler`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from inflight.planes.autoscaler import Observation
from inflight.planes.peers.signals import Reader
from inflight.statedir import DecisionRecord

log = logging.getLogger("inflight.up.peers")


class ControlLoop(Protocol):
    def start(self, now_s: float) -> None: ...
    def tick(self, now_s: float) -> bool: ...


@dataclass(frozen=True)
class PeerIO:
    """The loop's whole world. ``get_replicas`` is the count asked for (the Deployment's
    ``spec.replicas``), ``ready_replicas`` the ready ones (Knative's ReadyCount, Ray's
    running replicas)."""

    read: Reader
    get_replicas: Callable[[], int]
    ready_replicas: Callable[[], int]
    set_replicas: Callable[[int], None]
    observe: Callable[[], Observation]
    record: Callable[[DecisionRecord], None]
    wall_clock: Callable[[], float]


def apply(io: PeerIO, value: float | None, target: float | None, desired: int, reason: str) -> None:
    """Write the decision to ``decisions.jsonl`` (with the router's L and capacity now),
    log it, and ask for ``desired`` replicas if that is a change."""
    current = io.get_replicas()
    obs = io.observe()
    capacity = obs.slots_per_endpoint * obs.ready
    saturation = (
        None if obs.inflight is None or capacity == 0 else round(obs.inflight / capacity, 4)
    )
    io.record(
        DecisionRecord(
            t=io.wall_clock(),
            L=obs.inflight,
            capacity=capacity,
            saturation=saturation,
            value=None if value is None else round(value, 6),
            target=target,
            desired=desired,
            reason=reason,
        )
    )
    log.info(
        "scaling decision: L=%s capacity=%d value=%s target=%s replicas %d -> %d (%s)",
        obs.inflight,
        capacity,
        value,
        target,
        current,
        desired,
        reason,
    )
    if desired != current:
        io.set_replicas(desired)
