"""The floor's two variants, stepped through time: a peak that decays over the floor window
(``floorDecay`` "linear") and a peak capped at the L the arrivals needed (``floorPeak``
"demand": arrival rate x the served requests' service time, not the queue)."""

from __future__ import annotations

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import PolicySpec, Sample, Window, decide, evaluate, service_time

BASE = {
    "queue_headroom": 0.0,  # tests.unit.policy_pins: the settings these figures were written for
    "scale_down_window_s": 60.0,
    "floor_window_s": 600.0,
    "floor_fraction": 0.5,
    "min_replicas": 1,
    "max_replicas": 8,
    "scale_up_window_s": 10.0,
    "floor_statistic": "peak",  # the variants of the highest peak's floor
    "floor_single_window_s": 0.0,
    "slo_ttft_s": 0.0,  # the floors alone, L in full (the SLO stage counts it at S ÷ (S + TTFT))
}
FLAT = PolicySpec(**BASE)  # type: ignore[arg-type]
LINEAR = PolicySpec(**BASE, floor_decay="linear")  # type: ignore[arg-type]
DEMAND = PolicySpec(**BASE, floor_peak="demand")  # type: ignore[arg-type]


def burst_then_quiet(end_s: float, burst: float = 20.0, quiet: float = 2.0) -> list[Sample]:
    """L every 5 s from 0 to ``end_s``: ``burst`` over [100, 160] s, ``quiet`` elsewhere."""
    return [
        Sample(t, burst if 100 <= t <= 160 else quiet)
        for t in (5.0 * i for i in range(int(end_s / 5) + 1))
    ]


@pytest.mark.parametrize(
    ("now_s", "flat", "linear"),
    [
        # The burst's last smoothed 20 is at 160 s; linear weighs it by 1 - age / 600.
        (250.0, 10.0, 10.0 * (1 - 90 / 600)),
        (400.0, 10.0, 10.0 * (1 - 240 / 600)),
        (700.0, 10.0, 2.0),  # 10 x (1 - 540/600) = 1.0, below the quiet L of 2
        (780.0, 2.0, 2.0),  # the burst has left the window either way
    ],
)
def test_a_linear_floor_decays_with_the_peaks_age(now_s: float, flat: float, linear: float) -> None:
    samples = burst_then_quiet(now_s)
    assert decide(samples, FLAT, now_s, ready_replicas=3).value == pytest.approx(flat)
    assert decide(samples, LINEAR, now_s, ready_replicas=3).value == pytest.approx(linear, abs=1e-6)


def test_the_linear_floor_never_exceeds_the_flat_one_and_only_falls_in_the_quiet() -> None:
    values = [decide(burst_then_quiet(t), LINEAR, t).value for t in range(240, 800, 20)]
    flats = [decide(burst_then_quiet(t), FLAT, t).value for t in range(240, 800, 20)]
    assert all(v <= f + 1e-9 for v, f in zip(values, flats, strict=True))
    assert values == sorted(values, reverse=True)
    assert values[0] > 2.0 and values[-1] == pytest.approx(2.0)


def test_the_reason_says_the_floor_decays() -> None:
    d = decide(burst_then_quiet(300.0), LINEAR, 300.0, ready_replicas=5)
    assert d.reason.startswith("floor: 0.5 x the peak of L over the last 600 s, decayed by age")


def test_service_time_counts_the_slots_in_use_not_the_queue() -> None:
    # The docstring's example: 1 replica of 4 slots, L 10 for 100 s, 40 arrivals.
    inflight = [Sample(float(t), 10.0) for t in range(0, 101, 5)]
    arrivals = [Sample(float(t), 0.4 * t) for t in range(0, 101, 5)]
    ready = [Sample(0.0, 1.0)]
    assert service_time(inflight, arrivals, ready, 4, 100.0) == pytest.approx(10.0)
    # Without the ready count the slots in use are L itself: Little's W, 25 s.
    assert service_time(inflight, arrivals, (), 4, 100.0) == pytest.approx(25.0)
    # Nothing completed (the queue grew by every arrival): no estimate.
    growing = [Sample(float(t), 0.4 * t) for t in range(0, 101, 5)]
    assert service_time(growing, arrivals, ready, 4, 100.0) is None
    assert service_time(inflight[:1], arrivals, ready, 4, 100.0) is None
    assert service_time(inflight, (), ready, 4, 100.0) is None


