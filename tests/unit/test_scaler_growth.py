"""The start-up-aware headroom (``growthHorizonSeconds``): worked examples and limits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import Sample, Window, decide, evaluate, growth_headroom
from tests.unit.policy_pins import STAGE_ALONE_SPEC

GROWING = replace(STAGE_ALONE_SPEC, growth_horizon_s=120.0, growth_window_s=60.0)


def arrivals(rates: list[float], step_s: float = 5.0, end_s: float = 1000.0) -> list[Sample]:
    """The arrivals running total, sampled every ``step_s``, one rate per step (oldest
    first), ending at ``end_s``."""
    total, out = 0.0, [Sample(end_s - len(rates) * step_s, 0.0)]
    for i, rate in enumerate(rates):
        total += rate * step_s
        out.append(Sample(end_s - (len(rates) - 1 - i) * step_s, total))
    return out


def flat(value: float, step_s: float = 5.0, end_s: float = 1000.0, n: int = 30) -> list[Sample]:
    return [Sample(end_s - (n - 1 - i) * step_s, value) for i in range(n)]


def test_worked_example_of_the_docstring() -> None:
    # 240 arrivals in (880, 940], 300 in (940, 1000]: 4 -> 5 req/s; mean L 20 -> W 4 s.
    a = arrivals([4.0] * 12 + [5.0] * 12)
    assert growth_headroom(flat(20.0), a, GROWING, 1000.0) == pytest.approx(8.0)


def test_steady_or_falling_rate_adds_nothing() -> None:
    assert growth_headroom(flat(20.0), arrivals([5.0] * 24), GROWING, 1000.0) == 0.0
    assert growth_headroom(flat(20.0), arrivals([5.0] * 12 + [4.0] * 12), GROWING, 1000.0) == 0.0


def test_off_by_default_and_without_history() -> None:
    a = arrivals([4.0] * 12 + [5.0] * 12)
    assert (
        growth_headroom(
            flat(20.0),
            a,
            STAGE_ALONE_SPEC,
            1000.0,
        )
        == 0.0
    )
    # Only one window of history: no rate to compare with.
    assert growth_headroom(flat(20.0), arrivals([5.0] * 12), GROWING, 1000.0) == 0.0


def test_decide_pads_the_current_l_and_says_why() -> None:
    a = arrivals([4.0] * 12 + [5.0] * 12)
    d = decide(flat(20.0), GROWING, 1000.0, ready_replicas=5, arrivals=a)
    assert d.value == pytest.approx(28.0)
    assert d.desired_replicas == 7
    assert d.reason.startswith("growing:")
    # Without the arrivals (or with the horizon off) the value is L's plain maximum.
    assert decide(flat(20.0), GROWING, 1000.0, ready_replicas=5).value == 20.0
    assert (
        decide(
            flat(20.0),
            STAGE_ALONE_SPEC,
            1000.0,
            ready_replicas=5,
            arrivals=a,
        ).value
        == 20.0
    )


def test_a_settled_closed_loop_is_not_padded() -> None:
    # The seed's concurrency-4 level: L = 4 on one replica, a steady 0.89 req/s.
    w = Window(inflight=tuple(flat(4.0)), arrivals_total=tuple(arrivals([0.89] * 30)))
    assert evaluate(w, GROWING, 1000.0).desired_replicas == 1


def test_lookback_covers_two_growth_windows() -> None:
    # Without the floor's memory, or the late scale-up's (on by default, 900 s).
    assert replace(GROWING, floor_window_s=0.0, startup_s=0.0).lookback_s == 120.0
    assert replace(STAGE_ALONE_SPEC, floor_window_s=0.0, startup_s=0.0).lookback_s == 70.0
    # The floor (on by default): its memory (900 s) plus the smoothing is the longest; the
    # bursts' recurrence (anticipateSeconds, on by default) reads two of them.
    assert replace(STAGE_ALONE_SPEC, anticipate_s=0.0).lookback_s == 910.0
    assert GROWING.lookback_s == STAGE_ALONE_SPEC.lookback_s == 1810.0


def test_metadata_keys_scale_with_time_scale_and_are_checked() -> None:
    spec = parse_metadata(
        {names.META_GROWTH_HORIZON_S: "120", names.META_GROWTH_WINDOW_S: "30", "timeScale": "0.1"}
    ).policy
    assert spec.growth_horizon_s == pytest.approx(12.0)
    assert spec.growth_window_s == pytest.approx(3.0)
    assert parse_metadata({}).policy.growth_horizon_s == 0.0
    with pytest.raises(MetadataError, match=names.META_GROWTH_HORIZON_S):
        parse_metadata({names.META_GROWTH_HORIZON_S: "-1"})
    with pytest.raises(MetadataError, match=names.META_GROWTH_WINDOW_S):
        parse_metadata({names.META_GROWTH_WINDOW_S: "0"})


def test_the_headroom_is_held_over_the_scale_down_window() -> None:
    # The rate grew 4 -> 5 req/s up to t = 970 s, then held: at 1000 s the growth seen at
    # 970 s (one growth window ago in its own frame) still pads the value, as L's own
    # maximum is held, so a replica asked for at 970 s is not cancelled while it starts.
    a = arrivals([4.0] * 12 + [5.0] * 12 + [5.0] * 6, end_s=1000.0)
    spec = replace(STAGE_ALONE_SPEC, growth_horizon_s=120.0, growth_window_s=60.0)
    now_pad = growth_headroom(flat(20.0), a, spec, 1000.0)
    earlier_pad = growth_headroom(flat(20.0), a, spec, 970.0)
    assert earlier_pad > now_pad
    d = decide(flat(20.0), spec, 1000.0, ready_replicas=5, arrivals=a)
    assert d.value == pytest.approx(20.0 + earlier_pad)
