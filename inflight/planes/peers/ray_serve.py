"""Ray Serve's controller for one deployment: the handle's and the controller's timers
around the pure policy :mod:`inflight.control.peers.ray_serve` (where the citations are).

As Ray splits ``autoscaling_policy.py`` (the rule: a context in, ``(replicas, state)``
out) from ``_private/autoscaling_state.py`` (the shell that gathers the metrics and keeps
the policy state), :class:`RayLoop` only keeps time and does the I/O: it reads L through
``io`` every ``metrics_record_interval_s``, pushes every ``metrics_push_interval_s``,
and every ``control_loop_interval_s`` calls
:func:`~inflight.control.peers.ray_serve.controller_pass` and applies the decision.
"""

from __future__ import annotations

import logging

from inflight.control.peers import ray_serve
from inflight.control.peers.base import Signal
from inflight.control.peers.ray_serve import RaySpec, RayState
from inflight.control.periodic import next_due
from inflight.planes.peers.base import PeerIO, apply
from inflight.planes.scaler_client import ScalerUnavailable

log = logging.getLogger("inflight.up.peers.ray")


class RayLoop:
    """Ray Serve's controller for one deployment: records L, pushes it, decides every
    ``control_loop_interval_s`` (or at each :meth:`tick` if called less often; the delay
    logic is in time). Writes a decision down at each push (once per push period, so a
    steady deployment still leaves a trace) and at each change."""

    def __init__(self, spec: RaySpec, io: PeerIO, name: str = "ray") -> None:
        self.spec = spec
        self.io = io
        self.name = name
        self.state = RayState()
        self.next_record_s = 0.0
        self.next_push_s = 0.0
        self.next_decide_s = 0.0
        self.started = False

    def start(self, now_s: float) -> None:
        self.started = True
        self.next_record_s = now_s
        self.next_push_s = now_s + self.spec.metrics_push_interval_s
        self.next_decide_s = now_s

    def tick(self, now_s: float) -> bool:
        if not self.started:
            self.start(now_s)
        spec = self.spec
        if now_s >= self.next_record_s:
            self.next_record_s = next_due(self.next_record_s, spec.metrics_record_interval_s, now_s)
            try:
                value = self.io.read(Signal.INFLIGHT)
            except ScalerUnavailable as exc:
                log.warning("%s: metrics record failed: %s", self.name, exc)
            else:
                self.state = ray_serve.record(spec, self.state, value, now_s)
        pushed = False
        if now_s >= self.next_push_s:
            self.next_push_s = next_due(self.next_push_s, spec.metrics_push_interval_s, now_s)
            self.state = ray_serve.push(spec, self.state, now_s)
            pushed = True
        if now_s < self.next_decide_s:
            return False
        self.next_decide_s = next_due(self.next_decide_s, spec.control_loop_interval_s, now_s)
        replicas = self.io.replicas()
        decision, self.state = ray_serve.controller_pass(spec, self.state, replicas, now_s)
        if decision.desired == replicas.desired and not pushed:
            return False
        apply(self.io, decision, self.name)
        return True
