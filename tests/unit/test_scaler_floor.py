"""The floor learned from recent peaks (``floorWindowSeconds``, ``floorFraction``), stepped
through time: a burst, the quiet after it, the memory running out."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import Partial, PolicySpec, Sample, decide
from tests.unit.policy_pins import PRE_HEADROOM

# 4 slots at target 1.0, 1–8 replicas, a 600 s memory at half the peak: the floor of the
# highest peak (``floorStatistic`` peak; the default holds the recurring level, a lone peak
# lower: tests/unit/test_scaler_floor_quantile.py).
PEAK = {
    "floor_statistic": "peak",
    "floor_single_window_s": 0.0,
    "queue_headroom": 0.0,  # tests.unit.policy_pins: the settings these figures were written for
    "scale_down_window_s": 60.0,
}
FLOOR = PolicySpec(
    floor_window_s=600.0,
    floor_fraction=0.5,
    min_replicas=1,
    max_replicas=8,
    scale_up_window_s=10.0,
    **PEAK,  # type: ignore[arg-type]
)
# The floor off, and the late scale-up's hold (its 900 s of excursions) with it.
OFF = PolicySpec(
    queue_headroom=0.0,
    scale_down_window_s=60.0,
    floor_window_s=0.0,
    startup_s=0.0,
    min_replicas=1,
    max_replicas=8,
    scale_up_window_s=10.0,
)


def burst_then_quiet(end_s: float, burst: float = 20.0, quiet: float = 2.0) -> list[Sample]:
    """L every 5 s from 0 to ``end_s``: ``burst`` over [100, 160] s, ``quiet`` elsewhere."""
    return [
        Sample(t, burst if 100 <= t <= 160 else quiet)
        for t in (5.0 * i for i in range(int(end_s / 5) + 1))
    ]


@pytest.mark.parametrize(
    ("now_s", "value", "replicas"),
    [
        (150.0, 20.0, 5),  # in the burst: L itself
        (200.0, 20.0, 5),  # within the 60 s scale-down window: L's own maximum
        (300.0, 10.0, 3),  # after it: half the burst's peak, not the quiet L of 2
        (750.0, 10.0, 3),  # still within 600 s of the burst (smoothed L 11-20 until 165 s)
        (800.0, 2.0, 1),  # the burst has left the memory: the quiet L alone
    ],
)
def test_the_floor_holds_a_fraction_of_the_peak_for_the_floor_window(
    now_s: float, value: float, replicas: int
) -> None:
    d = decide(burst_then_quiet(now_s), FLOOR, now_s, ready_replicas=5)
    assert d.value == pytest.approx(value)
    assert d.desired_replicas == replicas


def test_off_the_quiet_after_the_burst_reads_the_quiet_l() -> None:
    d = decide(burst_then_quiet(300.0), OFF, 300.0, ready_replicas=5)
    assert d.value == pytest.approx(2.0) and d.desired_replicas == 1
    # The floor's 600 s memory + the smoothing (the late scale-up's 900 s off); two of them
    # with the bursts' recurrence (anticipateSeconds, on by default).
    alone = replace(FLOOR, anticipate_s=0.0, startup_s=0.0)
    assert OFF.lookback_s == 70.0 and alone.lookback_s == 610.0
    assert FLOOR.lookback_s == 1210.0


def test_the_reason_names_the_floor() -> None:
    d = decide(burst_then_quiet(300.0), FLOOR, 300.0, ready_replicas=5)
    assert d.reason.startswith("floor: 0.5 x the peak of L over the last 600 s")


def test_a_peak_beyond_the_maximum_fleet_is_remembered_as_the_maximum_fleet() -> None:
    # 100 in flight (a queue) on a fleet of at most 8 x 4 = 32 slots: the floor is half of
    # 32, 16 (4 replicas), not half of 100 (50: all 8).
    d = decide(burst_then_quiet(300.0, burst=100.0), FLOOR, 300.0, ready_replicas=8)
    assert d.value == pytest.approx(16.0) and d.desired_replicas == 4


def test_the_floor_only_raises() -> None:
    # A quiet L above half the peak: the value is L's own.
    d = decide(burst_then_quiet(300.0, burst=20.0, quiet=12.0), FLOOR, 300.0, ready_replicas=5)
    assert d.value == pytest.approx(12.0)


def test_partial_data_still_never_lowers_the_count() -> None:
    # A router down: the floor's answer (3 replicas) is below the 5 ready, so the guard
    # holds 5, as it does without the floor.
    part = (Partial(names.SCALER_ERROR_SOURCE_PARTIAL, "a router was down at 290 s"),)
    d = decide(burst_then_quiet(300.0), FLOOR, 300.0, ready_replicas=5, partial=part)
    assert d.desired_replicas == 5 and d.value == pytest.approx(20.0)
    assert d.partial == part


def test_a_gap_older_than_the_scale_down_window_does_not_make_the_window_partial() -> None:
    # No sample from 200 to 400 s: outside the 70 s the scale-down decides on, the gap only
    # leaves the floor less to remember (it can only read lower, as the policy without it).
    samples = [s for s in burst_then_quiet(600.0) if not 200 < s.t_s < 400]
    gapped = PolicySpec(**{**FLOOR.__dict__, "max_sample_gap_s": 15.0})
    d = decide(samples, gapped, 600.0, ready_replicas=5)
    assert d.partial == () and d.desired_replicas == 3


def test_metadata_keys_scale_with_time_scale_and_are_checked() -> None:
    spec = parse_metadata(
        {names.META_FLOOR_WINDOW_S: "600", names.META_FLOOR_FRACTION: "0.4", "timeScale": "0.1"}
    ).policy
    assert spec.floor_window_s == pytest.approx(60.0)
    assert spec.floor_fraction == pytest.approx(0.4)
    for key, bad in ((names.META_FLOOR_WINDOW_S, "-1"), (names.META_FLOOR_FRACTION, "1.5")):
        with pytest.raises(MetadataError, match=key):
            parse_metadata({**PRE_HEADROOM, key: bad})


values_st = st.lists(st.integers(min_value=0, max_value=64).map(float), min_size=1, max_size=200)


@settings(max_examples=200, deadline=None)
@given(
    values=values_st,
    fraction=st.sampled_from([0.25, 0.6, 1.0]),
    window_s=st.sampled_from([30.0, 120.0, 900.0]),
    max_replicas=st.integers(1, 20),
    quiet=st.integers(0, 150),
)
def test_the_floor_is_the_windows_value_or_the_remembered_peak_whichever_is_higher(
    values: list[float], fraction: float, window_s: float, max_replicas: int, quiet: int
) -> None:
    """value = max(the value without the floor, fraction x min(peak, max x target)), where
    the peak is the highest smoothed L whose time is within the floor window; ``quiet``
    samples of 0 end the series, so the remembered peak is older than the window's L."""
    values = [*values, *([0.0] * quiet)]
    samples = [Sample(1000.0 - (len(values) - 1 - i) * 5.0, v) for i, v in enumerate(values)]
    on = PolicySpec(
        floor_window_s=window_s,
        floor_fraction=fraction,
        max_replicas=max_replicas,
        **PEAK,  # type: ignore[arg-type]
    )
    off = PolicySpec(
        queue_headroom=0.0, scale_down_window_s=60.0, floor_window_s=0.0, max_replicas=max_replicas
    )
    base = decide(samples, off, 1000.0).value
    smoothed = [
        (a.value + b.value) / 2
        for a, b in itertools.pairwise(samples)
        if b.t_s >= 1000.0 - window_s
    ]
    peak = max([*smoothed, *([samples[0].value] if samples[0].t_s >= 1000.0 - window_s else [])])
    floor = fraction * min(peak, max_replicas * on.target)
    assert decide(samples, on, 1000.0).value == pytest.approx(max(base, floor), abs=1e-6)
