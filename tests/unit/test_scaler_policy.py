"""The pure policy core: worked examples, properties (hypothesis), and the seed's failure."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inflight import names
from inflight.control.policy import (
    NoSamples,
    Partial,
    PolicySpec,
    Sample,
    Window,
    decide,
    decide_qps,
    evaluate,
)

# The floor learned from recent peaks is off here: these tests pin the scale-up and
# scale-down windows alone (the floor: tests/unit/test_scaler_floor.py).
SPEC = PolicySpec(
    queue_headroom=0.0, scale_up_window_s=10.0, scale_down_window_s=60.0, floor_window_s=0.0
)


def series(values: list[float], step_s: float = 1.0, end_s: float = 1000.0) -> list[Sample]:
    """Samples every ``step_s`` ending at ``end_s`` (the last value is the newest)."""
    n = len(values)
    return [Sample(end_s - (n - 1 - i) * step_s, v) for i, v in enumerate(values)]


def smoothed_max(samples: list[Sample], spec: PolicySpec, now_s: float) -> float:
    """A slow, obviously-correct restatement of the policy's value (for the properties)."""
    up, down = spec.scale_up_window_s, spec.scale_down_window_s
    pts = [s for s in samples if now_s - down - up <= s.t_s <= now_s]
    best = 0.0
    for tau in [s.t_s for s in pts if s.t_s >= now_s - down] + [now_s]:
        inside = [s.value for s in pts if tau - up < s.t_s <= tau] if up > 0 else []
        if inside:
            v = sum(inside) / len(inside)
        else:
            before = [s for s in pts if s.t_s <= tau]
            if not before:
                continue
            v = max(before, key=lambda s: s.t_s).value
        best = max(best, v)
    return best


@pytest.mark.parametrize(
    ("values", "value", "desired", "active"),
    [
        ([0.0] * 80, 0.0, 0, False),  # idle: 0, not active
        ([8.0] * 80, 8.0, 2, True),  # 8 in flight, 4 slots -> 2 replicas
        ([4.0] * 80, 4.0, 1, True),  # 4 in flight fills one replica exactly: no scale-up
        ([5.0] * 80, 5.0, 2, True),  # one queued request -> a second replica
        ([8.0] * 20 + [0.0] * 30, 8.0, 2, True),  # load stopped 30 s ago: held
        ([8.0] * 10 + [0.0] * 75, 0.0, 0, False),  # stopped 75 s ago: window passed
    ],
)
def test_worked_examples(values: list[float], value: float, desired: int, active: bool) -> None:
    d = decide(series(values), SPEC, now_s=1000.0)
    assert (d.value, d.desired_replicas, d.active) == (value, desired, active)
    assert d.target == 4.0


def test_target_is_slots_times_saturation() -> None:
    spec = PolicySpec(
        queue_headroom=0.0, scale_down_window_s=60.0, slots_per_replica=4, target_saturation=0.75
    )
    d = decide(series([6.0] * 80), spec, now_s=1000.0)
    assert d.target == 3.0
    assert d.desired_replicas == 2


def test_scale_up_is_immediate_after_the_short_window() -> None:
    # L jumps from 0 to 12 and stays: after one scale-up window the value is 12 (3 replicas).
    d = decide(series([0.0] * 60 + [12.0] * 10), SPEC, now_s=1000.0)
    assert d.value == 12.0
    assert d.desired_replicas == 3
    assert d.direction == "unknown"


def test_no_smoothing_when_scale_up_window_is_zero() -> None:
    spec = PolicySpec(queue_headroom=0.0, scale_up_window_s=0.0, scale_down_window_s=0.0)
    d = decide(series([0.0] * 10 + [9.0]), spec, now_s=1000.0)
    assert d.value == 9.0
    assert d.desired_replicas == 3


def test_saturation_and_direction_use_ready_replicas() -> None:
    d = decide(series([8.0] * 80), SPEC, now_s=1000.0, ready_replicas=1)
    assert d.saturation == 2.0
    assert d.direction == "up"
    d = decide(series([8.0] * 80), SPEC, now_s=1000.0, ready_replicas=2)
    assert (d.saturation, d.direction) == (1.0, "hold")
    d = decide(series([0.0] * 80), SPEC, now_s=1000.0, ready_replicas=2)
    assert d.direction == "down"
    assert decide(series([3.0] * 80), SPEC, now_s=1000.0, ready_replicas=0).saturation is None


