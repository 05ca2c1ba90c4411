"""The fixed-period loops keep their phase (inflight.control.periodic), driven by a virtual clock.

Each loop is ticked every 0.7 s, coarser than the live stack's tick, so a due run comes
up to 0.7 s late: the k-th run must still be at the first tick at or after k periods
(no drift over 100 periods), and a stall longer than several periods runs once and keeps
the phase. Nothing sleeps: time is the ``now_s`` passed in.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from inflight.control.hpa import SHIPPED_BEHAVIOR, HpaSpec
from inflight.control.keda import KedaSpec
from inflight.control.lifecycle import (
    LifecycleConfig,
    ProbeKind,
    Probes,
    ReplicaPhase,
    ReplicaState,
    needed,
    step,
)
from inflight.control.peers.base import Signal
from inflight.control.peers.kpa import KpaSpec
from inflight.control.periodic import next_due
from inflight.planes.autoscaler import AutoscaleConfig, Autoscaler, Observation
from inflight.planes.peers.base import PeerIO
from inflight.planes.peers.kpa import KpaLoop
from inflight.planes.scaler_client import MetricSpec

TICK_S = 0.7
PERIODS = 100
NEVER_S = 1e9  # a period that never comes within a test


def ticks(start: float, end: float) -> list[float]:
    """The virtual clock: ``start + i × TICK_S`` up to ``end`` (i × step, not a running sum)."""
    n = int((end - start) / TICK_S) + 1
    return [start + i * TICK_S for i in range(n)]


def first_ticks_at_or_after(period_s: float, times: list[float], count: int) -> list[float]:
    """For k = 1..count: the first of ``times`` at or after ``k × period_s``."""
    return [next(t for t in times if t >= k * period_s) for k in range(1, count + 1)]


def run_at(times: list[float], tick: Callable[[float], object], clock: list[float]) -> None:
    for t in times:
        clock[0] = t
        tick(t)


# --- the helper -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("due", "period", "now", "expected"),
    [
        (15.0, 15.0, 15.0, 30.0),  # on time
        (15.0, 15.0, 15.7, 30.0),  # a tick late: the phase is kept
        (15.0, 15.0, 29.9, 30.0),
        (15.0, 15.0, 30.0, 45.0),  # a whole period late: that run is skipped
        (15.0, 15.0, 55.0, 60.0),  # 40 s stalled: once, then on the phase
        (15.0, 0.1, 15.0 + 0.1, 15.2),  # (now - due) / period rounds to 0.999…
    ],
)
def test_next_due_is_the_first_due_time_after_now(
    due: float, period: float, now: float, expected: float
) -> None:
    got = next_due(due, period, now)
    assert got == pytest.approx(expected) and got > now


def test_next_due_refuses_a_period_that_is_not_positive() -> None:
    with pytest.raises(ValueError, match="period must be > 0"):
        next_due(0.0, 0.0, 1.0)


# --- KEDA + HPA -----------------------------------------------------------------------------


class TimedScaler:
    """A scaler that notes when the HPA reads its metric and when KEDA asks IsActive."""

    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.reads: list[float] = []
        self.polls: list[float] = []

    def metric_spec(self) -> MetricSpec:
        return MetricSpec("inflight", 4.0)

    def metric_value(self, metric_name: str) -> float:
        self.reads.append(self.clock[0])
        return 4.0  # on target: the replicas stay as they are

    def is_active(self) -> bool:
        self.polls.append(self.clock[0])
        return True


def autoscaler(hpa_sync_s: float, polling_interval_s: float) -> tuple[Autoscaler, TimedScaler]:
    clock = [0.0]
    scaler = TimedScaler(clock)
    loop = Autoscaler(
        scaler=scaler,
        config=AutoscaleConfig(
            hpa=HpaSpec(1, 4, SHIPPED_BEHAVIOR),
            keda=KedaSpec(1, 300.0),
            hpa_sync_s=hpa_sync_s,
            polling_interval_s=polling_interval_s,
        ),
        get_replicas=lambda: 1,
        set_replicas=lambda n: None,
        observe=lambda: Observation(4.0, 1, 4),
        record=lambda r: None,
        wall_clock=lambda: clock[0],
    )
    loop.start(0.0)
    return loop, scaler


def test_hpa_syncs_on_its_phase_when_ticks_come_late() -> None:
    loop, scaler = autoscaler(hpa_sync_s=15.0, polling_interval_s=NEVER_S)
    times = ticks(0.0, 15.0 * PERIODS + 1.0)
    run_at(times, loop.tick, scaler.clock)
    assert scaler.reads == first_ticks_at_or_after(15.0, times, PERIODS)


def test_hpa_stall_runs_one_sync_and_keeps_the_phase() -> None:
    loop, scaler = autoscaler(hpa_sync_s=15.0, polling_interval_s=NEVER_S)
    run_at([0.0, 15.0], loop.tick, scaler.clock)
    # 40 s with no tick (syncs due at 30, 45 missed), then ticks every 0.7 s again.
    run_at(ticks(55.0, 76.0), loop.tick, scaler.clock)
    assert scaler.reads == [15.0, 55.0, pytest.approx(60.6), pytest.approx(75.3)]
    assert loop.next_hpa_s == 90.0


def test_keda_polls_on_its_phase_when_ticks_come_late() -> None:
    loop, scaler = autoscaler(hpa_sync_s=NEVER_S, polling_interval_s=30.0)
    times = ticks(0.0, 30.0 * PERIODS + 1.0)
    run_at(times, loop.tick, scaler.clock)
    assert scaler.polls == first_ticks_at_or_after(30.0, times, PERIODS)


def test_keda_stall_runs_one_poll_and_keeps_the_phase() -> None:
    loop, scaler = autoscaler(hpa_sync_s=NEVER_S, polling_interval_s=30.0)
    run_at([0.0, 30.0], loop.tick, scaler.clock)
    run_at(ticks(100.0, 121.0), loop.tick, scaler.clock)  # due at 60 and 90: missed
    assert scaler.polls == [30.0, 100.0, pytest.approx(120.3)]
    assert loop.next_keda_s == 150.0


# --- Knative's KPA --------------------------------------------------------------------------


class KpaWorld:
    def __init__(self) -> None:
        self.clock = [0.0]
        self.scrapes: list[float] = []
        self.decisions: list[float] = []

    def read(self, signal: Signal) -> float:
        assert signal is Signal.INFLIGHT
        self.scrapes.append(self.clock[0])
        return 2.0

    def io(self) -> PeerIO:
        return PeerIO(
            read=self.read,
            get_replicas=lambda: 1,
            ready_replicas=lambda: 1,
            set_replicas=lambda n: None,
            observe=lambda: Observation(2.0, 1, 4),
            record=lambda r: self.decisions.append(r.t),
            wall_clock=lambda: self.clock[0],
        )


def kpa() -> tuple[KpaLoop, KpaWorld]:
    world = KpaWorld()
    loop = KpaLoop(KpaSpec.concurrency(4), min_replicas=1, max_replicas=8, io=world.io())
    loop.start(0.0)
    return loop, world


def test_kpa_decides_and_scrapes_on_their_phase_when_ticks_come_late() -> None:
    loop, world = kpa()
    times = ticks(0.0, 2.0 * PERIODS + 1.0)
    run_at(times, loop.tick, world.clock)
    assert world.decisions == first_ticks_at_or_after(2.0, times, PERIODS)
    # The first scrape is at the start, then one per second on the start's phase.
    assert world.scrapes[0] == 0.0
    assert world.scrapes[1 : PERIODS + 1] == first_ticks_at_or_after(1.0, times, PERIODS)


def test_kpa_stall_decides_once_and_keeps_the_phase() -> None:
    loop, world = kpa()
    run_at([0.0, 2.0], loop.tick, world.clock)
    run_at(ticks(9.0, 12.0), loop.tick, world.clock)  # decisions due at 4, 6, 8: missed
    assert world.decisions == [2.0, 9.0, pytest.approx(10.4)]
    assert loop.next_tick_s == 12.0
    assert world.scrapes[:4] == [0.0, 2.0, 9.0, pytest.approx(10.4)]
    assert loop.next_scrape_s == 12.0


# --- a ready replica's health checks --------------------------------------------------------

HEALTH_CFG = LifecycleConfig(health_interval_s=1.0, unhealthy_after=3)


def checked_at(times: list[float]) -> tuple[list[float], ReplicaState]:
    """Step a replica READY at 0 as the supervisor does: the health probe only when
    :func:`needed` asks for it; the times it was checked."""
    state = ReplicaState(
        1, ReplicaPhase.READY, 8001, started_at_s=0.0, ready_at_s=0.0, next_health_s=1.0
    )
    checks = []
    for t in times:
        health = ProbeKind.HEALTH in needed(state, t, HEALTH_CFG)
        state, _ = step(state, Probes(alive=True, healthy=True if health else None), t, HEALTH_CFG)
        if health:
            checks.append(t)
    return checks, state


def test_health_checks_on_their_phase_when_ticks_come_late() -> None:
    times = ticks(0.0, 1.0 * PERIODS + 1.0)
    checks, _ = checked_at(times)
    assert checks == first_ticks_at_or_after(1.0, times, PERIODS)


def test_health_check_stall_checks_once_and_keeps_the_phase() -> None:
    checks, state = checked_at([0.0, 1.0, 5.5])  # due at 2, 3, 4, 5: missed
    assert checks == [1.0, 5.5]
    assert state.next_health_s == 6.0
