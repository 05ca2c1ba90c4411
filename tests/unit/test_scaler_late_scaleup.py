"""No scale-up that cannot arrive in time (``startupSeconds``, 30 s by default), stepped
through time.

A replica asked for during an excursion of L above the ready fleet's capacity serves only
after its start-up. While the recent excursions (with the fleet now ready) all ended sooner
than a start-up, a new one like them adds no replica; one that lasts longer or rises higher
than they did scales. Worked numbers throughout: 4 slots a replica (target 4), 3 ready
(capacity 12), L every 5 s smoothed over 10 s, a 60 s scale-down window.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import (
    Excursion,
    LateHold,
    PolicySpec,
    Sample,
    decide,
    excursions,
    late_scale_up,
)

OFF = PolicySpec(
    queue_headroom=0.0,
    scale_up_window_s=10.0,
    scale_down_window_s=60.0,
    floor_window_s=0.0,  # the floor off unless a test turns it on
    startup_s=0.0,  # the hold off (30 s by default): LATE turns it on
    min_replicas=1,
    max_replicas=8,
    # The evidence as first built (the ready fleet's excursions, any fleet change a scale-up
    # in time, margin 1), which these tests work through; the defaults since
    # results/2026-12-03-fleet-change ("any", "own", 1.5) have their own tests below.
    excursion_margin=1.0,
    excursion_fleets="same",
    excursion_fleet_change="any",
)
LATE = replace(OFF, startup_s=100.0, excursion_window_s=900.0)
THREE = [Sample(0.0, 3.0)]  # 3 replicas ready throughout


def traffic(end_s: float, bursts: list[tuple[float, float, float]]) -> list[Sample]:
    """L every 5 s from 0 to ``end_s``: ``level`` inside each [start, end) burst, 2 elsewhere.

    Smoothed over 10 s, a burst of 20 reads 11 at its first sample (20 and 2) and at its
    end, so above 12 from start + 5 s to end: a [100, 160) burst is a 55 s excursion."""
    out = []
    for t in (5.0 * i for i in range(int(end_s / 5) + 1)):
        level = next((lv for a, b, lv in bursts if a <= t < b), 2.0)
        out.append(Sample(t, level))
    return out


def value(
    spec: PolicySpec, samples: list[Sample], now_s: float, ready: list[Sample] = THREE
) -> float:
    return decide(samples, spec, now_s, ready_replicas=3, ready_series=ready).value


def test_excursions_worked_example() -> None:
    levels = [Sample(10.0 * i, v) for i, v in enumerate([2, 20, 20, 2, 16, 16])]
    assert excursions(levels, THREE, 3, 4.0) == [
        Excursion(10.0, 30.0, 20.0),
        Excursion(40.0, 50.0, 16.0, ongoing=True),
    ]
    # A 4th replica ready at 20 s: the first excursion ends there, by the fleet, and L at
    # 20 s (with 4 ready) is in none.
    grew = [Sample(0.0, 3.0), Sample(20.0, 4.0), Sample(35.0, 3.0)]
    assert excursions(levels, grew, 3, 4.0) == [
        Excursion(10.0, 20.0, 20.0, fleet_changed=True),
        Excursion(40.0, 50.0, 16.0, ongoing=True),
    ]
    # Exactly at capacity is not above it; no ready series: every time counts as 3 ready.
    assert excursions([Sample(0.0, 12.0), Sample(5.0, 12.000_000_1)], (), 3, 4.0) == []


def test_late_scale_up_worked_example() -> None:
    # The docstring's: earlier excursions of 80 s (to 40) and 60 s (to 30) above 12; a new
    # one 50 s in, at 36: held. 90 s: longer than 80 s, not held; at 41: higher, not held.
    def run(lasted_s: float, peak: float, first_s: float = 80.0) -> LateHold | None:
        levels = [
            *(Sample(0.0, 2.0), Sample(100.0, 40.0), Sample(100.0 + first_s, 2.0)),
            *(Sample(400.0, 30.0), Sample(460.0, 2.0)),
            *(Sample(800.0, 2.0), Sample(810.0, peak), Sample(810.0 + lasted_s, peak)),
        ]
        return late_scale_up(levels, THREE, 3, LATE, 810.0 + lasted_s)

    held = run(50.0, 36.0)
    assert held is not None
    assert held.excursion == Excursion(810.0, 860.0, 36.0, ongoing=True)
    assert "held" in held.reason and "80 s" in held.reason
    assert run(80.0, 36.0) is not None  # as long as the longest: still held
    assert run(90.0, 36.0) is None
    assert run(50.0, 41.0) is None
    assert run(50.0, 36.0, first_s=120.0) is None  # one excursion as long as a start-up
    # A margin of 1.5: up to 120 s and L 60 are still "like them".
    wide = replace(LATE, excursion_margin=1.5)
    levels = [Sample(0.0, 2.0), Sample(100.0, 40.0), Sample(180.0, 2.0), Sample(300.0, 50.0)]
    assert late_scale_up([*levels, Sample(399.0, 50.0)], THREE, 3, wide, 399.0) is not None
    # ... but never as long as a start-up (allowed: min(100, 1.5 x 80) = 100 s).
    assert late_scale_up([*levels, Sample(401.0, 50.0)], THREE, 3, wide, 401.0) is None


BURSTS = [(100.0, 160.0, 20.0), (400.0, 460.0, 20.0), (700.0, 760.0, 20.0)]
SURGE = (1000.0, 1300.0, 20.0)


@pytest.mark.parametrize(
    ("now_s", "off", "late"),
    [
        # The first burst: no evidence yet, it scales (L 20 → 5 replicas).
        (150.0, 20.0, 20.0),
        # The second: the first lasted 55 s, under a start-up; this one, 25 s and 50 s in,
        # is held at the 3 ready (12); as is its L in the 60 s maximum after it ended.
        (430.0, 20.0, 12.0),
        (455.0, 20.0, 12.0),
        (500.0, 20.0, 12.0),
        # Out of the 60 s maximum (ended at 460 s): both policies agree again.
        (525.0, 2.0, 2.0),
        # The third lasts 55 s too: no longer than the longest, held throughout.
        (755.0, 20.0, 12.0),
        # A surge: held while like the bursts (50 s), scales once longer than 55 s.
        (1055.0, 20.0, 12.0),
        (1065.0, 20.0, 20.0),
        (1200.0, 20.0, 20.0),
    ],
)
def test_bursts_shorter_than_a_start_up_hold_a_surge_scales(
    now_s: float, off: float, late: float
) -> None:
    samples = traffic(now_s, [*BURSTS, SURGE])
    assert value(OFF, samples, now_s) == pytest.approx(off)
    assert value(LATE, samples, now_s) == pytest.approx(late)


def test_held_reason_and_count() -> None:
    samples = traffic(430.0, BURSTS)
    d = decide(samples, LATE, 430.0, ready_replicas=3, ready_series=THREE)
    assert d.desired_replicas == 3 and d.direction == "hold"
    assert d.reason.startswith("late scale-up held") and "100 s start-up" in d.reason
    assert d.held_scale_up  # what the scaler exports (inflight_scaler_scale_up_held)
    off = decide(samples, OFF, 430.0, ready_replicas=3, ready_series=THREE)
    assert off.desired_replicas == 5 and not off.held_scale_up


def test_a_bigger_burst_scales_at_once() -> None:
    # Bursts of L 20 seen; one that reaches 30 is no longer like them (margin 1).
    samples = traffic(430.0, [BURSTS[0], (400.0, 460.0, 30.0)])
    assert value(LATE, samples, 430.0) == pytest.approx(30.0)


def test_the_floor_and_what_stood_before_stay() -> None:
    # The floor (0.75 x the peak 20 = 15 → 4 replicas) is kept under the hold.
    floored = replace(LATE, floor_window_s=900.0, floor_fraction=0.75)
    samples = traffic(430.0, BURSTS)
    assert value(floored, samples, 430.0) == pytest.approx(15.0)
    # A burst of 16 right after one of 20 (ended 130 s, 25 s long): at 200 s the 60 s
    # maximum is the 16 of the held one, but the 20 that stood before it began (the
    # maximum at 155 s) asked for 5 replicas already: the hold does not take them back.
    samples = traffic(200.0, [(100.0, 130.0, 20.0), (150.0, 170.0, 16.0)])
    assert value(OFF, samples, 200.0) == pytest.approx(16.0)
    assert value(LATE, samples, 200.0) == pytest.approx(16.0)


def test_evidence_only_from_the_fleet_ready_now() -> None:
    samples = traffic(430.0, BURSTS)
    # The first burst seen with 1 replica ready: no evidence for 3, the second scales.
    other = [Sample(0.0, 1.0), Sample(300.0, 3.0)]
    assert value(LATE, samples, 430.0, ready=other) == pytest.approx(20.0)
    # A 4th replica that came during the first burst (a scale-up in time): no hold.
    came = [Sample(0.0, 3.0), Sample(140.0, 4.0), Sample(300.0, 3.0)]
    assert value(LATE, samples, 430.0, ready=came) == pytest.approx(20.0)


def test_off_without_a_start_up_or_a_ready_fleet() -> None:
    samples = traffic(430.0, BURSTS)
    assert not OFF.late_scale_up_on and LATE.late_scale_up_on
    assert decide(samples, LATE, 430.0).value == pytest.approx(20.0)  # ready unknown
    # Nothing ready (a scale from zero) is never held.
    assert decide(samples, LATE, 430.0, ready_replicas=0).value == pytest.approx(20.0)


def test_the_window_is_fetched() -> None:
    assert OFF.lookback_s == 70.0
    assert LATE.lookback_s == 910.0  # the excursions' 900 s + the 10 s smoothing
    assert replace(LATE, excursion_window_s=1800.0).lookback_s == 1810.0


def test_metadata_parses_the_keys_time_scaled() -> None:
    spec = parse_metadata(
        {
            names.META_STARTUP_S: "100",
            names.META_EXCURSION_WINDOW_S: "600",
            names.META_EXCURSION_MARGIN: "1.5",
            names.META_TIME_SCALE: "0.1",
        }
    ).policy
    assert spec.startup_s == pytest.approx(10.0)
    assert spec.excursion_window_s == pytest.approx(60.0)
    assert spec.excursion_margin == 1.5
    default = parse_metadata({}).policy
    # On by default at a lower bound on a start-up (results/2026-12-03-startup-default); 0 off.
    assert default.startup_s == names.DEFAULT_STARTUP_S == 30
    assert default.late_scale_up_on
    assert not parse_metadata({names.META_STARTUP_S: "0"}).policy.late_scale_up_on
    assert default.excursion_window_s == names.DEFAULT_EXCURSION_WINDOW_S
    assert default.excursion_margin == names.DEFAULT_EXCURSION_MARGIN == 1.0


@pytest.mark.parametrize(
    ("given", "key"),
    [
        ({names.META_STARTUP_S: "-1"}, names.META_STARTUP_S),
        ({names.META_STARTUP_S: "90000"}, names.META_STARTUP_S),
        ({names.META_STARTUP_S: "fast"}, names.META_STARTUP_S),
        ({names.META_EXCURSION_WINDOW_S: "0"}, names.META_EXCURSION_WINDOW_S),
        ({names.META_EXCURSION_MARGIN: "0.5"}, names.META_EXCURSION_MARGIN),
        ({names.META_EXCURSION_MARGIN: "101"}, names.META_EXCURSION_MARGIN),
        # A window shorter than the start-up cannot see an excursion that long.
        (
            {names.META_STARTUP_S: "100", names.META_EXCURSION_WINDOW_S: "60"},
            names.META_EXCURSION_WINDOW_S,
        ),
    ],
)
def test_metadata_refuses_bad_values(given: dict[str, str], key: str) -> None:
    with pytest.raises(MetadataError) as err:
        parse_metadata(given)
    assert err.value.key == key and key in str(err.value)


def test_excursions_on_a_larger_fleet_are_evidence_with_excursion_fleets_larger() -> None:
    """``excursionFleets: larger``: 4 ready until 300 s, 3 after. Two bursts of L 20 took L
    above 12 (3 x 4) for about a minute each while 4 were ready; a third, on 3, 30 s in,
    like them: held with "larger" (a 4th replica would come after it), scaled with "same"
    (no excursion was seen on 3 alone)."""
    ready = [Sample(0.0, 4.0), Sample(300.0, 3.0)]
    samples = traffic(400.0, [(100.0, 160.0, 20.0), (200.0, 260.0, 20.0), (350.0, 410.0, 20.0)])
    levels = [s for s in samples if s.t_s <= 380.0]  # unsmoothed here: from each start
    assert [e.start_s for e in excursions(levels, ready, 3, 4.0)] == [350.0]
    larger = excursions(levels, ready, 3, 4.0, fleets="larger")
    assert [(e.start_s, e.fleet_changed, e.ongoing) for e in larger] == [
        (100.0, False, False),
        (200.0, False, False),
        (350.0, False, True),
    ]
    wider = replace(LATE, excursion_fleets="larger")
    assert decide(samples, wider, 380.0, ready_replicas=3, ready_series=ready).held_scale_up
    assert not decide(samples, LATE, 380.0, ready_replicas=3, ready_series=ready).held_scale_up
    # A change of the ready count while L is above still ends an excursion, by the fleet.
    moved = [Sample(0.0, 4.0), Sample(120.0, 5.0), Sample(300.0, 3.0)]
    first = excursions(levels, moved, 3, 4.0, fleets="larger")[0]
    assert (first.start_s, first.end_s, first.fleet_changed) == (100.0, 120.0, True)


def test_metadata_excursion_fleets() -> None:
    assert parse_metadata({}).policy.excursion_fleets == "any"  # results/2026-12-03-fleet-change
    same = {names.META_EXCURSION_FLEETS: "same"}
    assert parse_metadata(same).policy.excursion_fleets == "same"
    larger = {names.META_EXCURSION_FLEETS: "larger"}
    assert parse_metadata(larger, experimental=True).policy.excursion_fleets == "larger"
    with pytest.raises(MetadataError, match=r"excursionFleets.*refused by the scaler"):
        parse_metadata(larger)  # the scaler's own reading: tried and not adopted
    with pytest.raises(MetadataError, match=names.META_EXCURSION_FLEETS):
        parse_metadata({names.META_EXCURSION_FLEETS: "bigger"})


def test_excursions_on_every_fleet_with_excursion_fleets_any() -> None:
    """``excursionFleets: any``: 2 ready until 300 s, 3 after. Two bursts took L above 12
    while 2 were ready (a smaller fleet: its L swollen by its queue); a third, on 3, 30 s
    in, like them: held with "any", scaled with "same" and "larger" (nothing seen on 3 or
    more)."""
    ready = [Sample(0.0, 2.0), Sample(300.0, 3.0)]
    samples = traffic(400.0, [(100.0, 160.0, 20.0), (200.0, 260.0, 20.0), (350.0, 410.0, 20.0)])
    levels = [s for s in samples if s.t_s <= 380.0]
    assert [e.start_s for e in excursions(levels, ready, 3, 4.0, fleets="larger")] == [350.0]
    every = excursions(levels, ready, 3, 4.0, fleets="any")
    assert [(e.start_s, e.end_s, e.ongoing) for e in every] == [
        (100.0, 160.0, False),
        (200.0, 260.0, False),
        (350.0, 380.0, True),
    ]
    anyfleet = replace(LATE, excursion_fleets="any")
    assert decide(samples, anyfleet, 380.0, ready_replicas=3, ready_series=ready).held_scale_up
    larger = replace(LATE, excursion_fleets="larger")
    assert not decide(samples, larger, 380.0, ready_replicas=3, ready_series=ready).held_scale_up
    # A change of the ready count while L is above still ends an excursion.
    moved = [Sample(0.0, 2.0), Sample(120.0, 4.0), Sample(300.0, 3.0)]
    first = excursions(levels, moved, 3, 4.0, fleets="any")[0]
    assert (first.start_s, first.end_s, first.fleet_changed) == (100.0, 120.0, True)


# 3 ready, but a 4th (asked for before the first burst) ready from 115 s to 200 s: the first
# burst's excursion on 3 is ended by it 10 s in, far sooner than the 100 s start-up.
CAME_EARLY = [Sample(0.0, 3.0), Sample(115.0, 4.0), Sample(200.0, 3.0)]
FLASHES = traffic(600.0, [(100.0, 160.0, 20.0), (300.0, 355.0, 20.0), (500.0, 560.0, 20.0)])


def test_a_change_sooner_than_a_start_up_is_no_evidence_with_excursion_fleet_change_own() -> None:
    """``excursionFleetChange``: "any" (the default) reads the first excursion, ended by a
    4th replica 10 s in, as a scale-up in time and holds nothing for 900 s; "own" knows
    that replica was asked for before the excursion began (10 s < the 100 s start-up), so
    the excursion says nothing, and the second (50 s, L falling) is the evidence: the
    third, 30 s in, is held (3 replicas, not 5)."""
    found = excursions([s for s in FLASHES if s.t_s <= 530.0], CAME_EARLY, 3, 4.0)
    assert [(e.start_s, e.end_s, e.fleet_changed) for e in found] == [  # unsmoothed here
        (100.0, 115.0, True),
        (300.0, 355.0, False),
        (500.0, 530.0, False),
    ]
    own = replace(LATE, excursion_fleet_change="own")
    held = decide(FLASHES, own, 530.0, ready_replicas=3, ready_series=CAME_EARLY)
    assert held.held_scale_up and held.desired_replicas == 3
    assert "1 excursion(s)" in held.reason and "ended within 50 s" in held.reason
    plain = decide(FLASHES, LATE, 530.0, ready_replicas=3, ready_series=CAME_EARLY)
    assert not plain.held_scale_up and plain.desired_replicas == 5


def test_a_change_a_start_up_in_still_turns_the_hold_off_with_own() -> None:
    """A 4th replica ready 100 s (a start-up) into an excursion could have been asked for
    in it: with "own" that excursion still counts, and, a start-up long, holds nothing."""
    late_came = [Sample(0.0, 3.0), Sample(205.0, 4.0), Sample(290.0, 3.0)]
    samples = traffic(600.0, [(100.0, 260.0, 20.0), (300.0, 355.0, 20.0), (500.0, 560.0, 20.0)])
    found = excursions([s for s in samples if s.t_s <= 530.0], late_came, 3, 4.0)
    assert (found[0].start_s, found[0].end_s, found[0].fleet_changed) == (100.0, 205.0, True)
    own = replace(LATE, excursion_fleet_change="own")
    assert not decide(samples, own, 530.0, ready_replicas=3, ready_series=late_came).held_scale_up


def test_metadata_excursion_fleet_change() -> None:
    assert parse_metadata({}).policy.excursion_fleet_change == "own"
    before = {names.META_EXCURSION_FLEET_CHANGE: "any"}
    assert parse_metadata(before).policy.excursion_fleet_change == "any"
    assert parse_metadata({names.META_EXCURSION_FLEETS: "any"}).policy.excursion_fleets == "any"
    with pytest.raises(MetadataError, match=names.META_EXCURSION_FLEET_CHANGE):
        parse_metadata({names.META_EXCURSION_FLEET_CHANGE: "mine"})


def test_the_defaults_hold_a_flash_after_a_replica_that_came_early() -> None:
    """The defaults (``excursionFleets`` any, ``excursionFleetChange`` own, margin 1.5) on
    the FLASHES of the "own" test: the third flash, 30 s in, is held at 3 replicas; the
    evidence as first built (OFF's) scales it to 5."""
    defaults = PolicySpec(
        queue_headroom=0.0, scale_up_window_s=10.0, scale_down_window_s=60.0, floor_window_s=0.0
    )
    today = replace(defaults, startup_s=100.0, min_replicas=1, max_replicas=8)
    held = decide(FLASHES, today, 530.0, ready_replicas=3, ready_series=CAME_EARLY)
    assert held.held_scale_up and held.desired_replicas == 3
    plain = decide(FLASHES, LATE, 530.0, ready_replicas=3, ready_series=CAME_EARLY)
    assert not plain.held_scale_up and plain.desired_replicas == 5