def test_activation_threshold() -> None:
    spec = PolicySpec(queue_headroom=0.0, scale_down_window_s=60.0, activation_inflight=2.0)
    assert not decide(series([2.0] * 80), spec, now_s=1000.0).active
    assert decide(series([2.0] * 80), spec, now_s=1000.0).desired_replicas == 0
    assert decide(series([3.0] * 80), spec, now_s=1000.0).active


def test_float_noise_does_not_add_a_replica() -> None:
    # Means of 0.1-steps can land at 8.000000000000002; that must not ask for 3 replicas.
    d = decide(series([7.9, 8.1] * 40), SPEC, now_s=1000.0)
    assert d.desired_replicas == 2


def test_no_samples_is_an_error_not_zero() -> None:
    with pytest.raises(NoSamples):
        decide([], SPEC, now_s=1000.0)
    with pytest.raises(NoSamples):  # only samples far older than the window
        decide(series([8.0] * 5, end_s=100.0), SPEC, now_s=1000.0)
    with pytest.raises(NoSamples):  # only future samples
        decide(series([8.0] * 5, end_s=2000.0), SPEC, now_s=1000.0)


def test_time_scale_shrinks_windows_through_the_spec() -> None:
    spec = PolicySpec(
        queue_headroom=0.0,
        scale_up_window_s=1.0,
        scale_down_window_s=6.0,
        time_scale=0.1,
        floor_window_s=0.0,
    )
    # 7 s after load stopped at time-scale 0.1, the 6 s window has passed.
    d = decide(series([8.0] * 20 + [0.0] * 70, step_s=0.1), spec, now_s=1000.0)
    assert d.value == 0.0
    assert spec.qps_window_s == pytest.approx(1.0)


# --- properties ----------------------------------------------------------------------

values_st = st.lists(st.integers(min_value=0, max_value=64).map(float), min_size=1, max_size=90)
spec_st = st.builds(
    PolicySpec,
    slots_per_replica=st.integers(1, 8),
    target_saturation=st.sampled_from([0.5, 0.75, 1.0, 1.25]),
    scale_up_window_s=st.sampled_from([0.0, 1.0, 5.0, 10.0]),
    scale_down_window_s=st.sampled_from([0.0, 5.0, 30.0, 60.0]),
    floor_window_s=st.just(0.0),
    queue_headroom=st.just(0.0),  # tests.unit.policy_pins: the window mechanics alone
)


@settings(max_examples=300, deadline=None)
@given(values=values_st, spec=spec_st)
def test_value_is_the_max_of_the_smoothed_window(values: list[float], spec: PolicySpec) -> None:
    samples = series(values)
    d = decide(samples, spec, now_s=1000.0)
    assert d.value == pytest.approx(smoothed_max(samples, spec, 1000.0), abs=1e-6)


@settings(max_examples=300, deadline=None)
@given(values=values_st, spec=spec_st, level=st.integers(1, 64))
def test_scale_up_never_lags_l(values: list[float], spec: PolicySpec, level: int) -> None:
    """Once L has been ≥ level for a whole scale-up window, the value is ≥ level."""
    n_up = int(spec.scale_up_window_s) + 1
    samples = series([*values, *([float(level)] * n_up)])
    d = decide(samples, spec, now_s=1000.0)
    assert d.value >= level
    assert d.desired_replicas >= math.ceil(level / spec.target - 1e-9)


@settings(max_examples=300, deadline=None)
@given(values=values_st, spec=spec_st, quiet_s=st.integers(0, 120))
def test_scale_down_waits_for_the_window(
    values: list[float], spec: PolicySpec, quiet_s: int
) -> None:
    """After load stops, the value holds the old peak until the down window has passed."""
    peak = max(values)
    n_up = int(spec.scale_up_window_s) + 1
    samples = series([*values, *([peak] * n_up), *([0.0] * quiet_s)])
    d = decide(samples, spec, now_s=1000.0)
    if quiet_s <= spec.scale_down_window_s:
        assert d.value >= peak
    if quiet_s > spec.scale_down_window_s + spec.scale_up_window_s:
        assert d.value == 0.0


