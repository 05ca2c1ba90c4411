"""A replica's life, as pure decisions: start-up, health, drain, stop, and the back-off.

The supervisor (:mod:`inflight.up.supervisor`) is the imperative shell: each tick it asks
:func:`needed` which probes each replica wants, runs them (process alive, the ready file's
port, ``/health``, the ports the group listens on, whether the router still holds requests
on it), calls :func:`reconcile`, and performs the returned actions (signal a group, rewrite
the endpoint file, reap a process) and starts the number of replicas it says. The simulator
drives the same functions with virtual probes (healthy once start-up has passed; drained
when its router holds nothing on the replica). No I/O, no clock, no logging here: ``now_s``
is passed in, so tests step time; the shell logs from the actions.

A replica moves STARTING → READY → DRAINING → STOPPING → GONE:

* STARTING: the process runs, it is not in the endpoint file. A reporting replica (port 0)
  first reports its port (ready file); then ``/health`` 200 *and* its group listening on
  that port make it READY. It fails if it exits, reports a bad file, finds its port taken
  by another process, or is not healthy within ``startup_timeout_s``.
* READY: in the endpoint file; ``/health`` every ``health_interval_s``;
  ``unhealthy_after`` failed checks in a row, or an exit, fail it.
* DRAINING (scale-down only): out of the endpoint file; stops once the router holds nothing
  on it, or at ``drain_timeout_s``.
* STOPPING: SIGTERM sent to its group; SIGKILL once ``grace_s`` has passed; GONE when no
  process of its group lives (a worker orphaned by a crashed leader included).

A failed replica goes straight to STOPPING (out of the endpoint file at once) and counts as
a crash: replacements wait ``backoff_base_s × 2^(crashes-1)`` (at most ``backoff_max_s``);
a replica that became READY after the last crash and stays READY for ``stable_s`` resets
the count. Worked example (base 0.5 s, max 30 s):
crashes 1, 2, 3 … delay 0.5, 1, 2, 4, 8, 16, 30, 30 s.

On a scale-down (:func:`scale_plan`), starting replicas are cancelled first, newest first
(they serve nothing yet), then ready ones are drained in
:func:`inflight.control.scale_down.leave_order`: fewest requests in flight, then least cache
no other replica holds (the shell's ``warmth``, read from the router), then newest first.

Driving it (the shell or the simulator), each tick::

    probes = {r.id: run(needed(r, now_s, config)) for r in replicas}
    out = reconcile(replicas, probes, backoff, desired, now_s, config)
    perform(out.actions); replicas, backoff = out.replicas, out.backoff
    replicas += [new_replica(next_id(), port, now_s) for _ in range(out.start)]

A virtual replica answers ``alive=True``, ``healthy=now_s - started_at_s >= startup_s``,
``drained=`` "its router holds nothing on it", ``group_alive=False`` once terminated (it
exits at SIGTERM), and leaves ``listening`` and the ready file unprobed (None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from inflight.control.periodic import next_due
from inflight.control.scale_down import COLD, Warmth, leave_order


class ReplicaPhase(Enum):
    STARTING = "starting"  # process up, not healthy yet: not in the endpoint file
    READY = "ready"  # in the endpoint file
    DRAINING = "draining"  # out of the endpoint file, waiting for the router to let go
    STOPPING = "stopping"  # SIGTERM sent to the group; SIGKILL at the deadline
    GONE = "gone"  # exited and reaped: the shell forgets it


#: Phases of a replica that exists (what replica-seconds integrate).
LIVE_PHASES = frozenset(
    {ReplicaPhase.STARTING, ReplicaPhase.READY, ReplicaPhase.DRAINING, ReplicaPhase.STOPPING}
)
#: Phases counted towards ``desired``.
ACTIVE_PHASES = frozenset({ReplicaPhase.STARTING, ReplicaPhase.READY})


class ProbeKind(Enum):
    ALIVE = "alive"  # is the replica's process (its group's leader) still running?
    GROUP_ALIVE = "group_alive"  # does any process of its group still live?
    REPORT = "report"  # the port a reporting replica wrote in its ready file
    HEALTH = "health"  # GET /health on its port answered 200?
    LISTENING = "listening"  # the ports its process group listens on
    DRAINED = "drained"  # the router holds no request on it any more?


@dataclass(frozen=True)
class LifecycleConfig:
    """Timing of the lifecycle's decisions, in seconds (real seconds live, seed seconds in
    the simulator)."""

    health_interval_s: float = 1.0  # how often a READY replica's /health is checked
    unhealthy_after: int = 3  # consecutive failed checks before a ready replica is replaced
    startup_timeout_s: float = 900.0  # a real vLLM loading a big model takes minutes
    drain_timeout_s: float = 120.0
    grace_s: float = 10.0  # SIGTERM -> SIGKILL
    backoff_base_s: float = 0.5  # first restart delay after a crash; doubles per crash
    backoff_max_s: float = 30.0
    stable_s: float = 10.0  # ready this long: the crash counter resets

    def __post_init__(self) -> None:
        for name in (
            "health_interval_s",
            "startup_timeout_s",
            "drain_timeout_s",
            "backoff_base_s",
            "backoff_max_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"supervisor {name} must be > 0, got {getattr(self, name)}")
        if self.grace_s < 0 or self.unhealthy_after < 1:
            raise ValueError("supervisor grace_s must be >= 0 and unhealthy_after >= 1")
        if self.stable_s < 0:
            raise ValueError(f"supervisor stable_s must be >= 0, got {self.stable_s}")

    def backoff_s(self, crashes: int) -> float:
        """The delay before replacing after crash number ``crashes`` (1: the first)."""
        return min(self.backoff_base_s * 2.0 ** max(0, crashes - 1), self.backoff_max_s)


@dataclass(frozen=True)
class ReplicaState:
    """Where one replica is in its life. ``port`` is 0 until a reporting replica reports."""

    id: int
    phase: ReplicaPhase
    port: int
    started_at_s: float
    ready_at_s: float | None = None
    deadline_s: float = 0.0  # STARTING: unused; DRAINING: drain deadline; STOPPING: SIGKILL
    next_health_s: float = 0.0
    health_failures: int = 0
    crashed: bool = False  # stopping because it failed, not because we scaled down
    killed: bool = False  # SIGKILL sent


def new_replica(replica_id: int, port: int, now_s: float) -> ReplicaState:
    """A replica the shell has just started (``port`` 0: it will report its port)."""
    return ReplicaState(replica_id, ReplicaPhase.STARTING, port, started_at_s=now_s)


@dataclass(frozen=True)
class Probes:
    """What the shell observed of one replica this tick; None: not probed.

    ``alive``: the replica's process runs (a worker it left behind does not count).
    ``group_alive``: some process of its group lives (a stopped replica is GONE only when
    none does). ``reported_port``/``report_error``: a reporting replica's ready file (a
    port, or why the file is unusable). ``healthy``: ``/health`` on the replica's port (the
    one just reported, if any). ``listening``: the ports its group listens on (asked only
    after a healthy answer). ``drained``: the router holds no request on it.
    """

    alive: bool | None = None
    group_alive: bool | None = None
    reported_port: int | None = None
    report_error: str | None = None
    healthy: bool | None = None
    listening: frozenset[int] | None = None
    drained: bool | None = None


# --- actions: what the shell must do (and may log) --------------------------------------------
@dataclass(frozen=True)
class Terminate:
    """SIGTERM to the replica's group (``why``: failed, cancelled, drained, drain timeout)."""

    replica_id: int
    why: str


