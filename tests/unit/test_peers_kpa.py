"""Knative's KPA on the worked examples of Knative's own tests: the pure decider
(inflight/control/peers/kpa.py), then its loop (inflight/planes/peers/kpa.py).

The cases are knative/serving@98e5ef90 ``pkg/autoscaler/aggregation/bucketing_test.go``
(``TestTimedFloat64BucketsWindowAverage``) and ``pkg/autoscaler/scaling/autoscaler_test.go``
(its test autoscaler: panic threshold 2, max scale-up and scale-down rates 10, 60 s stable
window, ready count 1 unless the case sets it), stepping ``now_s`` and threading the state
each call returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from inflight.control.peers.base import Decision, Replicas, Signal
from inflight.control.peers.kpa import (
    KpaSpec,
    KpaState,
    PanicState,
    TimedBuckets,
    record,
    scale,
    tick,
)
from inflight.planes.autoscaler import Observation
from inflight.planes.peers.base import PeerIO
from inflight.planes.peers.kpa import KpaLoop
from inflight.planes.peers.signals import NoData
from inflight.statedir import DecisionRecord

# --- TimedFloat64Buckets -----------------------------------------------------------------


@pytest.mark.parametrize("now", [1000.0, 1000.5])
def test_window_average_as_knative_computes_it(now: float) -> None:
    b = TimedBuckets(window_s=5.0, bucket_s=1.0).record(now, 1)
    assert b.window_average(now) == 1.0  # firstWrite is used: not 1/5
    for i in range(1, 5):
        b = b.record(now + i, i + 1)
    assert b.window_average(now + 4) == 15 / 5
    assert b.window_average(now + 3.6) == 15 / 5  # now lags behind the last write
    assert b.window_average(now + 6) == (15 - 1 - 2) / (5 - 2)  # a short hole
    assert b.window_average(now + 10) == 0.0  # a long hole
    b = b.record(now + 6, 91)  # a write after a hole
    assert b.window_average(now + 6) == (15 - 1 - 2 + 91) / 5
    now += 60  # much farther
    b = b.record(now, 1984)
    assert b.window_average(now) == 1984.0
    b = b.record(now - 3, 4)  # an earlier time
    assert b.window_average(now) == (4 + 1984) / 4
    now += 1
    b = b.record(now, 5)
    assert b.window_average(now) == (4 + 1984 + 5) / 5
    b = b.record(now - 3, 10)  # an earlier time again
    assert b.window_average(now) == (4 + 10 + 1984 + 5) / 5
    assert b.record(now - 6, 10) is b  # too early: ignored
    assert b.record(now - 5, 10) is b  # exactly a window early: ignored
    assert b.window_average(now) == (4 + 10 + 1984 + 5) / 5
    b = b.record(now + 5, 10)  # nothing for exactly a window: the old data is cleared
    assert b.window_average(now + 5) == 10.0


def test_values_in_one_bucket_add_up() -> None:
    """``TestTimedFloat64BucketsSimple``: two stats in one second are one bucket's sum."""
    b = TimedBuckets(window_s=120.0, bucket_s=1.0)
    assert b.is_empty(1000.0)
    for t, v in [(1000.0, 1.0), (1000.1, 10.0), (1001.0, 1.0), (1003.0, 1.0)]:
        b = b.record(t, v)
    assert b.window_average(1003.0) == round(13.0 / 4, 6)
    assert not b.is_empty(1003.0 + 120.0) and b.is_empty(1003.0 + 121.0)


def test_recording_returns_new_windows() -> None:
    """A value: the windows recorded into are left as they were."""
    empty = TimedBuckets(window_s=5.0, bucket_s=1.0)
    one = empty.record(10.0, 3.0)
    assert empty.is_empty(10.0) and empty.buckets == ()
    assert one.buckets == ((10, 3.0),) and one.record(10.5, 1.0).buckets == ((10, 4.0),)
    assert one.buckets == ((10, 3.0),)