@settings(max_examples=300, deadline=None)
@given(values=values_st, spec=spec_st, now_offset=st.floats(0, 100, allow_nan=False))
def test_value_never_below_what_the_window_requires(
    values: list[float], spec: PolicySpec, now_offset: float
) -> None:
    """HPA's count from the value covers every smoothed point of the down window."""
    samples = series(values)
    now = 1000.0 + now_offset
    try:
        d = decide(samples, spec, now_s=now)
    except NoSamples:
        return
    up = spec.scale_up_window_s
    for s in samples:
        if now - spec.scale_down_window_s <= s.t_s <= now and up > 0:
            inside = [x.value for x in samples if s.t_s - up < x.t_s <= s.t_s]
            need = math.ceil(round(sum(inside) / len(inside) / spec.target, 6))
            assert d.desired_replicas >= need
    assert d.desired_replicas == (0 if d.value == 0 else math.ceil(round(d.value / spec.target, 6)))


# --- the qps baseline: the seed's rule and its failure -----------------------------------


def counter(arrival_times: list[float], sample_times: list[float]) -> list[Sample]:
    """The cumulative arrivals counter, sampled at ``sample_times``."""
    return [Sample(t, float(sum(1 for a in arrival_times if a <= t))) for t in sample_times]


QPS = PolicySpec(queue_headroom=0.0, scale_down_window_s=60.0, policy="qps")


@pytest.mark.parametrize(
    ("arrivals_in_10s", "ready", "desired"),
    [(6, 1, 2), (5, 1, 1), (1, 2, 2), (0, 2, 1), (0, 1, 1), (9, 2, 3)],
)
def test_qps_rule_table(arrivals_in_10s: int, ready: int, desired: int) -> None:
    now = 1000.0
    arrivals = [now - 9.5 + i * (9.0 / max(1, arrivals_in_10s)) for i in range(arrivals_in_10s)]
    samples = counter(arrivals, [now - 20 + 0.5 * i for i in range(41)])
    d = decide_qps(samples, [Sample(now, 4.0)], ready, QPS, now_s=now)
    assert d.desired_replicas == desired
    assert d.value == desired * d.target  # HPA's ceil(value / target) lands on it


def test_qps_idle_goes_to_zero_and_inactive() -> None:
    samples = counter([], [980.0, 990.0, 1000.0])
    d = decide_qps(samples, [Sample(1000.0, 0.0)], 1, QPS, now_s=1000.0)
    assert (d.desired_replicas, d.active, d.value) == (0, False, 0.0)


def test_qps_baseline_reproduces_the_seed_failure() -> None:
    """8 always in flight on one replica (4 slots) at 33 s per request: half are queued.

    λ = 8 / 33 ≈ 0.24/s is under the 0.5 scale-up threshold, so the baseline never adds
    the second replica; and completions come in batches of 4, so a 10 s window that
    falls between batches reads 0 and scales *down*. The saturation policy asks for 2.
    """
    service_s = 33.0
    # Closed loop: two batches of 4 workers, offset by half a service time.
    arrivals = sorted(b + k * service_s for k in range(20) for b in (0.0, 16.5) for _ in range(4))
    horizon = [i * 1.0 for i in range(0, 600)]
    arrivals_samples = counter(arrivals, horizon)
    inflight = [Sample(t, 8.0) for t in horizon]
    rates = []
    downs = 0
    for now in horizon[100:]:
        d = decide_qps(arrivals_samples, inflight, 2, QPS, now_s=now)
        rates.append(float(d.reason.split("qps ")[1].split(" ")[0]))
        downs += d.direction == "down"
        from_one = decide_qps(arrivals_samples, inflight, 1, QPS, now_s=now)
        assert from_one.desired_replicas == 1  # never scales up, though half are queued
    mean_rate = sum(rates) / len(rates)
    assert mean_rate == pytest.approx(8 / service_s, rel=0.1)  # λ ≈ 0.24/s
    assert mean_rate < 0.5  # under the scale-up threshold although half are queued
    assert min(rates) == 0.0  # a window between clustered completions reads 0 ...
    assert downs > 0  # ... and the baseline scales a full system down
    # The saturation policy on the same L: 8 in flight / 4 slots = 2 replicas, steadily.
    sat = decide(inflight, SPEC, now_s=horizon[-1], ready_replicas=1)
    assert (sat.desired_replicas, sat.saturation) == (2, 2.0)