@dataclass(frozen=True)
class Kill:
    """SIGKILL to the replica's group: it outlived ``grace_s`` after SIGTERM."""

    replica_id: int


@dataclass(frozen=True)
class Remove:
    """The process has exited: reap it and forget the replica."""

    replica_id: int


@dataclass(frozen=True)
class Publish:
    """The set of READY replicas changed: rewrite the endpoint file now."""


@dataclass(frozen=True)
class Failed:
    """The replica failed; a replacement waits ``delay_s`` (filled in by :func:`reconcile`)."""

    replica_id: int
    why: str
    crashes: int = 0
    delay_s: float = 0.0


@dataclass(frozen=True)
class Ready:
    """The replica passed its health gate and joins the endpoint file."""

    replica_id: int
    after_s: float  # since it was started


@dataclass(frozen=True)
class Reported:
    """A reporting replica wrote its port."""

    replica_id: int
    port: int


@dataclass(frozen=True)
class Draining:
    """The replica left the endpoint file for a scale-down; it stops once drained."""

    replica_id: int


Action = Terminate | Kill | Remove | Publish | Failed | Ready | Reported | Draining


# --- one replica --------------------------------------------------------------------------------
def needed(state: ReplicaState, now_s: float, config: LifecycleConfig) -> frozenset[ProbeKind]:
    """The probes :func:`step` needs for this replica now (the shell runs only these)."""
    phase = state.phase
    if phase is ReplicaPhase.STARTING:
        kinds = {ProbeKind.ALIVE, ProbeKind.HEALTH, ProbeKind.LISTENING}
        if state.port == 0:
            kinds.add(ProbeKind.REPORT)
        return frozenset(kinds)
    if phase is ReplicaPhase.READY:
        if now_s >= state.next_health_s:
            return frozenset({ProbeKind.ALIVE, ProbeKind.HEALTH})
        return frozenset({ProbeKind.ALIVE})
    if phase is ReplicaPhase.DRAINING:
        if now_s >= state.deadline_s:
            return frozenset({ProbeKind.ALIVE})
        return frozenset({ProbeKind.ALIVE, ProbeKind.DRAINED})
    if phase is ReplicaPhase.STOPPING:
        return frozenset({ProbeKind.GROUP_ALIVE})
    return frozenset()