def test_a_scaled_bucket_size_keeps_the_arithmetic() -> None:
    """At time-scale 0.05 the same records, 20× faster, give the same averages."""
    ts = 0.05
    b = TimedBuckets(window_s=6 * ts, bucket_s=1 * ts)
    for i in range(10):
        b = b.record(100.0 + i * ts, float(i))
    assert b.window_average(100.0 + 9 * ts) == (4 + 5 + 6 + 7 + 8 + 9) / 6


# --- autoscaler.Scale ---------------------------------------------------------------------


def spec(target: float, **kw: float) -> KpaSpec:
    """newTestAutoscaler's DeciderSpec (TotalValue = target / 0.75, as its tests presume)."""
    values: dict[str, float] = {
        "max_scale_up_rate": 10.0,
        "max_scale_down_rate": 10.0,
        "panic_threshold": 2.0,
        "stable_window_s": 60.0,
    }
    values.update(kw)
    return KpaSpec(target_value=target, total_value=target / 0.75, **values)  # type: ignore[arg-type]


class Autoscaler:
    """Knative's test autoscaler: :func:`scale` with its panic state threaded through."""

    def __init__(self, spec: KpaSpec, ready: int = 1, now_s: float = 0.0) -> None:
        self.spec = spec
        self.state = PanicState.start(ready, now_s)

    def scale(self, ready: int, stable: float, panic: float, now_s: float) -> int:
        result, self.state = scale(self.spec, self.state, ready, stable, panic, now_s)
        assert result.panicking == (self.state.panic_time_s is not None)
        return result.desired


@pytest.mark.parametrize(
    ("label", "target", "stable", "panic", "ready", "want", "panicking_since", "extra"),
    [
        ("StableModeNoChange", 10, 50, 50, 1, 5, None, {}),
        ("Autoscaler0TBC", 10, 50, 49, 1, 5, None, {}),
        ("PanicStableLargerThanPanic", 1, 50, 30, 5, 50, 5.0, {}),
        ("PanicStableLessThanPanic", 1, 20, 30, 5, 30, 5.0, {}),
        ("StableModeNoChangeAlreadyScaled", 10, 50, 50, 5, 5, None, {}),
        ("IncreaseWithSmallScaleUpRate", 1, 3, 3.1, 2, 3, None, {"max_scale_up_rate": 1.1}),
        (
            "DecreaseWithSmallScaleDownRate",
            10,
            1,
            1,
            100,
            90,
            None,
            {"max_scale_down_rate": 1.1},
        ),
        ("PanicModeDoublePodCount", 10, 50, 100, 1, 10, None, {}),
    ],
)
def test_autoscaler_scale_table(
    label: str,
    target: float,
    stable: float,
    panic: float,
    ready: int,
    want: int,
    panicking_since: float | None,
    extra: dict[str, float],
) -> None:
    """``TestAutoscalerScale``'s cases (the ones about the pod count)."""
    now = 1000.0
    state = PanicState()
    if panicking_since is not None:  # prepFunc: panicTime = now - 5 s, maxPanicPods = 5
        state = PanicState(panic_time_s=now - panicking_since, max_panic_pods=5)
    result, _ = scale(spec(target, **extra), state, ready, stable, panic, now)
    assert result.desired == want, label


def test_not_reachable_scales_down_at_once() -> None:
    """``AutoscalerStableModeDecreaseNonReachable``: no scale-down rate limit."""
    s = KpaSpec(target_value=10, total_value=10 / 0.75, max_scale_up_rate=10)
    s = replace(s, max_scale_down_rate=1.1, reachable=False)
    assert Autoscaler(s).scale(100, 1, 1, 1.0) == 1


def test_panic_then_unpanic_scale_down() -> None:
    """``TestAutoscalerPanicThenUnPanicScaleDown``."""
    a = Autoscaler(spec(10))
    assert a.scale(1, 100, 100, 1.0) == 10
    t = 2.0
    assert a.scale(10, 100, 1000, t) == 100
    # Traffic dropped off, scale stays as we're still in panic.
    assert a.scale(10, 1, 1, t + 30) == 100
    # Scale down after the stable window.
    assert a.scale(10, 1, 1, t + 61) == 1
    assert a.state == PanicState(None, 0)