def test_qps_thresholds_scale_with_time_scale() -> None:
    spec = PolicySpec(
        queue_headroom=0.0, scale_down_window_s=60.0, policy="qps", time_scale=0.1
    )  # the 10 s window is 1 s of wall time
    now = 100.0
    arrivals = [now - 0.9 + 0.1 * i for i in range(6)]  # 6 in the last (scaled) 10 s
    samples = counter(arrivals, [now - 2 + 0.1 * i for i in range(21)])
    d = decide_qps(samples, [Sample(now, 8.0)], 1, spec, now_s=now)
    assert d.desired_replicas == 2


def test_qps_needs_history() -> None:
    with pytest.raises(NoSamples):
        decide_qps([Sample(1000.0, 5.0)], [Sample(1000.0, 1.0)], 1, QPS, now_s=1000.0)


def test_evaluate_dispatches_on_policy() -> None:
    window = Window(
        inflight=tuple(series([8.0] * 80)),
        arrivals_total=tuple(series([0.0] * 80)),
        ready_replicas=tuple(series([1.0] * 80)),
    )
    assert evaluate(window, SPEC, 1000.0).desired_replicas == 2
    qps = evaluate(window, QPS, 1000.0)
    assert (qps.policy, qps.desired_replicas) == ("qps", 1)  # 0 arrivals, L 8: down, floor 1
    with pytest.raises(NoSamples, match="ready"):
        evaluate(Window(inflight=window.inflight), QPS, 1000.0)


# --- partial data (a gap, a router down, a stale series): raise or keep, never lower ----
GAPPY = PolicySpec(
    queue_headroom=0.0, scale_up_window_s=10.0, scale_down_window_s=60.0, max_sample_gap_s=3.0
)
DOWN = Partial(names.SCALER_ERROR_SOURCE_PARTIAL, "1 target(s) feeding L were down: router/b")


def _series(ranges: list[tuple[float, float, float]]) -> list[Sample]:
    """One sample a second over each (start, end, value)."""
    return [Sample(float(t), v) for a, b, v in ranges for t in range(int(a), int(b) + 1)]


def test_a_gap_that_would_lower_the_count_holds_it() -> None:
    """L was 3 before a 40 s outage and 3 after it; during it nobody knows (the chaos run
    saw 13 on 12 slots there). The window's max (3) would scale 3 replicas down to 1: the
    answer keeps 3 (3 x 4 = 12), active. (Before: NoSamples, and KEDA's fallback.)"""
    samples = _series([(930, 950, 3.0), (990, 1000, 3.0)])
    d = decide(samples, GAPPY, 1000.0, ready_replicas=3)
    assert (d.value, d.desired_replicas, d.active, d.direction) == (12.0, 3, True, "hold")
    assert [p.kind for p in d.partial] == [names.SCALER_ERROR_SOURCE_STALE]
    assert "40.0 s gap" in d.reason and "would lower the count to 1" in d.reason
    # The same samples without a gap limit: the scale-down the fault run caught.
    assert decide(samples, SPEC, 1000.0, ready_replicas=3).desired_replicas == 1


def test_a_gap_in_the_window_still_scales_up_and_holds() -> None:
    samples = _series([(930, 950, 3.0), (990, 1000, 12.0)])
    up = decide(samples, GAPPY, 1000.0, ready_replicas=2)
    assert (up.value, up.desired_replicas, up.direction) == (12.0, 3, "up")  # the data's own
    assert up.partial and "raises or keeps" in up.reason
    assert decide(samples, GAPPY, 1000.0, ready_replicas=3).desired_replicas == 3  # hold


def test_a_history_that_starts_inside_the_window_at_the_minimum_is_answered() -> None:
    """A fresh stack: 10 s of samples for a 70 s window, idle, one replica, minReplicaCount
    1. The window's 0 settles at the minimum, 1: it lowers nothing, so it is answered as
    it is. (Before: "no scale-down from 1 to 0 replicas on partial data", UNAVAILABLE for
    the 120 s ``inflight up`` waited for its first metric on a loaded machine.)"""
    samples = _series([(990, 1000, 0.0)])
    at_min = PolicySpec(queue_headroom=0.0, scale_up_window_s=10.0, scale_down_window_s=60.0,
                        max_sample_gap_s=3.0,
                        min_replicas=1, max_replicas=2)  # fmt: skip
    d = decide(samples, at_min, 1000.0, ready_replicas=1)
    assert (d.value, d.desired_replicas, d.active) == (0.0, 0, False)
    assert d.partial
    # minReplicaCount 0: the 0 would scale to zero, so the count is held, and active.
    held = decide(samples, GAPPY, 1000.0, ready_replicas=1)
    assert (held.value, held.desired_replicas, held.active) == (4.0, 1, True)
    # two ready above the minimum of 1: a scale-down to 1 on partial data, held at 2
    assert decide(samples, at_min, 1000.0, ready_replicas=2).value == 8.0


