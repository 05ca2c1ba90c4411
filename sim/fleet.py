"""The replicas in virtual time: each an ``emulator.engine.Engine``, started, made ready,
drained and stopped as ``inflight up``'s supervisor does it.

A replica's ``/health`` answers 200 once ``startup_s`` has passed since it started (the
emulator's rule), so the supervisor's probe sees it ready then and publishes it to the
router's endpoint file. On a scale-down, starting replicas are cancelled first (newest
first), then ready ones drain (newest first): out of the endpoint file, stopped once the
router holds nothing on them. Replica-seconds count every replica that exists: starting,
ready, draining.

The phase decisions will come from ``orchestrator.lifecycle`` (pure ``reconcile``) once it
is on main; until then :meth:`Fleet._reconcile` holds the supervisor's current rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from emulator.engine import Engine
from emulator.profile import Profile
from router.pool import Endpoint
from sim.events import EventQueue
from sim.router import SimRouter

STARTING, READY, DRAINING = "starting", "ready", "draining"


@dataclass(eq=False)
class SimReplica:
    id: int
    url: str
    engine: Engine
    phase: str
    started_s: float
    ready_s: float | None = None
    wake_token: int = 0  # the replica's current wake-up event (older ones are void)
    wake_s: float | None = None


@dataclass
class Fleet:
    """The replicas and the supervisor's ``desired`` count."""

    profile: Profile
    events: EventQueue
    router: SimRouter
    on_change: Callable[[], None]
    desired: int = 0
    replicas: dict[int, SimReplica] = field(default_factory=dict)
    by_url: dict[str, SimReplica] = field(default_factory=dict)
    _next_id: int = 0

    # --- counts ------------------------------------------------------------------------
    def count(self, *phases: str) -> int:
        return sum(r.phase in phases for r in self.replicas.values())

    @property
    def live(self) -> int:
        return len(self.replicas)

    @property
    def ready(self) -> int:
        return self.count(READY)

    # --- the supervisor ------------------------------------------------------------------
    def start_ready(self, n: int) -> None:
        """``inflight up`` waits for its first replicas before the load begins."""
        self.desired = n
        for _ in range(n):
            r = self._new(self.events.now_s)
            r.phase, r.ready_s = READY, self.events.now_s
        self._publish()

    def set_desired(self, n: int) -> None:
        """The autoscaler's ``set_replicas``."""
        self.desired = n
        self._reconcile()

    def _new(self, now_s: float) -> SimReplica:
        rid = self._next_id
        self._next_id += 1
        r = SimReplica(rid, f"http://replica-{rid}:8000", Engine(self.profile), STARTING, now_s)
        self.replicas[rid] = r
        self.by_url[r.url] = r
        return r

    def _reconcile(self) -> None:
        now_s = self.events.now_s
        active = [r for r in self.replicas.values() if r.phase in (STARTING, READY)]
        surplus = len(active) - self.desired
        if surplus > 0:
            starting = sorted((r for r in active if r.phase == STARTING), key=_age, reverse=True)
            ready = sorted((r for r in active if r.phase == READY), key=_age, reverse=True)
            for r in (starting + ready)[:surplus]:
                if r.phase == STARTING:
                    self._gone(r)
                else:
                    r.phase = DRAINING
            self._publish()
            for r in ready:
                if r.phase == DRAINING:
                    self.check_drained(r)
        for _ in range(-surplus):
            r = self._new(now_s)
            self.events.at(now_s + self.profile.startup_wall_s, partial(self._health_ok, r))
        self.on_change()

    def _health_ok(self, r: SimReplica) -> None:
        if r.phase != STARTING or self.replicas.get(r.id) is not r:
            return
        r.phase, r.ready_s = READY, self.events.now_s
        self._publish()
        self.on_change()

    def _publish(self) -> None:
        self.router.set_endpoints([r.url for r in self.replicas.values() if r.phase == READY])

    def check_drained(self, r: SimReplica) -> None:
        """A draining replica stops once the router holds nothing on it."""
        if r.phase == DRAINING and self.router.pool.get(r.url) is None:
            self._gone(r)
            self.on_change()

    def replica_of(self, ep: Endpoint) -> SimReplica:
        return self.by_url[ep.url]

    def _gone(self, r: SimReplica) -> None:
        del self.replicas[r.id]
        del self.by_url[r.url]
        r.wake_token += 1


def _age(r: SimReplica) -> tuple[float, int]:
    return (r.started_s, r.id)
