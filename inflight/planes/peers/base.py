"""What every peer's control loop is given, and how it writes a decision down.

A loop is built with a :class:`PeerIO` (all I/O injected: the live stack passes its
Prometheus reader and supervisor, the simulator its virtual ones) and is driven with
``start(now_s)`` then ``tick(now_s) -> bool`` (True when a decision was made), the shape
of :class:`inflight.planes.autoscaler.Autoscaler`. Each tick is: read what is due
through ``io``, call the peer's pure decider (:mod:`inflight.control.peers`), keep the
state it returns, and :func:`apply` its :class:`~inflight.control.peers.base.Decision`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from inflight.control.peers.base import Decision, Replicas
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

    def replicas(self) -> Replicas:
        """The Deployment now, as the deciders take it."""
        return Replicas(desired=self.get_replicas(), ready=self.ready_replicas())


def apply(io: PeerIO, decision: Decision, name: str) -> None:
    """Write ``decision`` to ``decisions.jsonl`` (with the router's L and capacity now and
    ``name`` in front of the reason), log it, and ask for ``decision.desired`` replicas
    if that is a change."""
    current = io.get_replicas()
    obs = io.observe()
    capacity = obs.slots_per_endpoint * obs.ready
    saturation = (
        None if obs.inflight is None or capacity == 0 else round(obs.inflight / capacity, 4)
    )
    value = decision.value
    reason = f"{name}: {decision.reason}"
    io.record(
        DecisionRecord(
            t=io.wall_clock(),
            L=obs.inflight,
            capacity=capacity,
            saturation=saturation,
            value=None if value is None else round(value, 6),
            target=decision.target,
            desired=decision.desired,
            reason=reason,
        )
    )
    log.info(
        "scaling decision: L=%s capacity=%d value=%s target=%s replicas %d -> %d (%s)",
        obs.inflight,
        capacity,
        value,
        decision.target,
        current,
        decision.desired,
        reason,
    )
    if decision.desired != current:
        io.set_replicas(decision.desired)