def test_unpanic_after_slow_increase() -> None:
    """``TestAutoscalerUnpanicAfterSlowIncrease``."""
    a = Autoscaler(spec(1))
    start = 100.0
    assert a.scale(10, 11, 25, start) == 25
    assert a.state.panic_time_s == start
    # Half the stable window later, +15 pods: still panicking, the panic time not moved.
    assert a.scale(40, 30, 41, start + 30) == 41
    assert a.state.panic_time_s == start
    # At the end of the window (and a tick): panic ends, +30 pods.
    assert a.scale(55, 50, 56, start + 30 + 30 + 2) == 50
    assert a.state.panic_time_s is None


def test_extend_panic_window() -> None:
    """``TestAutoscalerExtendPanicWindow``."""
    a = Autoscaler(spec(1))
    assert a.scale(10, 11, 25, 100.0) == 25
    assert a.scale(40, 30, 80, 130.0) == 80
    assert a.state.panic_time_s == 130.0


def test_panic_mode_exponential_track_and_stabilize() -> None:
    """``TestAutoscalerPanicModeExponentialTrackAndStabilize``."""
    a = Autoscaler(spec(1))
    assert a.scale(1, 6, 6, 10.0) == 6
    assert a.scale(6, 36, 36, 10.0) == 36
    assert a.scale(36, 216, 216, 11.0) == 216
    assert a.scale(216, 1296, 1296, 11.0) == 1296
    assert a.scale(1296, 1296, 1296, 12.0) == 1296


def test_rate_limits() -> None:
    """``TestAutoscalerRateLimitScaleUp`` / ``…ScaleDown``: ×10 and ÷10 per decision."""
    up = Autoscaler(spec(10))
    assert up.scale(1, 1000, 1001, 1.0) == 10
    assert up.scale(10, 1000, 1001, 2.0) == 100
    down = Autoscaler(spec(10))
    assert down.scale(100, 1, 1, 1.0) == 10
    assert down.scale(10, 1, 1, 2.0) == 1


def test_no_ready_pod_counts_as_one() -> None:
    """``TestAutoscalerUseOnePodAsMinimumIfEndpointsNotFound``: 1 × 10 by the rate limit."""
    assert Autoscaler(spec(10)).scale(0, 1000, 888, 1.0) == 10


def test_stable_mode_no_traffic_scales_to_zero() -> None:
    """``TestAutoscalerStableModeNoTrafficScaleToZero``."""
    a = Autoscaler(spec(10))
    assert a.scale(1, 1, 0, 1.0) == 1
    assert a.scale(1, 0, 0, 2.0) == 0


def test_start_in_panic_mode_with_more_than_one_pod() -> None:
    """``TestStartInPanicMode``."""
    for ready in (0, 1):
        assert PanicState.start(ready, now_s=5.0) == PanicState(None, ready)
    assert PanicState.start(2, now_s=5.0) == PanicState(5.0, 2)


def test_the_configured_defaults() -> None:
    """config.go's defaults, with containerConcurrency = 4 slots."""
    s = KpaSpec.concurrency(4)
    assert (s.target_value, s.total_value) == (2.8, 4.0)
    assert (s.max_scale_up_rate, s.max_scale_down_rate, s.panic_threshold) == (1000, 2, 2)
    assert (s.stable_window_s, s.panic_window_s, s.tick_s) == (60, 6, 2)
    fast = s.scaled(0.05)
    assert (fast.stable_window_s, fast.tick_s, fast.bucket_s) == pytest.approx((3, 0.1, 0.05))
    assert fast.panic_window_s == pytest.approx(0.3)


@pytest.mark.parametrize("bad", [{"target_value": 0}, {"max_scale_down_rate": 1.0}])
def test_bad_specs_are_refused(bad: dict[str, float]) -> None:
    values = {"target_value": 2.8, "total_value": 4.0, **bad}
    with pytest.raises(ValueError):
        KpaSpec(**values)  # type: ignore[arg-type]


# --- tick: the windows, Scale, min/max scale, scale to zero ------------------------------


def tickers(
    spec: KpaSpec, state: KpaState, replicas: Replicas, inflight: float, start: int, end: int
) -> tuple[list[Decision], KpaState]:
    """Knative's two tickers in virtual time, seconds ``start..end``: the collector's scrape
    every second (L into both windows), the multiscaler's decision every 2 s."""
    decisions = []
    for t in range(start, end + 1):
        state = record(state, inflight, float(t))
        if t % 2 == 0:
            decision, state = tick(spec, state, replicas, float(t))
            decisions.append(decision)
    return decisions, state


