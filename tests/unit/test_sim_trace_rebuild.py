"""inflight.sim.trace_rebuild: scraped counter samples → arrival times, histogram buckets →
lengths."""

from __future__ import annotations

import math
import random

import pytest

from inflight.sim.trace_rebuild import (
    Bucket,
    Interval,
    Lengths,
    NoArrivals,
    RebuildError,
    allocate,
    counter_intervals,
    histogram_buckets,
    lengths_from_buckets,
    overlap_count,
    place_arrivals,
    rebuild,
)


# --- counters: intervals and resets ----------------------------------------------------------
def test_each_interval_between_two_samples_counts_the_increase() -> None:
    cut = counter_intervals([(10.0, 100.0), (11.0, 103.0), (12.0, 103.0), (13.0, 110.0)])
    assert cut.intervals == (
        Interval(10.0, 11.0, 3),
        Interval(11.0, 12.0, 0),
        Interval(12.0, 13.0, 7),
    )
    assert cut.resets == 0
    assert cut.baseline == 100  # the first sample is a baseline: not arrivals


def test_a_reset_counts_the_new_value_as_the_increase() -> None:
    # the router restarted between 2 and 3: its counter began again at 0 and reached 4
    cut = counter_intervals([(1.0, 50.0), (2.0, 52.0), (3.0, 4.0), (4.0, 9.0)])
    assert [iv.count for iv in cut.intervals] == [2, 4, 5]
    assert cut.resets == 1


def test_a_reset_to_zero_counts_nothing_and_two_resets_are_both_seen() -> None:
    cut = counter_intervals([(1.0, 5.0), (2.0, 0.0), (3.0, 3.0), (4.0, 1.0)])
    assert [iv.count for iv in cut.intervals] == [0, 3, 1]
    assert cut.resets == 2


def test_float_noise_in_a_counter_rounds_to_whole_requests() -> None:
    cut = counter_intervals([(0.0, 1.0), (1.0, 3.0000000001)])
    assert cut.intervals[0].count == 2


def test_one_sample_or_none_gives_no_interval() -> None:
    assert counter_intervals([(5.0, 7.0)]).intervals == ()
    assert counter_intervals([]).intervals == ()
    assert counter_intervals([]).baseline == 0


def test_samples_out_of_time_order_are_refused() -> None:
    with pytest.raises(RebuildError, match="out of time order"):
        counter_intervals([(2.0, 1.0), (2.0, 3.0)])


# --- arrivals ----------------------------------------------------------------------------------
def test_every_counted_request_is_placed_inside_its_own_interval() -> None:
    intervals = [Interval(0.0, 1.0, 3), Interval(1.0, 2.5, 0), Interval(2.5, 3.0, 5)]
    times = place_arrivals(intervals, 0.0, 10.0, random.Random(1))
    assert len(times) == 8
    assert times == sorted(times)
    assert sum(0.0 < t <= 1.0 for t in times) == 3
    assert sum(2.5 < t <= 3.0 for t in times) == 5


def test_arrivals_outside_the_window_are_dropped() -> None:
    # one interval straddles the start, one the end; the middle one lies inside
    intervals = [Interval(-1.0, 1.0, 1000), Interval(1.0, 2.0, 7), Interval(2.0, 4.0, 1000)]
    times = place_arrivals(intervals, 0.0, 3.0, random.Random(2))
    assert all(0.0 <= t < 3.0 for t in times)
    assert sum(1.0 < t <= 2.0 for t in times) == 7
    # about half of each straddling interval's 1000 falls inside (binomial, σ ≈ 16)
    before = sum(t <= 1.0 for t in times)
    after = sum(t > 2.0 for t in times)
    assert 420 < before < 580
    assert 420 < after < 580


def test_arrivals_within_an_interval_are_uniform() -> None:
    """Given its count, a Poisson process's times are independent uniforms: a KS test."""
    times = place_arrivals([Interval(0.0, 100.0, 2000)], 0.0, 100.0, random.Random(3))
    n = len(times)
    d = max(max((i + 1) / n - t / 100.0, t / 100.0 - i / n) for i, t in enumerate(times))
    # the 1 % critical value of Kolmogorov's D for large n is 1.628 / sqrt(n)
    assert d < 1.628 / math.sqrt(n), d


def test_arrivals_are_a_pure_function_of_the_seed() -> None:
    intervals = [Interval(0.0, 5.0, 20), Interval(5.0, 10.0, 3)]
    a = place_arrivals(intervals, 0.0, 10.0, random.Random(7))
    assert a == place_arrivals(intervals, 0.0, 10.0, random.Random(7))
    assert a != place_arrivals(intervals, 0.0, 10.0, random.Random(8))


def test_overlap_count_takes_the_share_of_each_interval_inside() -> None:
    intervals = [Interval(0.0, 2.0, 10), Interval(2.0, 3.0, 4), Interval(3.0, 5.0, 6)]
    assert overlap_count(intervals, 1.0, 4.0) == pytest.approx(5 + 4 + 3)
    assert overlap_count(intervals, 10.0, 20.0) == 0


# --- histograms → lengths ----------------------------------------------------------------------
def test_cumulative_buckets_become_per_bucket_counts() -> None:
    buckets = histogram_buckets({1.0: 0, 2.0: 1, 5.0: 4, 10.0: 4, math.inf: 6})
    assert [(b.lo, b.hi, b.weight) for b in buckets] == [
        (0.0, 1.0, 0),
        (1.0, 2.0, 1),
        (2.0, 5.0, 3),
        (5.0, 10.0, 0),
        (10.0, math.inf, 2),
    ]