def step(
    state: ReplicaState, probes: Probes, now_s: float, config: LifecycleConfig
) -> tuple[ReplicaState, tuple[Action, ...]]:
    """One tick of one replica: its new state and what the shell must do.

    A :class:`Failed` action comes with a :class:`Terminate`; :func:`reconcile` counts it
    as a crash and fills in the back-off.
    """
    phase = state.phase
    if phase is ReplicaPhase.STARTING:
        return _step_starting(state, probes, now_s, config)
    if phase is ReplicaPhase.READY:
        return _step_ready(state, probes, now_s, config)
    if phase is ReplicaPhase.DRAINING:
        if probes.alive is False:
            return _terminate(state, now_s, config, "exited while draining")
        if now_s >= state.deadline_s:
            return _terminate(state, now_s, config, "drain timeout")
        if probes.drained:
            return _terminate(state, now_s, config, "drained")
        return state, ()
    if phase is ReplicaPhase.STOPPING:
        if probes.group_alive is False:
            return replace(state, phase=ReplicaPhase.GONE), (Remove(state.id),)
        if now_s >= state.deadline_s and not state.killed:
            return replace(state, killed=True), (Kill(state.id),)
        return state, ()
    return state, ()


def _step_starting(
    state: ReplicaState, probes: Probes, now_s: float, config: LifecycleConfig
) -> tuple[ReplicaState, tuple[Action, ...]]:
    if probes.alive is False:
        return _fail(state, now_s, config, "exited")
    if probes.report_error is not None:
        return _fail(state, now_s, config, probes.report_error)
    actions: tuple[Action, ...] = ()
    if state.port == 0 and probes.reported_port is not None:
        state = replace(state, port=probes.reported_port)
        actions = (Reported(state.id, state.port),)
    timed_out = now_s - state.started_at_s > config.startup_timeout_s
    if state.port == 0:
        if timed_out:
            return _fail(state, now_s, config, "no port reported before the start-up timeout")
        return state, actions
    if probes.healthy:
        if probes.listening is not None and state.port not in probes.listening:
            why = (
                f"port taken: it answered /health on {state.port} but its group listens on "
                f"{sorted(probes.listening)}"
            )
            state, failed = _fail(state, now_s, config, why)
            return state, actions + failed
        ready = replace(
            state,
            phase=ReplicaPhase.READY,
            ready_at_s=now_s,
            next_health_s=now_s + config.health_interval_s,
        )
        return ready, (*actions, Ready(state.id, now_s - state.started_at_s), Publish())
    if timed_out:
        state, failed = _fail(state, now_s, config, "start-up timeout")
        return state, actions + failed
    return state, actions