def queue_burst(end_s: float) -> tuple[list[Sample], list[Sample], list[Sample]]:
    """1 replica of 4 slots, requests of 2 s. Quiet: 1 req/s, L 2. A 20 s burst of 10 req/s
    over [100, 120) s queues 160 requests beyond the 2 req/s served: L climbs to 164 and
    drains at 1 req/s net until 280 s. Sampled every second."""
    inflight, arrivals, total, queue = [], [], 0.0, 0.0
    for t in range(int(end_s) + 1):
        rate = 10.0 if 100 <= t < 120 else 1.0
        queue = max(0.0, queue + rate - 2.0) if t >= 100 else 0.0
        inflight.append(Sample(float(t), 4.0 + queue if queue else 2.0 * rate))
        arrivals.append(Sample(float(t), total))
        total += rate
    return inflight, arrivals, [Sample(0.0, 1.0)]


def test_a_demand_floor_remembers_the_arrivals_need_not_the_queue() -> None:
    inflight, arrivals, ready = queue_burst(400.0)
    flat = decide(inflight, FLAT, 400.0, ready_replicas=1)
    # L's peak is queue (164, capped at 8 x 4 = 32): the flat floor holds 0.5 x 32 = 16.
    assert flat.value == pytest.approx(16.0) and flat.desired_replicas == 4
    served = service_time(
        [s for s in inflight if s.t_s >= 400.0 - 600.0], arrivals, ready, 4, 400.0
    )
    assert served is not None
    assert served == pytest.approx(2.0, rel=0.02)  # the requests' 2 s, not their wait
    demand = decide(
        inflight, DEMAND, 400.0, ready_replicas=1, arrivals=arrivals, ready_series=ready
    )
    # The burst needed 10 req/s x 2 s = 20 in flight, not 164: the floor holds 10.
    assert demand.value == pytest.approx(0.5 * 10.0 * served, rel=1e-6)
    assert demand.value < flat.value
    assert "capped at arrivals x" in demand.reason


def test_evaluate_hands_the_ready_series_to_the_demand_floor() -> None:
    inflight, arrivals, ready = queue_burst(400.0)
    window = Window(tuple(inflight), tuple(arrivals), tuple(ready))
    direct = decide(
        inflight, DEMAND, 400.0, ready_replicas=1, arrivals=arrivals, ready_series=ready
    )
    assert evaluate(window, DEMAND, 400.0).value == pytest.approx(direct.value)


def test_a_demand_floor_without_arrivals_is_the_plain_floor() -> None:
    # Plain vLLM (no arrivals counter): nothing to cap with, so L's own peak.
    inflight, _, ready = queue_burst(400.0)
    d = decide(inflight, DEMAND, 400.0, ready_replicas=1, ready_series=ready)
    assert d.value == decide(inflight, FLAT, 400.0, ready_replicas=1).value


def test_the_demand_cap_never_raises_the_floor() -> None:
    # Steady traffic, no queue: the cap is about L itself, the value is L's.
    inflight = [Sample(float(t), 8.0) for t in range(0, 701)]
    arrivals = [Sample(float(t), 4.0 * t) for t in range(0, 701)]
    ready = [Sample(0.0, 2.0)]
    d = decide(inflight, DEMAND, 700.0, ready_replicas=2, arrivals=arrivals, ready_series=ready)
    assert d.value == pytest.approx(8.0)


def test_metadata_keys_are_parsed_defaulted_and_checked() -> None:
    default = parse_metadata({}).policy
    assert (default.floor_decay, default.floor_peak) == ("none", "inflight")
    given = {names.META_FLOOR_DECAY: "linear", names.META_FLOOR_PEAK: "demand"}
    spec = parse_metadata(given, experimental=True)
    assert (spec.policy.floor_decay, spec.policy.floor_peak) == ("linear", "demand")
    # The scaler's own reading: both were tried and not adopted; their defaults stay.
    for key, value in given.items():
        with pytest.raises(MetadataError, match=rf"{key}.*refused by the scaler"):
            parse_metadata({key: value})
    assert parse_metadata({names.META_FLOOR_DECAY: "none"}).policy.floor_decay == "none"
    for key, bad in ((names.META_FLOOR_DECAY, "exp"), (names.META_FLOOR_PEAK, "queue")):
        with pytest.raises(MetadataError, match=key):
            parse_metadata({key: bad}, experimental=True)
