"""Peaks of L that come back: the floor's level, and bursts due again on a period.

Pure (no I/O, no clock): the saturation policy (:mod:`inflight.control.policy`) calls these
on L's smoothed history (the floor's memory), and tests step ``now_s``.

* :func:`floor_recurrent` — the highest level L reached in ``n`` separate peaks: the
  recurrent floor's level (``floorStatistic: recurrent``).
* :func:`peaks` — the separate peaks that reached a level: when each began and ended.
* :func:`short_recurrent` — the highest level L reached in ``n`` separate peaks that each
  ended sooner than a replica starts (``floorShortFraction``).
* :func:`recurrence` — bursts that reached one level and began at regular times: their
  period, how long each lasts and when the next is due.
* :func:`rebound_level` — the highest level L came back to sooner than a replica could:
  held longer than the scale-down window (``reboundWindowSeconds``).
* :func:`anticipating` — whether that next one is near enough to hold its level now
  (``anticipateSeconds``: a lead, a replica's start-up and the loop's lag, before it).

Why: a burst shorter than a replica's start-up is over before the replicas it asks for
serve. The floor keeps part of the burst's fleet between bursts; bursts that come back on a
period can be met by the whole of it, asked for a start-up ahead of when the next is due,
and let go once it has come. Bursts at irregular times are not anticipated: each gap between
onsets must be within ``tolerance`` of the period (their median).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

from inflight.control.samples import Sample

# Two peaks are separate when the remembered L fell to this fraction of the lower one between.
FLOOR_RECURRENCE_DIP: Final = 0.5
# How many separate peaks make a period (three gaps that agree), and how far (a fraction of
# the period) a gap may be from it: chosen in sample (results/2026-12-02-anticipate), where
# 3 peaks, or 20 %, found periods in the Azure traces' noise.
RECURRENCE_BURSTS: Final = 4
RECURRENCE_TOLERANCE: Final = 0.1
# The most levels searched for them (spread over the distinct values of L, highest first).
RECURRENCE_LEVELS: Final = 64


def floor_recurrent(remembered: Sequence[Sample], recurrences: int) -> float:
    """The highest level the remembered L reached in ``recurrences`` separate peaks.

    A peak reaches level x when L ≥ x; the next counts as separate only after L fell to
    ``FLOOR_RECURRENCE_DIP`` × x (half) or below in between. One surge, however long, is one
    peak: it holds no floor by itself once ``recurrences`` is 2; bursts that come back hold
    the level they all reached. 0 when fewer peaks than that.

    Worked example, recurrences 2: L 2, 20, 20, 2, 16, 2 → 16 (at 16 there are two peaks:
    L fell to 2, under 8, between them; at 20 only one). L 2, 20, 12, 20, 2 → 0: at 20 the
    dip to 12 is above 10, so one peak; at 12 it never falls to 6; at 2 it never falls to 1.
    """
    ordered = [s.value for s in sorted(remembered, key=lambda s: s.t_s)]
    for level in sorted({v for v in ordered if v > 0}, reverse=True):
        peaks, inside = 0, False
        for v in ordered:
            if not inside and v >= level:
                peaks, inside = peaks + 1, True
            elif inside and v <= FLOOR_RECURRENCE_DIP * level:
                inside = False
        if peaks >= recurrences:
            return level
    return 0.0


def short_recurrent(
    remembered: Sequence[Sample],
    recurrences: int,
    shorter_than_s: float,
    low: float,
    high: float,
    levels: int = RECURRENCE_LEVELS,
) -> float:
    """The highest level in ``[low, high]`` that L reached in ``recurrences`` separate peaks
    (:func:`peaks`) that each ended sooner than ``shorter_than_s`` after its onset; 0 when
    none. At most ``levels`` distinct values of L are tried, highest first.

    Such peaks are over before a replica asked for in one serves: only a fleet standing
    before them meets them (``floorShortFraction``). A peak under way, or whose rise began
    before the memory, does not count; a longer peak at the level neither counts nor stops
    the shorter ones from counting (a scale-up serves it).

    Worked example, recurrences 2, shorter than 30 s, L every 5 s from 0 s: 2, 16, 2 (onset
    5 s, end 10 s), 2, 14, 14, 2 (onset 20 s, end 30 s), 2 → 14 in ``[0, 20]`` (at 16 one
    peak); the same with the second peak 14 for 40 s → 0 (one short peak at any level).
    """
    ordered = sorted(remembered, key=lambda s: s.t_s)
    tried = sorted({s.value for s in ordered if low <= s.value <= high and s.value > 0})
    for level in reversed(tried[-levels:]):
        short = [
            p
            for p in _peaks(ordered, level)
            if p.end_s is not None and p.end_s - p.onset_s < shorter_than_s
        ]
        if len(short) >= recurrences:
            return level
    return 0.0


@dataclass(frozen=True)
class Peak:
    """A separate peak of L that reached a level: from its ``onset_s`` (its rise's first
    sample above half the level) to ``end_s``, its first sample at or below half again
    (None while it lasts); ``height``: the highest L in it."""

    onset_s: float
    end_s: float | None
    height: float


def peaks(remembered: Sequence[Sample], level: float) -> list[Peak]:
    """The separate peaks reaching ``level`` whose onset is known, oldest first.

    Peaks are separated as in :func:`floor_recurrent`; a peak's onset is the first sample
    above half the level (``FLOOR_RECURRENCE_DIP``) after L was at or below it, on the rise
    that reached the level. A peak whose rise is not all in the memory (L above half the
    level at its first sample) has no known onset and is left out.
    Worked example, level 16, L every 10 s from 0 s: 2, 10, 20, 2, 2, 9, 16, 4 → from 10 to
    30 s (height 20) and from 50 to 70 s (height 16): the 10 and the 9 are above 8, the
    rises' first samples over half the level; L 12, 20, 2, 16 → one, from 30 s, still on
    (the first peak's rise began before the memory).
    """
    return _peaks(sorted(remembered, key=lambda s: s.t_s), level)


def _peaks(ordered: Sequence[Sample], level: float) -> list[Peak]:
    """:func:`peaks` of samples already in time order."""
    if level <= 0:
        return []
    half = FLOOR_RECURRENCE_DIP * level
    found: list[Peak] = []
    rising: float | None = None  # the rise under way: its first sample above half
    known = False  # whether L has been at or below half since the memory began
    onset: float | None = None  # the peak under way (it reached the level), if known
    inside = False
    height = 0.0
    for s in ordered:
        v = s.value
        if v <= half:
            if inside and onset is not None:
                found.append(Peak(onset, s.t_s, height))
            known, rising, inside, onset = True, None, False, None
            continue
        if rising is None and not inside and known:
            rising, height = s.t_s, 0.0
        if v > height:
            height = v
        if not inside and v >= level:
            inside, onset = True, rising
    if inside and onset is not None:
        found.append(Peak(onset, None, height))
    return found


def _first_of_low_runs(ordered: Sequence[Sample], low: float) -> list[Sample]:
    """``ordered`` with each run of consecutive samples at or below ``low`` cut to its
    first: :func:`_peaks` at a level whose half is ``low`` or more finds the same peaks
    (the first sample of such a run ends a peak, the rest change nothing), in less time
    where L is mostly low between bursts.

    >>> [s.value for s in _first_of_low_runs([Sample(t, v) for t, v in
    ...  enumerate([0, 1, 0, 5, 9, 2, 0, 0, 6])], 2)]
    [0, 5, 9, 2, 6]
    """
    out: list[Sample] = []
    was_low = False
    for sample in ordered:
        is_low = sample.value <= low
        if not (is_low and was_low):
            out.append(sample)
        was_low = is_low
    return out


@dataclass(frozen=True)
class Recurrence:
    """The latest bursts of L, oldest first, one every ``period_s`` (the median gap between
    their onsets), each lasting about ``duration_s`` (the median of the ended ones, onset to
    the fall under half the level they were found at); ``level``: the highest L they
    reached (what the next one is met with)."""

    level: float
    period_s: float
    duration_s: float
    bursts: tuple[Peak, ...]

    @property
    def last_s(self) -> float:
        """When the latest burst began."""
        return self.bursts[-1].onset_s

    @property
    def next_s(self) -> float:
        """When the next one is due: the last onset plus the period."""
        return self.last_s + self.period_s


def recurrence(
    remembered: Sequence[Sample],
    bursts: int = RECURRENCE_BURSTS,
    tolerance: float = RECURRENCE_TOLERANCE,
) -> Recurrence | None:
    """The latest ``bursts`` separate peaks of L, if they came on a period; else None.

    At each level L reached from the highest level of ``bursts`` separate peaks
    (:func:`floor_recurrent`) down to half of it (at most ``RECURRENCE_LEVELS`` of them;
    lower, L's noise between bursts has peaks of its own), the peaks reaching it
    (:func:`peaks`): their last ``bursts`` recur when every gap between consecutive onsets
    is within ``tolerance`` × the period of it (the period: their median). Of the levels
    where they do, the one whose last burst is the latest wins (the highest level on a tie):
    a burst met well reads a lower L than the bursts before it, and must not break the chain
    it continues. The level held is the highest of those bursts.
    Worked example, L every 10 s, ``bursts`` 4: bursts to 16 beginning at 100, 400, 700 and
    1,000 s, each back under 8 60 s later → level 16, period 300 s, duration 60 s, next due
    at 1,300 s; a 5th at 1,300 s reaching 13 only → the last four (400 to 1,300 s, found at
    level 13), level 16, next due at 1,600 s; bursts beginning at 100, 400, 700 and 850 s →
    None (gaps 300, 300 and 150 s: the median 300 s, 150 is half off it).
    """
    if bursts < 2:
        return None
    ordered = sorted(remembered, key=lambda s: s.t_s)
    top = floor_recurrent(ordered, bursts)
    lowest = FLOOR_RECURRENCE_DIP * top
    values = sorted({s.value for s in ordered if s.value >= lowest > 0}, reverse=True)
    if len(values) > RECURRENCE_LEVELS:
        step = (len(values) - 1) / (RECURRENCE_LEVELS - 1)
        values = [values[round(i * step)] for i in range(RECURRENCE_LEVELS)]
    # Every level's peaks read L against half the level or more: a run of samples at or
    # below half the lowest level reads the same as its first sample at every level.
    compact = _first_of_low_runs(ordered, FLOOR_RECURRENCE_DIP * values[-1]) if values else []
    best: Recurrence | None = None
    for level in values:
        last = _peaks(compact, level)[-bursts:]
        if len(last) < bursts:
            continue
        gaps = [b.onset_s - a.onset_s for a, b in pairwise(last)]
        period = statistics.median(gaps)
        if period <= 0 or any(abs(g - period) > tolerance * period for g in gaps):
            continue
        if best is not None and last[-1].onset_s <= best.last_s:
            continue
        ended = [p.end_s - p.onset_s for p in last if p.end_s is not None]
        duration = statistics.median(ended) if ended else 0.0
        best = Recurrence(max(p.height for p in last), period, duration, tuple(last))
    return best


def anticipating(
    found: Recurrence, now_s: float, lead_s: float, tolerance: float = RECURRENCE_TOLERANCE
) -> bool:
    """Whether to hold the bursts' level now: the latest burst began at most its typical
    duration ago (the replicas asked for it stay through it), or the next is due within
    ``lead_s`` of ``now_s`` or is late by at most ``tolerance`` × the period (after that,
    the period is taken as broken).

    Worked example, period 300 s, duration 60 s, last onset 700 s, lead 150 s: until 760 s,
    then from 850 s (1,000 − 150) to 1,030 s (1,000 + 0.1 × 300); once the next burst begins,
    its onset is the last one: held for its 60 s, and the next is due 300 s later.
    """
    if found.last_s <= now_s <= found.last_s + found.duration_s:
        return True
    due = found.next_s
    return due - lead_s <= now_s <= due + tolerance * found.period_s


def rebound_level(
    remembered: Sequence[Sample],
    now_s: float,
    above: float,
    min_gap_s: float,
    max_gap_s: float,
    levels: int = RECURRENCE_LEVELS,
) -> float:
    """The highest level above ``above`` that L came back to after a gap, to hold (or 0).

    A level x rebounded when L reached x within ``max_gap_s`` of ``now_s`` and, before that
    latest stretch of L ≥ x began, it had been below x for longer than ``min_gap_s`` (the
    scale-down window: long enough that the replicas for x were let go) and at most
    ``max_gap_s`` (a replica's start-up and the loop's lag after that release: the replicas
    let go were needed again before new ones could serve). Such a level is held for
    ``max_gap_s`` after L last reached it: the scale-down window of a level whose gaps are
    shorter than a replica can come back. A lone peak, or peaks farther apart, hold nothing.
    ``remembered``: L smoothed, in time order; the levels tried are the distinct values
    over ``above`` in the last ``max_gap_s`` (at most ``levels`` of them), highest first.

    The gap runs from L's last sample at or above x to its next one.
    Worked example, gaps 60 to 190 s, L every 10 s: 32 from 0 to 50 s, 20 from 60 to 150
    s, 32 from 160 to 200 s, 20 after → at 300 s, ``above`` 20: 32 (a gap from 50 to 160
    s, 110 s), until 390 s; had the gap been 50 s (the scale-down window holds then) or
    200 s long, 0.
    """
    ordered = list(remembered)
    times = [s.t_s for s in ordered]
    values = [s.value for s in ordered]
    since = bisect.bisect_left(times, now_s - max_gap_s)
    tried = sorted({v for v in values[since:] if v > above}, reverse=True)
    if len(tried) > levels:
        step = (len(tried) - 1) / (levels - 1)
        tried = [tried[round(i * step)] for i in range(levels)]
    for level in tried:
        last = len(values) - 1
        while last >= since and values[last] < level:
            last -= 1
        if last < since:
            continue  # not reached within max_gap_s (only lower values there)
        start = last
        while start > 0 and values[start - 1] >= level:
            start -= 1
        before = start - 1
        while before >= 0 and values[before] < level and times[start] - times[before] <= max_gap_s:
            before -= 1
        if before < 0 or values[before] < level:
            continue  # the gap began before the memory, or lasted longer than max_gap_s
        if times[start] - times[before] > min_gap_s:
            return level
    return 0.0
