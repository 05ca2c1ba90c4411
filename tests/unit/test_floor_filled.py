"""The floor keeps the fleet flashes filled (``floorFilledFlashes``), stepped through time.

A flash: L (smoothed over the scale-up window) above the ready fleet's capacity while that
fleet was ready, over, L falling, sooner than ``startupSeconds``: no replica asked for in
it could have served it. The floor keeps the largest fleet that many flashes filled in its
window. Worked numbers: 4 slots a replica (target 4), at most 8 replicas, L 2 every 5 s and
one scrape of 24.5 at 100 s and at 400 s (each reads 13.25 over the 10 s scale-up window:
above 3 replicas' 12, for 5 s), start-up 30 s, the default recurrent floor (0.6 x 13.25 =
7.95: 2 replicas).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import Sample, decide, filled_fleet
from tests.unit.floor_cases import SPEC

LATE = replace(SPEC, startup_s=30.0)
FILLED = replace(LATE, floor_filled_flashes=1)
THREE = [Sample(0.0, 3.0)]


def flashes(end_s: float = 600.0, at: tuple[float, ...] = (100.0, 400.0)) -> list[Sample]:
    return [Sample(5.0 * i, 24.5 if 5.0 * i in at else 2.0) for i in range(int(end_s / 5) + 1)]


def smoothed(samples: list[Sample]) -> list[Sample]:
    """L over the 10 s scale-up window at each sample, as the policy reads it."""
    out = []
    for s in samples:
        window = [p.value for p in samples if s.t_s - 10.0 < p.t_s <= s.t_s]
        out.append(Sample(s.t_s, sum(window) / len(window)))
    return out


def test_without_it_the_floor_lets_the_third_replica_go() -> None:
    decision = decide(flashes(), LATE, 600.0, ready_replicas=3, ready_series=THREE)
    assert decision.value == pytest.approx(7.95)
    assert decision.desired_replicas == 2


def test_a_fleet_flashes_filled_is_kept() -> None:
    decision = decide(flashes(), FILLED, 600.0, ready_replicas=3, ready_series=THREE)
    assert decision.value == pytest.approx(12.0)
    assert decision.desired_replicas == 3
    assert "the 3 replicas L filled in 1 flashes" in decision.reason
    two = replace(LATE, floor_filled_flashes=2)
    assert decide(flashes(), two, 600.0, ready_replicas=3, ready_series=THREE).value == 12.0
    three = replace(LATE, floor_filled_flashes=3)
    assert decide(flashes(), three, 600.0, ready_replicas=3, ready_series=THREE).value == 7.95


def test_a_surge_longer_than_a_start_up_is_no_flash() -> None:
    """L 13.25 for 60 s on 3 ready: above their 12 for longer than the 30 s start-up."""
    surge = [Sample(s.t_s, 13.25 if 100.0 <= s.t_s < 160.0 else 2.0) for s in flashes()]
    assert filled_fleet(smoothed(surge), THREE, FILLED) == 0
    assert filled_fleet(smoothed(flashes()), THREE, FILLED) == 3


def test_the_fleet_that_was_filled_not_the_one_ready_now() -> None:
    """2 ready until 300 s, 3 after: the first flash filled 2 (13.25 > 8), the second 3. The
    largest fleet filled once is 3; none was filled twice; the first alone says 2."""
    ready = [Sample(0.0, 2.0), Sample(300.0, 3.0)]
    levels = smoothed(flashes())
    assert filled_fleet(levels, ready, FILLED) == 3
    assert filled_fleet(levels, ready, replace(FILLED, floor_filled_flashes=2)) == 0
    only_first = smoothed(flashes(at=(100.0,)))
    assert filled_fleet(only_first, ready, FILLED) == 2


def test_a_flash_ended_by_a_change_of_the_fleet_is_not_counted() -> None:
    """A 4th replica ready from 100 s to 200 s, while the first flash had L above 12 on 3
    (from 95 s): that stretch ended by the fleet, not by L, so 3 was filled once (at 400 s),
    not twice. (The 4 were filled too, for a moment: L read 24.5 > 16 at 100 s.)"""
    ready = [Sample(0.0, 3.0), Sample(100.0, 4.0), Sample(200.0, 3.0)]
    levels = smoothed(flashes(end_s=600.0, at=(95.0, 100.0, 400.0)))
    assert filled_fleet(levels, ready, replace(FILLED, floor_filled_flashes=2)) == 0
    assert filled_fleet(levels, ready, FILLED) == 4


def test_once_the_flashes_leave_the_window_nothing_is_kept() -> None:
    """At 1,400 s both flashes are over 900 s old."""
    decision = decide(flashes(1400.0), FILLED, 1400.0, ready_replicas=3, ready_series=THREE)
    assert decision.value == pytest.approx(2.0)
    assert decision.desired_replicas == 1


def test_metadata_floor_filled_flashes() -> None:
    assert parse_metadata({}).policy.floor_filled_flashes == 0
    given = {names.META_FLOOR_FILLED_FLASHES: "2"}
    assert parse_metadata(given, experimental=True).policy.floor_filled_flashes == 2
    with pytest.raises(MetadataError, match=r"floorFilledFlashes.*refused by the scaler"):
        parse_metadata(given)  # the scaler's own reading: tried and not adopted
    for bad in ("1.5", "-1", "101", "two"):
        with pytest.raises(MetadataError, match=names.META_FLOOR_FILLED_FLASHES):
            parse_metadata({names.META_FLOOR_FILLED_FLASHES: bad}, experimental=True)