def test_decide_without_data_keeps_the_count_and_the_state() -> None:
    spec = replace(KpaSpec.concurrency(4), min_scale=1, max_scale=8)
    state = KpaState.start(spec, ready=2, now_s=0.0)
    decision, after = tick(spec, state, Replicas(desired=3, ready=2), 2.0)
    assert decision == Decision(3, None, None, "no data to scale on")
    assert after is state
    # Data older than the stable window is no data either (a window of 60 buckets).
    state = record(state, 5.0, 0.0)
    assert tick(spec, state, Replicas(3, 2), 59.0)[0].value == 5.0
    assert tick(spec, state, Replicas(3, 2), 61.0)[0].value is None


def test_decide_scales_up_on_a_burst_and_holds_while_panicking() -> None:
    spec = replace(KpaSpec.concurrency(4), min_scale=1, max_scale=8)
    state = KpaState.start(spec, ready=1, now_s=0.0)
    decisions, state = tickers(spec, state, Replicas(1, 1), 2.0, 0, 20)
    assert decisions[-1] == Decision(1, 2.0, 2.8, "stable mode: ceil(2 / 2.8) = 1")
    # A burst: the 6 s panic window sees it within seconds.
    decisions, state = tickers(spec, state, Replicas(1, 1), 12.0, 21, 30)
    assert decisions[-1].desired == 5  # ceil(12 / 2.8)
    assert decisions[-1].reason.startswith("panic mode") and decisions[-1].value == 12.0
    assert state.panic.panic_time_s == 30.0
    # The burst is gone: held while panicking, until a stable window after the last tick
    # over the threshold (30 s), then floor(5 / 2) by the scale-down rate, then 1.
    decisions, state = tickers(spec, state, Replicas(5, 5), 2.0, 31, 90)
    assert {d.desired for d in decisions} == {5}
    decisions, state = tickers(spec, state, Replicas(5, 5), 2.0, 91, 92)
    assert decisions[-1].desired == 2 and state.panic == PanicState(None, 0)
    decisions, state = tickers(spec, state, Replicas(2, 2), 2.0, 93, 94)
    assert decisions[-1].desired == 1


def test_decide_keeps_the_bounds() -> None:
    spec = replace(KpaSpec.concurrency(4), min_scale=3, max_scale=8)
    state = KpaState.start(spec, ready=3, now_s=0.0)
    decisions, state = tickers(spec, state, Replicas(3, 3), 100.0, 0, 10)
    assert decisions[-1].desired == 8
    assert decisions[-1].reason.endswith("; bounds 3..8 -> 8")
    replicas = Replicas(8, 8)
    for start in range(11, 400, 2):  # the replicas follow each decision at once
        decisions, state = tickers(spec, state, replicas, 0.0, start, start + 1)
        replicas = Replicas(decisions[-1].desired, decisions[-1].desired)
    assert replicas.desired == 3


def test_scale_to_zero_waits_for_the_grace_period_of_wanting_zero() -> None:
    spec = replace(KpaSpec.concurrency(4), min_scale=0, max_scale=2)
    state = KpaState.start(spec, ready=1, now_s=0.0)
    decisions, state = tickers(spec, state, Replicas(1, 1), 0.0, 0, 28)
    assert {d.desired for d in decisions} == {1}
    assert "; scale to zero after the grace period" in decisions[-1].reason
    assert state.zero_since_s == 0.0  # the first decision that wanted zero
    decisions, state = tickers(spec, state, Replicas(1, 1), 0.0, 29, 30)
    assert decisions[-1].desired == 0
    # Wanting one pod again resets the grace period.
    decisions, state = tickers(spec, state, Replicas(0, 0), 2.0, 31, 32)
    assert decisions[-1].desired == 1 and state.zero_since_s is None


