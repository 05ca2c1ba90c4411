"""The floor's tolerance (``floorTolerance``), stepped through time: the floor keeps a ready
replica while what it holds fits in one fewer with less than the tolerance of their capacity
to spare, and never asks for a replica the plain floor does not. Worked numbers: 4 slots a
replica (target 4), at most 8 replicas, L every 5 s, a 10 s scale-up and 60 s scale-down
window, the default recurrent floor (0.6 of the level two separate peaks reached)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import Sample, decide, floor_hold
from tests.unit.floor_cases import SPEC, blips

# ``blips``: each of the two reads 12 over the scale-up window, so the floor is 0.6 x 12 =
# 7.2 (7.2 of 2 replicas' 8).


def test_without_tolerance_the_floor_lets_the_third_replica_go() -> None:
    decision = decide(blips(), SPEC, 600.0, ready_replicas=3)
    assert decision.value == pytest.approx(7.2)
    assert decision.desired_replicas == 2


def test_a_tolerance_keeps_a_ready_replica_the_floor_nearly_fills() -> None:
    """Tolerance 0.2: 7.2 ÷ 0.8 = 9 > 8, so 3 ready replicas stay; the reason says why."""
    decision = decide(blips(), replace(SPEC, floor_tolerance=0.2), 600.0, ready_replicas=3)
    assert decision.value == pytest.approx(9.0)
    assert decision.desired_replicas == 3
    assert decision.reason.startswith("floor: ")
    assert "kept within 0.2 of 3 ready" in decision.reason


def test_a_tolerance_asks_for_no_replica_the_floor_does_not() -> None:
    """On 2 ready the same floor holds their capacity, 8: still 2, no scale-up."""
    decision = decide(blips(), replace(SPEC, floor_tolerance=0.2), 600.0, ready_replicas=2)
    assert decision.value == pytest.approx(8.0)
    assert decision.desired_replicas == 2


def test_a_floor_with_room_to_spare_still_lets_go() -> None:
    """Tolerance 0.05: 7.2 ÷ 0.95 = 7.58 fits in 2 replicas with 5 % to spare: 3 → 2."""
    decision = decide(blips(), replace(SPEC, floor_tolerance=0.05), 600.0, ready_replicas=3)
    assert decision.value == pytest.approx(7.2 / 0.95, abs=1e-3)
    assert decision.desired_replicas == 2


def test_once_the_peaks_leave_the_window_the_tolerance_holds_nothing() -> None:
    """At 1,400 s both peaks are over 900 s old: the floor is 0 and so is its hold."""
    samples = [*blips(), *(Sample(600.0 + 5.0 * i, 2.0) for i in range(1, 161))]
    decision = decide(samples, replace(SPEC, floor_tolerance=0.2), 1400.0, ready_replicas=3)
    assert decision.value == pytest.approx(2.0)
    assert decision.desired_replicas == 1


def test_floor_hold_worked_example() -> None:
    assert floor_hold(7.8, 0.1, 12.0) == pytest.approx(7.8 / 0.9)
    assert floor_hold(7.8, 0.1, 8.0) == 8.0
    assert floor_hold(7.0, 0.1, 12.0) == pytest.approx(7.0 / 0.9)  # 7.78: 2 replicas
    assert floor_hold(9.0, 0.5, 8.0) == 9.0  # never below the floor itself
    assert floor_hold(0.0, 0.5, 8.0) == 0.0
    with pytest.raises(ValueError, match="floorTolerance"):
        floor_hold(1.0, 1.0, 8.0)


def test_metadata_floor_tolerance() -> None:
    given = {names.META_FLOOR_TOLERANCE: "0.1"}
    assert parse_metadata(given, experimental=True).policy.floor_tolerance == 0.1
    with pytest.raises(MetadataError, match=r"floorTolerance.*refused by the scaler"):
        parse_metadata(given)  # the scaler's own reading: tried and not adopted
    assert parse_metadata({}).policy.floor_tolerance == 0.0  # off
    for bad in ("-0.1", "0.95", "1", "some"):
        with pytest.raises(MetadataError, match=names.META_FLOOR_TOLERANCE):
            parse_metadata({names.META_FLOOR_TOLERANCE: bad}, experimental=True)
