"""Bursts that come back on a period, met ahead (``anticipateSeconds``), stepped through time.

The docstrings' worked examples of :mod:`inflight.control.recurrence`, then the policy: with
``anticipateSeconds`` the value rises to the bursts' level a lead before the next is due,
holds through it, and lets go; irregular bursts are not anticipated. Worked numbers: 4 slots
a replica (target 4), at most 8 replicas, L every 5 s smoothed over 10 s, a 60 s scale-down
window, the floor's 900 s window at 0.6 (the default recurrent floor).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

import pytest

from external_scaler.metadata import MetadataError, parse_metadata
from inflight import names
from inflight.control.policy import PolicySpec, Sample, decide, default_anticipate_s
from inflight.control.recurrence import (
    FLOOR_RECURRENCE_DIP,
    Peak,
    Recurrence,
    _first_of_low_runs,
    _peaks,
    anticipating,
    peaks,
    recurrence,
)

SPEC = PolicySpec(
    queue_headroom=0.0,
    scale_up_window_s=10.0,
    scale_down_window_s=60.0,
    min_replicas=1,
    max_replicas=8,
    anticipate_s=0.0,  # off: the floor alone
)
AHEAD = replace(SPEC, anticipate_s=150.0)


def every_10s(values: list[float], start_s: float = 0.0) -> list[Sample]:
    return [Sample(start_s + 10.0 * i, float(v)) for i, v in enumerate(values)]


def bursts(
    end_s: float,
    starts: Sequence[float],
    heights: float | Sequence[float] = 16.0,
    step_s: float = 5.0,
) -> list[Sample]:
    """L every ``step_s`` from 0 to ``end_s``: 2, and each burst 60 s long from its start at
    its height (one for all, or one a burst)."""
    tall = [heights] * len(starts) if isinstance(heights, float | int) else heights
    out = []
    for t in (step_s * i for i in range(int(end_s / step_s) + 1)):
        v = next((h for a, h in zip(starts, tall, strict=True) if a <= t < a + 60), 2.0)
        out.append(Sample(t, v))
    return out


def test_peaks_worked_example() -> None:
    assert peaks(every_10s([2, 10, 20, 2, 2, 9, 16, 4]), 16) == [
        Peak(10.0, 30.0, 20.0),
        Peak(50.0, 70.0, 16.0),
    ]
    # The first peak's rise began before the memory: no onset known, left out.
    assert peaks(every_10s([12, 20, 2, 16]), 16) == [Peak(30.0, None, 16.0)]
    assert peaks(every_10s([2, 20, 2]), 0) == []


def test_recurrence_worked_example() -> None:
    found = recurrence(bursts(1200, [100, 400, 700, 1000], step_s=10.0))
    assert found is not None
    assert (found.level, found.period_s, found.duration_s) == (16.0, 300.0, 60.0)
    assert found.next_s == 1300.0
    # A 5th burst met well reads 13: the chain goes on through it, the level held stays 16.
    found = recurrence(bursts(1500, [100, 400, 700, 1000, 1300], [16, 16, 16, 16, 13], step_s=10.0))
    assert found is not None
    assert [b.onset_s for b in found.bursts] == [400.0, 700.0, 1000.0, 1300.0]
    assert (found.level, found.next_s) == (16.0, 1600.0)
    # Gaps of 300, 300 and 150 s: the median 300 s, 150 is half off it.
    assert recurrence(bursts(1200, [100, 400, 700, 850], step_s=10.0)) is None
    # 10 % off (330 s) is still the period; 12 % (336 s) is not.
    assert recurrence(bursts(1200, [100, 400, 700, 1030], step_s=10.0)) is not None
    assert recurrence(bursts(1200, [100, 400, 700, 1040], step_s=10.0)) is None
    # Three bursts (two gaps) are not enough by default; they are with bursts=3.
    three = bursts(900, [100, 400, 700], step_s=10.0)
    assert recurrence(three) is None
    assert recurrence(three, bursts=3) is not None


def test_noise_between_bursts_is_not_a_recurrence() -> None:
    """Small peaks (L 4) every 50 s under bursts to 16 at irregular times: the levels
    searched stop at half the bursts' level, so the noise's regular peaks do not count."""
    series = bursts(1200, [100, 400, 700, 850], step_s=10.0)
    noisy = [Sample(s.t_s, 4.0 if s.value == 2 and s.t_s % 50 == 0 else s.value) for s in series]
    assert recurrence(noisy) is None
    # Without the bursts, the noise alone is periodic, and is found at its own level.
    alone = [Sample(s.t_s, 4.0 if s.t_s % 50 == 0 else 2.0) for s in series]
    found = recurrence(alone)
    assert found is not None and (found.level, found.period_s) == (4.0, 50.0)


def test_anticipating_worked_example() -> None:
    found = Recurrence(16.0, 300.0, 60.0, tuple(Peak(t, t + 60, 16) for t in (100, 400, 700)))
    held = [t for t in range(600, 1400, 10) if anticipating(found, t, 150.0)]
    assert held[:7] == [700, 710, 720, 730, 740, 750, 760]  # through the latest burst
    assert 770 not in held and 840 not in held
    assert [t for t in held if t > 760] == list(range(850, 1031, 10))  # 150 s ahead, 30 s late


def values(spec: PolicySpec, samples: list[Sample], times: range) -> dict[int, float]:
    return {t: decide(samples, spec, float(t), ready_replicas=3).value for t in times}


def test_the_value_rises_a_lead_before_the_next_burst_and_lets_go_after() -> None:
    """Bursts of L 16 for 60 s every 300 s from 100 s (their onsets: the first smoothed
    sample above 8, at each start). Without ``anticipateSeconds`` the floor holds 0.6 x 16 =
    9.6 (3 replicas) between them; with 150 s, once four bursts are in the memory, from 150 s
    before the next is due (1,300 s: 1,150 s) the value is 16 (4 replicas), held through that
    burst, back to the floor once the scale-down window has let it go (1,420 s), and 16
    again from 1,450 s."""
    samples = bursts(1700.0, [100.0, 400.0, 700.0, 1000.0, 1300.0])
    plain = values(SPEC, samples, range(1120, 1480, 5))
    ahead = values(AHEAD, samples, range(1120, 1480, 5))
    assert all(plain[t] == pytest.approx(9.6) for t in range(1120, 1305, 5))
    assert all(ahead[t] == pytest.approx(9.6) for t in range(1120, 1150, 5))  # not yet
    assert all(ahead[t] == 16.0 for t in range(1150, 1420, 5))  # ahead, and through it
    assert all(ahead[t] == pytest.approx(9.6) for t in range(1420, 1450, 5))  # let go
    assert all(ahead[t] == 16.0 for t in range(1450, 1480, 5))  # the next, 150 s ahead
    decision = decide(samples, AHEAD, 1200.0, ready_replicas=3)
    assert decision.desired_replicas == 4
    assert decision.reason.startswith("anticipating: bursts to L 16 every 300 s")
    # Three bursts in: not yet a period (the 4th, at 1,000 s, is not anticipated).
    assert values(AHEAD, samples, range(850, 1000, 5)) == values(SPEC, samples, range(850, 1000, 5))


def test_irregular_bursts_are_not_anticipated() -> None:
    samples = bursts(1700.0, [100.0, 400.0, 700.0, 850.0, 1300.0])
    assert values(AHEAD, samples, range(900, 1300, 5)) == values(SPEC, samples, range(900, 1300, 5))


def test_bursts_450_s_apart_are_seen_in_two_floor_windows() -> None:
    """The recurrence reads two floor windows (1,800 s), the floor one (900 s). Bursts 450 s
    apart from 100 s: at 1,760 s the onsets at 100, 550, 1,000 and 1,450 s are in the memory
    (from −40 s): next due at 1,900 s, held from 1,750 s; one floor window back (from 860 s)
    holds two bursts, not four: the floor alone answers 0.6 x 16 = 9.6."""
    samples = bursts(2200.0, [100.0, 550.0, 1000.0, 1450.0])
    assert AHEAD.memory_s == pytest.approx(2 * 900.0 + 10.0)
    assert SPEC.memory_s == pytest.approx(900.0 + 10.0)
    assert decide(samples, SPEC, 1760.0, ready_replicas=3).value == pytest.approx(9.6)
    assert decide(samples, AHEAD, 1740.0, ready_replicas=3).value == pytest.approx(9.6)
    assert decide(samples, AHEAD, 1760.0, ready_replicas=3).value == 16.0


def test_anticipation_needs_the_floor() -> None:
    off = replace(AHEAD, floor_window_s=0.0, startup_s=0.0)  # no memory at all
    samples = bursts(1700.0, [100.0, 400.0, 700.0, 1000.0, 1300.0])
    assert off.memory_s == pytest.approx(70.0)
    assert decide(samples, off, 1200.0, ready_replicas=3).value == pytest.approx(2.0)


def test_metadata_anticipate_seconds() -> None:
    spec = parse_metadata({names.META_ANTICIPATE_S: "150", names.META_TIME_SCALE: "0.1"}).policy
    assert spec.anticipate_s == pytest.approx(15.0)  # seconds: time-scaled
    assert parse_metadata({}).policy.anticipate_s == names.DEFAULT_ANTICIPATE_S == 130
    assert (
        PolicySpec(queue_headroom=0.0, scale_down_window_s=60.0).anticipate_s == 130.0
    )  # on by default (results/2026-12-02-anticipate)
    assert parse_metadata({names.META_ANTICIPATE_S: "0"}).policy.anticipate_s == 0.0
    for bad in ("-1", "soon", "90000"):
        with pytest.raises(MetadataError, match=names.META_ANTICIPATE_S):
            parse_metadata({names.META_ANTICIPATE_S: bad})


def test_left_out_anticipate_seconds_follows_a_longer_start_up() -> None:
    """Replicas that take 240 s to start, asked 130 s ahead of a burst, serve after it:
    left out of the metadata, the lead is the start-up plus 30 s of the loop's lag (never
    under 130 s); an explicit value, 0 included, is kept."""
    lead = parse_metadata({names.META_STARTUP_S: "240"}).policy.anticipate_s
    assert lead == 270.0 == default_anticipate_s(240.0)
    assert parse_metadata({names.META_STARTUP_S: "100"}).policy.anticipate_s == 130.0
    assert parse_metadata({names.META_STARTUP_S: "0"}).policy.anticipate_s == 130.0
    scaled = {names.META_STARTUP_S: "600", names.META_TIME_SCALE: "0.1"}
    assert parse_metadata(scaled).policy.anticipate_s == pytest.approx(63.0)
    for stated in ("0", "130", "200"):
        explicit = {names.META_STARTUP_S: "600", names.META_ANTICIPATE_S: stated}
        assert parse_metadata(explicit).policy.anticipate_s == float(stated)
    # Bursts of L 16 for 60 s every 300 s (240 s apart): with the 270 s lead the level
    # is held from one burst to the next; at 130 s it falls to the floor between them
    # (1,120-1,160 s) and is asked for again at 1,170 s, a replica ready at 1,410 s, after
    # the burst due at 1,300 s.
    samples = bursts(1700.0, [100.0, 400.0, 700.0, 1000.0, 1300.0])
    start_up = replace(SPEC, startup_s=240.0)
    follows = values(replace(start_up, anticipate_s=lead), samples, range(1000, 1480, 10))
    assert set(follows.values()) == {16.0}
    short = values(replace(start_up, anticipate_s=130.0), samples, range(1000, 1480, 10))
    assert all(short[t] == pytest.approx(9.6) for t in range(1120, 1170, 10))
    assert short[1170] == 16.0


@pytest.mark.parametrize("seed", range(40))
def test_cutting_low_runs_finds_the_same_peaks_at_every_level_above_them(seed: int) -> None:
    """``recurrence`` reads each level's peaks on L with every run of samples at or below
    half its lowest level cut to the run's first (``_first_of_low_runs``): at any level whose
    half is that or more the peaks, their onsets, ends and heights, are the same as on the
    whole of L. Seeded series of quiet stretches and bursts of random heights."""
    rng = random.Random(seed)
    values: list[float] = []
    while len(values) < 600:
        values += [float(rng.choice([0, 0, 1, 2])) for _ in range(rng.randint(1, 40))]
        values += [float(rng.randint(0, 30)) for _ in range(rng.randint(1, 15))]
    ordered = [Sample(float(t), v) for t, v in enumerate(values)]
    for lowest in (2.0, 4.0, 7.5):
        compact = _first_of_low_runs(ordered, FLOOR_RECURRENCE_DIP * lowest)
        assert len(compact) < len(ordered)
        for level in (lowest, lowest + 1, 2 * lowest, 20.0):
            assert _peaks(compact, level) == _peaks(ordered, level), (lowest, level)
