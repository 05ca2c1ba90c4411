"""The floor for peaks no scale-up meets (``floorShortFraction``), stepped through time: the
recurrent level of peaks that each ended sooner than ``startupSeconds`` is held at that
fraction instead of ``floorFraction``'s; longer peaks keep the plain floor. Worked numbers:
``tests/unit/floor_cases.py`` (target 4, L every 5 s, 10 s scale-up window, 0.6 of the
level two separate peaks reached), with a 30 s start-up."""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import decide
from inflight.control.recurrence import short_recurrent
from inflight.control.samples import Sample
from tests.unit.floor_cases import SPEC, blips

STARTED = replace(SPEC, startup_s=30.0)
SHORT = replace(STARTED, floor_short_fraction=0.8)


def long_bursts() -> list[Sample]:
    """L 2 every 5 s to 600 s, and 22 for 60 s from 100 s and from 400 s."""
    return [
        Sample(t, 22.0 if 100.0 <= t < 160.0 or 400.0 <= t < 460.0 else 2.0)
        for t in (5.0 * i for i in range(121))
    ]


def test_short_recurrent_worked_example() -> None:
    short = [2, 16, 2, 2, 14, 14, 2, 2]
    assert short_recurrent([Sample(5.0 * i, v) for i, v in enumerate(short)], 2, 30, 0, 20) == 14
    long_second = [2, 16, 2, 2, *[14] * 8, 2, 2]
    samples = [Sample(5.0 * i, v) for i, v in enumerate(long_second)]
    assert short_recurrent(samples, 2, 30, 0, 20) == 0.0
    # Only levels in [low, high] are tried.
    assert short_recurrent([Sample(5.0 * i, v) for i, v in enumerate(short)], 2, 30, 15, 20) == 0


def test_blips_shorter_than_a_start_up_hold_the_short_fraction() -> None:
    """Each blip reads 12 over the scale-up window for 10 s (< 30 s): 0.8 x 12 = 9.6, 3
    replicas, where the plain floor holds 0.6 x 12 = 7.2, 2 replicas."""
    plain = decide(blips(), STARTED, 600.0, ready_replicas=3)
    assert plain.value == pytest.approx(7.2)
    assert plain.desired_replicas == 2
    decision = decide(blips(), SHORT, 600.0, ready_replicas=3)
    assert decision.value == pytest.approx(9.6)
    assert decision.desired_replicas == 3
    assert decision.reason.startswith("floor: ")
    assert "0.8 x 12, reached in peaks shorter than 30 s" in decision.reason


def test_bursts_longer_than_a_start_up_keep_the_plain_floor() -> None:
    """60 s at L 22, twice: a scale-up meets them, so 0.6 x 22 = 13.2 either way."""
    samples = long_bursts()
    assert decide(samples, STARTED, 600.0, ready_replicas=4).value == pytest.approx(13.2)
    assert decide(samples, SHORT, 600.0, ready_replicas=4).value == pytest.approx(13.2)


def test_off_without_a_start_up_or_below_the_floors_fraction() -> None:
    no_start_up = replace(SPEC, floor_short_fraction=0.8)  # startup_s 0: nothing is short
    assert decide(blips(), no_start_up, 600.0, ready_replicas=3).value == pytest.approx(7.2)
    lower = replace(STARTED, floor_short_fraction=0.5)  # never below floorFraction's hold
    assert decide(blips(), lower, 600.0, ready_replicas=3).value == pytest.approx(7.2)


def test_once_the_peaks_leave_the_window_nothing_is_held() -> None:
    samples = [*blips(), *(Sample(600.0 + 5.0 * i, 2.0) for i in range(1, 161))]
    decision = decide(samples, SHORT, 1400.0, ready_replicas=3)
    assert decision.value == pytest.approx(2.0)
    assert decision.desired_replicas == 1


def test_metadata_floor_short_fraction() -> None:
    spec = parse_metadata({names.META_FLOOR_SHORT_FRACTION: "0.8"}, experimental=True)
    assert spec.policy.floor_short_fraction == 0.8
    with pytest.raises(MetadataError, match=r"floorShortFraction.*refused by the scaler"):
        parse_metadata({names.META_FLOOR_SHORT_FRACTION: "0.8"})  # tried, not adopted
    assert parse_metadata({names.META_FLOOR_SHORT_FRACTION: "0"}).policy.floor_short_fraction == 0
    assert parse_metadata({}).policy.floor_short_fraction == 0.0  # off
    for bad in ("-0.1", "1.5", "most"):
        with pytest.raises(MetadataError, match=names.META_FLOOR_SHORT_FRACTION):
            parse_metadata({names.META_FLOOR_SHORT_FRACTION: bad}, experimental=True)
