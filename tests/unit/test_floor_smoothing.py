"""The floor's smoothing (``floorSmoothingSeconds``), stepped through time: a burst shorter
than the scale-up window keeps its height in the floor's memory when the floor remembers each
scraped sample (0), and is halved by the scale-up window's mean otherwise (the default).
Worked numbers: 4 slots a replica (target 4), at most 8 replicas, L every 5 s, a 10 s
scale-up and 60 s scale-down window, the default recurrent floor (0.6 of the level two
separate peaks reached)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import decide
from tests.unit.floor_cases import SPEC, blips

RAW = replace(SPEC, floor_smoothing_s=0.0)


def test_the_default_floor_remembers_the_scale_up_windows_mean() -> None:
    """Smoothed over 10 s (two samples), each blip reads 12: floor 0.6 x 12 = 7.2."""
    decision = decide(blips(), SPEC, 600.0, ready_replicas=2)
    assert decision.value == pytest.approx(7.2)
    assert decision.desired_replicas == 2


def test_each_scraped_sample_keeps_a_short_bursts_height() -> None:
    """Remembered as scraped, each blip reads 22: floor 0.6 x 22 = 13.2 (4 replicas); the
    value's own maximum is still the scale-up window's mean (2 once the blips are past)."""
    decision = decide(blips(), RAW, 600.0, ready_replicas=2)
    assert decision.value == pytest.approx(13.2)
    assert decision.desired_replicas == 4
    assert decision.reason.startswith("floor: ")


def test_metadata_floor_smoothing_seconds() -> None:
    given = {names.META_FLOOR_SMOOTHING_S: "5", names.META_TIME_SCALE: "0.1"}
    spec = parse_metadata(given, experimental=True)
    assert spec.policy.floor_smoothing_s == pytest.approx(0.5)  # time-scaled as every window
    zero = {names.META_FLOOR_SMOOTHING_S: "0"}
    assert parse_metadata(zero, experimental=True).policy.floor_smoothing_s == 0.0
    for tried in (given, zero):  # the scaler's own reading: tried and not adopted
        with pytest.raises(MetadataError, match=r"floorSmoothingSeconds.*refused by the scaler"):
            parse_metadata(tried)
    assert parse_metadata({}).policy.floor_smoothing_s is None  # the scale-up window
    for bad in ("-1", "90000", "short"):
        with pytest.raises(MetadataError, match=names.META_FLOOR_SMOOTHING_S):
            parse_metadata({names.META_FLOOR_SMOOTHING_S: bad}, experimental=True)
