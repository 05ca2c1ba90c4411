"""Levels L came back to sooner than a replica could (``reboundWindowSeconds``), stepped
through time: :func:`inflight.control.recurrence.rebound_level`'s worked example, then the
policy, where such a level is held past the scale-down window and a lone peak is not.
Worked numbers: 4 slots a replica (target 4), at most 8 replicas, L every 5 s smoothed over
10 s, a 60 s scale-down window, the floor off (the rebound alone)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import PolicySpec, Sample, decide
from inflight.control.recurrence import rebound_level
from tests.unit.floor_cases import SPEC

PLAIN = replace(SPEC, floor_window_s=0.0)  # the floor off
REBOUND = replace(PLAIN, rebound_window_s=190.0)


def sawtooth(gap_end_s: float, end_s: float, step_s: float = 10.0) -> list[Sample]:
    """L 32 from 0 to 50 s and for 40 s from ``gap_end_s``, 20 otherwise."""
    out = []
    for t in (step_s * i for i in range(int(end_s / step_s) + 1)):
        high = t <= 50 or gap_end_s <= t <= gap_end_s + 40
        out.append(Sample(t, 32.0 if high else 20.0))
    return out


@pytest.mark.parametrize(
    ("gap_end_s", "now_s", "held"),
    [
        (160.0, 300.0, 32.0),  # a gap of 110 s (50 -> 160 s): held ...
        (160.0, 390.0, 32.0),  # ... until 190 s after L last reached 32 (200 s)
        (160.0, 400.0, 0.0),
        (100.0, 300.0, 0.0),  # a 50 s gap: the scale-down window held it anyway
        (260.0, 400.0, 0.0),  # a 210 s gap: the replicas could have come back
    ],
)
def test_rebound_level_worked_example(gap_end_s: float, now_s: float, held: float) -> None:
    samples = [s for s in sawtooth(gap_end_s, 600.0) if s.t_s <= now_s]
    assert rebound_level(samples, now_s, 20.0, 60.0, 190.0) == held


def test_a_lone_peak_or_a_lower_level_holds_nothing() -> None:
    lone = [Sample(10.0 * i, 32.0 if 5 <= i <= 10 else 20.0) for i in range(40)]
    assert rebound_level(lone, 390.0, 20.0, 60.0, 190.0) == 0.0
    # Only levels above ``above`` (what the value holds already) are looked for.
    back = sawtooth(160.0, 300.0)
    assert rebound_level(back, 300.0, 32.0, 60.0, 190.0) == 0.0


def test_the_highest_level_that_came_back_is_held() -> None:
    """Peaks to 40 then 32 with a 110 s gap: 40 did not come back, 32 did."""
    samples = [
        Sample(10.0 * i, 40.0 if i <= 5 else 32.0 if 16 <= i <= 20 else 20.0) for i in range(31)
    ]
    assert rebound_level(samples, 300.0, 20.0, 60.0, 190.0) == 32.0


def replicas(spec: PolicySpec, samples: list[Sample], now_s: float) -> int:
    return decide(samples, spec, now_s, ready_replicas=8).desired_replicas


def test_the_policy_holds_a_rebounding_level_past_the_scale_down_window() -> None:
    """L 32 (8 replicas) for 60 s every 150 s, 20 (5) between: the 60 s window lets the
    fleet fall to 5 each time; with ``reboundWindowSeconds`` 190 the second peak is a
    rebound (90 s below 32 between them), so 8 are kept from then on."""
    samples = []
    for t in (5.0 * i for i in range(121)):
        high = (t % 150.0) < 60.0
        samples.append(Sample(t, 32.0 if high else 20.0))
    # Between the 2nd and 3rd peaks (the 2nd ends at 210 s; L 20 from 210 to 300 s).
    assert replicas(PLAIN, samples, 290.0) == 5
    assert replicas(REBOUND, samples, 290.0) == 8
    decision = decide(samples, REBOUND, 290.0, ready_replicas=8)
    assert decision.reason.startswith("rebound: L came back to 32 within 190 s")
    # The first peak alone: nothing came back yet, the window lets go as before.
    assert replicas(REBOUND, samples, 140.0) == replicas(PLAIN, samples, 140.0) == 5


def test_a_lone_surge_is_let_go_after_the_scale_down_window() -> None:
    samples = [Sample(5.0 * i, 32.0 if 20 <= i < 40 else 20.0) for i in range(100)]
    for now_s in (270.0, 400.0, 495.0):
        assert replicas(REBOUND, samples, now_s) == replicas(PLAIN, samples, now_s) == 5


def test_metadata_rebound_window_seconds() -> None:
    given = {names.META_REBOUND_WINDOW_S: "190", names.META_TIME_SCALE: "0.1"}
    spec = parse_metadata(given, experimental=True)
    with pytest.raises(MetadataError, match=r"reboundWindowSeconds.*refused by the scaler"):
        parse_metadata(given)  # the scaler's own reading: tried and not adopted
    assert spec.policy.rebound_window_s == pytest.approx(19.0)  # time-scaled as every window
    assert parse_metadata({}).policy.rebound_window_s == names.DEFAULT_REBOUND_WINDOW_S
    for bad in ("-1", "90000", "soon"):
        with pytest.raises(MetadataError, match=names.META_REBOUND_WINDOW_S):
            parse_metadata({names.META_REBOUND_WINDOW_S: bad}, experimental=True)