def test_a_cumulative_count_that_falls_gives_that_bucket_nothing() -> None:
    # buckets read a moment apart: le=20 saw one fewer than le=10
    buckets = histogram_buckets({10.0: 5, 20.0: 4, math.inf: 6})
    assert [b.weight for b in buckets] == [5, 0, 1]


def test_allocate_splits_by_largest_remainder() -> None:
    assert allocate([3, 1], 8) == [6, 2]
    assert allocate([1, 1, 1], 4) == [2, 1, 1]
    assert allocate([0.5, 0.25, 0.25], 3) == [1, 1, 1]  # 1.5, .75, .75: the .75s win
    assert allocate([0.6, 0.2, 0.2], 3) == [2, 1, 0]  # 1.8, .6, .6: tie, first wins
    assert allocate([2, 0, 1], 0) == [0, 0, 0]
    with pytest.raises(RebuildError):
        allocate([0, 0], 3)


def test_allocate_keeps_every_share_within_one() -> None:
    rng = random.Random(5)
    for _ in range(200):
        weights = [rng.random() * rng.choice((0, 1, 10)) for _ in range(rng.randint(1, 8))]
        if sum(weights) == 0:
            continue
        n = rng.randint(0, 500)
        counts = allocate(weights, n)
        assert sum(counts) == n
        for w, c in zip(weights, counts, strict=True):
            assert abs(c - w * n / sum(weights)) < 1


def test_lengths_fall_in_their_buckets_with_the_buckets_shares() -> None:
    buckets = [Bucket(0.0, 10.0, 1), Bucket(10.0, 100.0, 3), Bucket(100.0, 1000.0, 0)]
    lengths = lengths_from_buckets(buckets, 40, random.Random(4))
    assert len(lengths) == 40
    assert sum(1 <= n <= 10 for n in lengths) == 10
    assert sum(11 <= n <= 100 for n in lengths) == 30
    # shuffled: the short ones are not all first
    assert lengths[:10] != sorted(lengths)[:10]


def test_the_inf_bucket_gets_the_largest_finite_bound_and_lengths_are_at_least_one() -> None:
    buckets = [Bucket(0.0, 0.5, 2), Bucket(0.5, 2000.0, 0), Bucket(2000.0, math.inf, 3)]
    lengths = lengths_from_buckets(buckets, 5, random.Random(0))
    assert sorted(lengths) == [1, 1, 2000, 2000, 2000]
    with pytest.raises(RebuildError, match="only the \\+Inf bucket"):
        lengths_from_buckets([Bucket(0.0, math.inf, 3)], 2, random.Random(0))


def test_lengths_use_the_fallback_when_the_histogram_saw_nothing() -> None:
    empty = (Bucket(0.0, 10.0, 0), Bucket(10.0, math.inf, 0))
    assert Lengths(buckets=empty, sample=lambda rng: 42).draw(3, random.Random(0)) == [42] * 3
    with pytest.raises(RebuildError, match="no fallback"):
        Lengths(buckets=empty).draw(1, random.Random(0))


# --- the whole trace ---------------------------------------------------------------------------
def _const(n: int) -> Lengths:
    return Lengths(sample=lambda rng: n)


def test_rebuild_counts_every_request_of_every_series_once() -> None:
    a = [(100.0, 0.0), (101.0, 4.0), (102.0, 10.0)]
    b = [(100.5, 7.0), (101.5, 2.0), (102.5, 5.0)]  # reset between 100.5 and 101.5
    out = rebuild([a, b], 95.0, 110.0, _const(30), _const(5), seed=1)
    assert len(out.rows) == 10 + 5
    times = [t for t, _, _ in out.rows]
    assert times == sorted(times)
    assert all(5.0 < t <= 7.5 for t in times)  # relative to the start, 95
    assert {(p, m) for _, p, m in out.rows} == {(30, 5)}


def test_rebuild_maps_wall_seconds_to_seed_seconds_by_the_time_scale() -> None:
    samples = [(0.0, 0.0), (1.0, 50.0)]
    seed_s = rebuild([samples], 0.0, 2.0, _const(1), _const(1), seed=3, time_scale=0.1)
    wall = rebuild([samples], 0.0, 2.0, _const(1), _const(1), seed=3)
    assert [r[0] for r in seed_s.rows] == pytest.approx([r[0] * 10 for r in wall.rows])


def test_rebuild_is_deterministic_for_a_seed() -> None:
    samples = [(0.0, 0.0), (10.0, 30.0), (20.0, 31.0)]
    prompt = Lengths(buckets=(Bucket(0.0, 100.0, 1), Bucket(100.0, 1000.0, 1)))
    output = Lengths(sample=lambda rng: rng.randint(1, 50))
    one = rebuild([samples], 0.0, 20.0, prompt, output, seed=9)
    assert one == rebuild([samples], 0.0, 20.0, prompt, output, seed=9)
    assert one != rebuild([samples], 0.0, 20.0, prompt, output, seed=10)


def test_an_empty_window_is_an_error_not_an_empty_trace() -> None:
    flat = [(0.0, 12.0), (1.0, 12.0), (2.0, 12.0)]
    with pytest.raises(NoArrivals, match="no request arrived"):
        rebuild([flat], 0.0, 2.0, _const(1), _const(1), seed=0)
    with pytest.raises(NoArrivals, match="no request arrived"):
        rebuild([], 0.0, 2.0, _const(1), _const(1), seed=0)


def test_a_window_that_ends_before_it_starts_is_refused() -> None:
    with pytest.raises(RebuildError, match="must be after its start"):
        rebuild([[(0.0, 0.0), (1.0, 1.0)]], 5.0, 5.0, _const(1), _const(1), seed=0)