def _step_ready(
    state: ReplicaState, probes: Probes, now_s: float, config: LifecycleConfig
) -> tuple[ReplicaState, tuple[Action, ...]]:
    if probes.alive is False:
        return _fail(state, now_s, config, "exited")
    if now_s < state.next_health_s or probes.healthy is None:
        return state, ()
    # The kubelet probes on a Go ticker: the next check is on the period's phase, not a
    # period after this (possibly late) tick (inflight.control.periodic).
    state = replace(
        state, next_health_s=next_due(state.next_health_s, config.health_interval_s, now_s)
    )
    if probes.healthy:
        return replace(state, health_failures=0), ()
    failures = state.health_failures + 1
    state = replace(state, health_failures=failures)
    if failures >= config.unhealthy_after:
        return _fail(state, now_s, config, f"{failures} failed health checks")
    return state, ()


def _fail(
    state: ReplicaState, now_s: float, config: LifecycleConfig, why: str
) -> tuple[ReplicaState, tuple[Action, ...]]:
    stopping, terminate = _terminate(replace(state, crashed=True), now_s, config, "failed")
    if state.phase is ReplicaPhase.READY:  # out of the endpoint file before the signal
        return stopping, (Failed(state.id, why), Publish(), *terminate)
    return stopping, (Failed(state.id, why), *terminate)


def _terminate(
    state: ReplicaState, now_s: float, config: LifecycleConfig, why: str
) -> tuple[ReplicaState, tuple[Action, ...]]:
    stopping = replace(state, phase=ReplicaPhase.STOPPING, deadline_s=now_s + config.grace_s)
    return stopping, (Terminate(state.id, why),)


def cancel(
    state: ReplicaState, now_s: float, config: LifecycleConfig
) -> tuple[ReplicaState, tuple[Action, ...]]:
    """Stop a STARTING replica that is no longer wanted (it serves nothing: no drain)."""
    return _terminate(state, now_s, config, "cancelled")


def drain(
    state: ReplicaState, now_s: float, config: LifecycleConfig
) -> tuple[ReplicaState, tuple[Action, ...]]:
    """Take a READY replica out of the endpoint file; it stops once drained."""
    draining = replace(
        state, phase=ReplicaPhase.DRAINING, deadline_s=now_s + config.drain_timeout_s
    )
    return draining, (Draining(state.id), Publish())


# --- the back-off -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backoff:
    """Crashes in a row, when the last one was, and the earliest time a replacement may
    start."""

    crashes: int = 0
    restart_not_before_s: float = 0.0
    last_crash_s: float | None = None


def crashed(backoff: Backoff, now_s: float, config: LifecycleConfig) -> Backoff:
    """One more crash (a replica failed, or could not even be started)."""
    crashes = backoff.crashes + 1
    return Backoff(crashes, now_s + config.backoff_s(crashes), now_s)


def settle(
    backoff: Backoff, replicas: Iterable[ReplicaState], now_s: float, config: LifecycleConfig
) -> Backoff:
    """A replica that became READY after the last crash and has stayed READY for
    ``stable_s`` resets the crash count. (A replica ready since before the crash proves
    nothing: beside it, a replacement that keeps crashing must still back off.)"""
    if backoff.crashes and any(
        r.phase is ReplicaPhase.READY
        and r.ready_at_s is not None
        and (backoff.last_crash_s is None or r.ready_at_s >= backoff.last_crash_s)
        and now_s - r.ready_at_s >= config.stable_s
        for r in replicas
    ):
        return replace(backoff, crashes=0)
    return backoff


# --- the fleet ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ScalePlan:
    """Which replicas to cancel (STARTING) and drain (READY), and how many to start."""

    cancel: tuple[int, ...] = ()
    drain: tuple[int, ...] = ()
    start: int = 0


