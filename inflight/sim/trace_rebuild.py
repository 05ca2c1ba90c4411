"""Rebuild a replayable request trace from scraped counters and histograms (pure).

``inflight sim trace-from-prometheus`` (``inflight/sim/prom_trace.py``) fetches the raw
samples; this module turns them into arrival times and lengths. No I/O, no clock: times are
parameters, randomness a passed-in ``random.Random``.

**Arrivals.** A request counter (the router's ``router_requests_received_total``) is scraped
every interval; between two consecutive samples of one series, ``(t0, v0)`` and ``(t1, v1)``,
exactly ``v1 − v0`` requests arrived in ``(t0, t1]`` — or ``v1`` when ``v1 < v0``: the counter
was reset (the process restarted and counts from 0 again; Prometheus' ``increase()`` makes
the same correction, and the scaler's rule, ``external_scaler.sources.counters``, is the one
used here). Within such an interval nothing more is known, so the arrivals are placed as a
Poisson process *conditioned on the counted number*: ``n`` independent uniform times in the
interval. The count of every interval is therefore exact (the rebuilt trace
has exactly the recorded requests), and within an interval the times are one Poisson stream
at the recorded rate ``n / (t1 − t0)``. An interval that crosses the window's start or end
keeps only the times that fall inside the window.

A series' first sample is a baseline, not arrivals: how long its value took to accumulate
is unknown (a router scraped for the first time may have been up for a day). Prometheus'
``increase()`` ignores it too; :func:`counter_intervals` reports it so the caller can say
how many requests that leaves out.

**Lengths.** vLLM's token histograms (``vllm:request_prompt_tokens``,
``vllm:request_generation_tokens``; bucket bounds ``le``, cumulative counts) give, over the
window, how many requests fell in each bucket ``(lo, hi]``. For ``n`` requests the buckets
get ``n`` × their share, rounded by largest remainder (:func:`allocate`), so the rebuilt
lengths reproduce the histogram's shares to within one request per bucket; within a bucket a
length is a uniform integer in ``(lo, hi]`` (nothing more is known), and the +Inf bucket
gets the largest finite bound (as ``histogram_quantile`` does). The lengths are shuffled
over the requests: the histogram does not say which request had which length.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from external_scaler.sources.counters import increase, is_reset


class RebuildError(ValueError):
    """The samples cannot give a trace (no arrivals, a malformed histogram)."""


class NoArrivals(RebuildError):
    """The window holds no arrival: an empty trace is not a trace of anything."""


@dataclass(frozen=True)
class Interval:
    """``count`` events happened in ``(start_s, end_s]`` (one series, two consecutive samples)."""

    start_s: float
    end_s: float
    count: int


@dataclass(frozen=True)
class CounterIntervals:
    """A counter series cut at its samples: the intervals, the resets seen, and the value
    of its first sample (a baseline, not placed)."""

    intervals: tuple[Interval, ...]
    resets: int
    baseline: int


@dataclass(frozen=True)
class Bucket:
    """``weight`` observations in ``(lo, hi]`` (``hi`` is ``math.inf`` for the +Inf bucket)."""

    lo: float
    hi: float
    weight: float


def counter_intervals(samples: Sequence[tuple[float, float]]) -> CounterIntervals:
    """Cut one counter series, ``[(t_s, value), …]`` in time order, into counted intervals.

    >>> counter_intervals([(0, 5), (1, 8), (2, 2), (3, 2)]).intervals
    (Interval(start_s=0, end_s=1, count=3), Interval(start_s=1, end_s=2, count=2), \
Interval(start_s=2, end_s=3, count=0))

    (8 → 2 is a reset: the counter restarted from 0 and counted 2.)
    """
    out: list[Interval] = []
    resets = 0
    for (t0, v0), (t1, v1) in itertools.pairwise(samples):
        if not t1 > t0:
            raise RebuildError(f"samples out of time order: {t0} then {t1}")
        if is_reset(v0, v1):
            resets += 1
        out.append(Interval(t0, t1, _count(increase(v0, v1))))
    baseline = _count(samples[0][1]) if samples else 0
    return CounterIntervals(tuple(out), resets, baseline)


def _count(value: float) -> int:
    """A counter of requests moves in whole steps; round float noise, refuse a negative."""
    if value < 0 or math.isnan(value):
        raise RebuildError(f"a counter increase of {value} is not a count")
    return round(value)


def place_arrivals(
    intervals: Iterable[Interval], start_s: float, end_s: float, rng: random.Random
) -> list[float]:
    """Arrival times in ``[start_s, end_s)``, sorted: each interval's ``count`` times uniform
    in it (a Poisson stream conditioned on the count), those outside the window dropped.

    The random draws follow the order of ``intervals``, so the result is a pure function of
    (intervals, window, rng state).
    """
    times: list[float] = []
    for iv in intervals:
        if iv.count == 0 or iv.end_s <= start_s or iv.start_s >= end_s:
            continue
        width = iv.end_s - iv.start_s
        for _ in range(iv.count):
            # (start, end]: 1 − U with U in [0, 1) is in (0, 1]
            t = iv.start_s + width * (1.0 - rng.random())
            if start_s <= t < end_s:
                times.append(t)
    times.sort()
    return times


def overlap_count(intervals: Iterable[Interval], start_s: float, end_s: float) -> float:
    """Expected events in ``[start_s, end_s]``: each interval's count × the share of it inside
    (the events are uniform within an interval, as :func:`place_arrivals` places them)."""
    total = 0.0
    for iv in intervals:
        inside = min(iv.end_s, end_s) - max(iv.start_s, start_s)
        if inside > 0 and iv.count:
            total += iv.count * inside / (iv.end_s - iv.start_s)
    return total


def histogram_buckets(cumulative: Mapping[float, float]) -> list[Bucket]:
    """One histogram's buckets from its cumulative counts by upper bound ``{le: count}``
    (``math.inf`` for +Inf): ``(lo, hi]`` with the count in it. A count that falls from one
    bound to the next (counters read at slightly different moments) gives that bucket 0.

    >>> histogram_buckets({10.0: 3, 20.0: 5, math.inf: 6})
    [Bucket(lo=0.0, hi=10.0, weight=3.0), Bucket(lo=10.0, hi=20.0, weight=2.0), \
Bucket(lo=20.0, hi=inf, weight=1.0)]
    """
    out: list[Bucket] = []
    lo, below = 0.0, 0.0
    for le in sorted(cumulative):
        count = cumulative[le]
        out.append(Bucket(lo, le, max(0.0, float(count) - below)))
        lo, below = le, max(below, count)
    return out


def allocate(weights: Sequence[float], n: int) -> list[int]:
    """Split ``n`` over ``weights`` in proportion, by largest remainder (ties: first wins).

    >>> allocate([3, 1], 8), allocate([1, 1, 1], 4)
    ([6, 2], [2, 1, 1])
    """
    total = sum(weights)
    if n < 0 or total <= 0 or any(w < 0 for w in weights):
        raise RebuildError(f"cannot split {n} over weights {list(weights)}")
    exact = [w * n / total for w in weights]
    counts = [math.floor(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def lengths_from_buckets(buckets: Sequence[Bucket], n: int, rng: random.Random) -> list[int]:
    """``n`` token counts (≥ 1) with the buckets' shares (:func:`allocate`), uniform within a
    bucket, in random order."""
    finite = [b.hi for b in buckets if math.isfinite(b.hi)]
    top = max(finite) if finite else None
    out: list[int] = []
    for bucket, count in zip(buckets, allocate([b.weight for b in buckets], n), strict=True):
        if count == 0:
            continue
        if math.isfinite(bucket.hi):
            low, high = math.floor(bucket.lo) + 1, math.floor(bucket.hi)
        else:
            if top is None:
                raise RebuildError("a histogram with only the +Inf bucket has no lengths")
            low = high = math.floor(top)
        low = max(1, low)
        high = max(low, high)  # (1.5, 2.0] holds only 2; (0, 0.5] clamps to 1
        out.extend(rng.randint(low, high) for _ in range(count))
    rng.shuffle(out)
    return out


@dataclass(frozen=True)
class Lengths:
    """Where a trace's lengths come from: histogram buckets over the window, or a fallback
    distribution (``sample(rng) -> int``, e.g. a ``inflight.workload.lengths.LengthDist``'s)."""

    buckets: tuple[Bucket, ...] = ()
    sample: Callable[[random.Random], int] | None = None

    def draw(self, n: int, rng: random.Random) -> list[int]:
        if self.buckets and sum(b.weight for b in self.buckets) > 0:
            return lengths_from_buckets(self.buckets, n, rng)
        if self.sample is None:
            raise RebuildError("no histogram observations and no fallback distribution")
        return [self.sample(rng) for _ in range(n)]


@dataclass(frozen=True)
class Rebuilt:
    """A trace, as ``(t_s, prompt_tokens, max_tokens)`` rows in seed seconds from the start."""

    rows: tuple[tuple[float, int, int], ...]


def rebuild(
    series: Sequence[Sequence[tuple[float, float]]],
    start_s: float,
    end_s: float,
    prompt: Lengths,
    output: Lengths,
    seed: int,
    time_scale: float = 1.0,
) -> Rebuilt:
    """The trace of ``[start_s, end_s)`` from counter ``series`` (each ``[(t_s, value), …]``,
    in a fixed order): arrival times relative to ``start_s`` divided by ``time_scale`` (a stack
    run at ``--time-scale S`` spends S wall seconds per seed second), then prompt lengths,
    then output lengths, all drawn from one ``random.Random(seed)`` in that order.

    Raises :class:`NoArrivals` when the window holds no arrival: an empty trace is not a
    trace of anything.
    """
    if not end_s > start_s:
        raise RebuildError(f"the window's end ({end_s}) must be after its start ({start_s})")
    if not time_scale > 0:
        raise RebuildError(f"time scale must be > 0, got {time_scale}")
    rng = random.Random(seed)
    times: list[float] = []
    for samples in series:
        times.extend(place_arrivals(counter_intervals(samples).intervals, start_s, end_s, rng))
    times.sort()
    if not times:
        raise NoArrivals("no request arrived in the window")
    prompts = prompt.draw(len(times), rng)
    outputs = output.draw(len(times), rng)
    rows = tuple(
        ((t - start_s) / time_scale, p, m) for t, p, m in zip(times, prompts, outputs, strict=True)
    )
    return Rebuilt(rows)