def test_decide_leaves_its_input_state_alone() -> None:
    spec = KpaSpec.concurrency(4)
    state = record(KpaState.start(spec, ready=1, now_s=0.0), 12.0, 0.0)
    before = replace(state)
    decision, after = tick(spec, state, Replicas(1, 1), 0.0)
    assert state == before and after != state
    assert (decision.desired, after.panic.panic_time_s) == (5, 0.0)


@pytest.mark.parametrize(("lo", "hi"), [(-1, 2), (3, 2)])
def test_bad_bounds_are_refused(lo: int, hi: int) -> None:
    with pytest.raises(ValueError, match="scale"):
        replace(KpaSpec.concurrency(4), min_scale=lo, max_scale=hi)


# --- the loop ---------------------------------------------------------------------------


@dataclass
class FakeWorld:
    """What the loop sees: L from the router, replicas asked for and ready."""

    inflight: float | None = 0.0
    desired: int = 1
    ready: int = 1
    records: list[DecisionRecord] = field(default_factory=list)
    follow: bool = False  # replicas become ready at once

    def read(self, signal: Signal) -> float:
        assert signal is Signal.INFLIGHT
        if self.inflight is None:
            raise NoData("sum(router_inflight_requests): the result is empty")
        return self.inflight

    def set(self, n: int) -> None:
        self.desired = n
        if self.follow:
            self.ready = n

    def io(self) -> PeerIO:
        return PeerIO(
            read=self.read,
            get_replicas=lambda: self.desired,
            ready_replicas=lambda: self.ready,
            set_replicas=self.set,
            observe=lambda: Observation(self.inflight, self.ready, 4),
            record=self.records.append,
            wall_clock=lambda: 0.0,
        )


def run(loop: KpaLoop, start: float, end: float, step: float = 0.25) -> None:
    t = start
    while t <= end + 1e-9:
        loop.tick(t)
        t += step


def test_loop_scales_up_on_a_burst_and_holds_while_panicking() -> None:
    world = FakeWorld(inflight=2.0)
    loop = KpaLoop(KpaSpec.concurrency(4), min_replicas=1, max_replicas=8, io=world.io())
    loop.start(0.0)
    run(loop, 0.0, 20.0)
    assert world.desired == 1  # ceil(2 / 2.8) = 1
    world.inflight = 12.0  # a burst: panic window sees it within seconds
    run(loop, 20.25, 30.0)
    assert world.desired == 5  # ceil(12 / 2.8)
    assert any("panic mode" in r.reason for r in world.records)
    world.ready = 5
    world.inflight = 2.0  # the burst is gone: held while panicking (60 s after the last)
    run(loop, 30.25, 80.0)
    assert world.desired == 5
    run(loop, 80.25, 200.0)
    assert world.desired == 2  # out of panic: floor(5 / 2) by the scale-down rate
    world.ready = 2
    run(loop, 200.25, 210.0)
    assert world.desired == 1
    assert all(r.reason.startswith("kpa: ") for r in world.records)


def test_loop_keeps_the_bounds() -> None:
    world = FakeWorld(inflight=100.0, desired=3, ready=3, follow=True)
    loop = KpaLoop(KpaSpec.concurrency(4), min_replicas=3, max_replicas=8, io=world.io())
    loop.start(0.0)
    run(loop, 0.0, 10.0)
    assert world.desired == 8
    world.inflight = 0.0
    run(loop, 10.25, 400.0)
    assert world.desired == 3


def test_loop_without_data_makes_no_decision() -> None:
    world = FakeWorld(inflight=None, desired=2, ready=2)
    loop = KpaLoop(KpaSpec.concurrency(4), min_replicas=1, max_replicas=8, io=world.io())
    loop.start(0.0)
    run(loop, 0.0, 10.0)
    assert world.desired == 2
    assert world.records and all("no data" in r.reason for r in world.records)
    assert all(r.desired == 2 for r in world.records)


def test_scale_to_zero_waits_for_the_grace_period() -> None:
    world = FakeWorld(inflight=0.0)
    loop = KpaLoop(KpaSpec.concurrency(4), min_replicas=0, max_replicas=2, io=world.io())
    loop.start(0.0)
    run(loop, 0.0, 28.0)
    assert world.desired == 1
    run(loop, 28.25, 34.0)
    assert world.desired == 0