def test_ready_unknown_scales_up_to_the_maximum_and_refuses_below_it() -> None:
    """Without a ready count only an answer at maxReplicaCount is known not to lower the
    count. (Before: every partial window with an unknown count was refused, scale-up too.)"""
    spec = PolicySpec(queue_headroom=0.0, scale_up_window_s=10.0, scale_down_window_s=60.0,
                      max_sample_gap_s=3.0,
                      min_replicas=1, max_replicas=3)  # fmt: skip
    surge = decide(_series([(990, 1000, 20.0)]), spec, 1000.0)
    assert (surge.value, surge.desired_replicas, surge.direction) == (20.0, 5, "unknown")
    assert "cannot lower" in surge.reason
    with pytest.raises(NoSamples, match=r"ready replica count is unknown.*settle at 2"):
        decide(_series([(990, 1000, 6.0)]), spec, 1000.0)
    # whole data needs no ready count at all
    assert decide(_series([(930, 1000, 6.0)]), spec, 1000.0).desired_replicas == 2


@pytest.mark.parametrize(
    ("l_value", "ready", "min_max", "answer", "desired", "active"),
    [
        (20.0, 2, (1, 10), 20.0, 5, True),  # up on partial data: the true L is higher still
        (8.0, 2, (1, 10), 8.0, 2, True),  # what the data says keeps the count: as is
        (6.0, 3, (1, 10), 12.0, 3, True),  # would lower 3 -> 2: hold 3 x 4
        (0.0, 2, (0, 10), 8.0, 2, True),  # would scale to zero: hold, and active
        (0.0, 1, (1, 10), 0.0, 0, False),  # settles at the minimum = ready: nothing lowers
        (3.0, 5, (1, 4), 16.0, 4, True),  # ready above the maximum: held at the maximum
        (0.0, 0, (0, 10), 0.0, 0, False),  # none ready: nothing to lower
    ],
)
def test_a_window_with_a_router_down_raises_or_keeps_never_lowers(
    l_value: float,
    ready: int,
    min_max: tuple[int, int],
    answer: float,
    desired: int,
    active: bool,
) -> None:
    """The source found a router down in the window (``Window.partial``): every policy's
    answer goes through the guard. (Before: SourcePartial, UNAVAILABLE, in every row.)"""
    spec = PolicySpec(queue_headroom=0.0, scale_up_window_s=10.0, scale_down_window_s=60.0,
                      min_replicas=min_max[0], max_replicas=min_max[1])  # fmt: skip
    window = Window(
        inflight=tuple(series([l_value] * 80)),
        ready_replicas=(Sample(1000.0, float(ready)),),
        partial=(DOWN,),
    )
    d = evaluate(window, spec, 1000.0)
    assert (d.value, d.desired_replicas, d.active) == (answer, desired, active)
    assert d.partial == (DOWN,) and "router/b" in d.reason


def test_the_qps_baseline_is_guarded_too() -> None:
    """qps 0 on 3 ready (one request in flight) says 2; on a window with a router down it
    keeps 3."""
    spec = PolicySpec(
        queue_headroom=0.0, scale_down_window_s=60.0, policy="qps", min_replicas=1, max_replicas=10
    )
    window = Window(
        inflight=(Sample(1000.0, 1.0),),
        arrivals_total=(Sample(985.0, 50.0), Sample(1000.0, 50.0)),
        ready_replicas=(Sample(1000.0, 3.0),),
    )
    assert evaluate(window, spec, 1000.0).desired_replicas == 2
    held = evaluate(dataclasses.replace(window, partial=(DOWN,)), spec, 1000.0)
    assert (held.value, held.desired_replicas, held.active) == (12.0, 3, True)


def test_a_whole_window_within_the_gap_limit_scales_down() -> None:
    samples = [Sample(930.0 + 2.5 * i, 3.0) for i in range(29)]  # every 2.5 s, limit 3
    assert decide(samples, GAPPY, 1000.0, ready_replicas=3).desired_replicas == 1