def scale_plan(
    replicas: Sequence[ReplicaState],
    desired: int,
    now_s: float,
    restart_not_before_s: float,
    warmth: Mapping[int, Warmth] | None = None,
) -> ScalePlan:
    """Bring the STARTING + READY count to ``desired``.

    Too many: cancel starting replicas first, newest first, then drain ready ones in
    :func:`~inflight.control.scale_down.leave_order` of their ``warmth`` (by id; missing:
    nothing in flight, nothing cached), newest first among equals (the oldest have proven
    themselves). Too few: start the difference, unless a crash back-off is running
    (``now_s < restart_not_before_s``).
    """
    if desired < 0:
        raise ValueError(f"desired replicas must be >= 0, got {desired}")
    starting = [r for r in replicas if r.phase is ReplicaPhase.STARTING]
    ready = [r for r in replicas if r.phase is ReplicaPhase.READY]
    surplus = len(starting) + len(ready) - desired
    if surplus > 0:
        known = warmth or {}
        ready_newest_first = sorted(ready, key=_age_key, reverse=True)
        leaving = sorted(starting, key=_age_key, reverse=True)
        leaving += leave_order([(r, known.get(r.id, COLD)) for r in ready_newest_first])
        chosen = leaving[:surplus]
        return ScalePlan(
            cancel=tuple(r.id for r in chosen if r.phase is ReplicaPhase.STARTING),
            drain=tuple(r.id for r in chosen if r.phase is ReplicaPhase.READY),
        )
    if surplus < 0 and now_s >= restart_not_before_s:
        return ScalePlan(start=-surplus)
    return ScalePlan()


def _age_key(r: ReplicaState) -> tuple[float, int]:
    return (r.started_at_s, r.id)


@dataclass(frozen=True)
class Reconciled:
    """The result of one :func:`reconcile`: the replicas still there (GONE ones dropped),
    the back-off, the actions in order, and how many replicas the shell must start."""

    replicas: tuple[ReplicaState, ...]
    backoff: Backoff
    actions: tuple[Action, ...]
    start: int


def reconcile(
    replicas: Sequence[ReplicaState],
    probes: Mapping[int, Probes],
    backoff: Backoff,
    desired: int,
    now_s: float,
    config: LifecycleConfig,
    warmth: Mapping[int, Warmth] | None = None,
) -> Reconciled:
    """One tick of the whole fleet: step every replica on its probes (by id; missing: none),
    count failures as crashes, reset the count after ``stable_s``, then cancel, drain or ask
    for replicas per :func:`scale_plan` (``warmth``: which ready replica leaves). The shell
    starts ``start`` replicas (each with :func:`new_replica`; one that cannot be started is
    a crash: :func:`crashed`)."""
    stepped: list[ReplicaState] = []
    actions: list[Action] = []
    for r in replicas:
        new, acts = step(r, probes.get(r.id, Probes()), now_s, config)
        for act in acts:
            if isinstance(act, Failed):
                backoff = crashed(backoff, now_s, config)
                act = replace(
                    act,
                    crashes=backoff.crashes,
                    delay_s=backoff.restart_not_before_s - now_s,
                )
            actions.append(act)
        if new.phase is not ReplicaPhase.GONE:
            stepped.append(new)
    backoff = settle(backoff, stepped, now_s, config)
    plan = scale_plan(stepped, desired, now_s, backoff.restart_not_before_s, warmth)
    out: list[ReplicaState] = []
    for r in stepped:
        if r.id in plan.cancel:
            r, acts = cancel(r, now_s, config)
            actions.extend(acts)
        elif r.id in plan.drain:
            r, acts = drain(r, now_s, config)
            actions.extend(acts)
        out.append(r)
    return Reconciled(tuple(out), backoff, tuple(actions), plan.start)


def count(replicas: Iterable[ReplicaState], phases: frozenset[ReplicaPhase]) -> int:
    """How many replicas are in one of ``phases`` (:data:`LIVE_PHASES`, :data:`ACTIVE_PHASES`)."""
    return sum(r.phase in phases for r in replicas)
