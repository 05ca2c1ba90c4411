"""inflight/workload/arrivals.py: the --arrivals schedule, its integral, and the Poisson process on
it."""

from __future__ import annotations

import math
import random

import pytest

from inflight.workload.arrivals import ArrivalsError, RateSchedule, arrival_times, parse_arrivals

RAMP = "poisson:0:1,300:1,600:5,900:5,1170:0.5,1500:0.5"


def _ks_exponential(gaps: list[float], rate: float) -> float:
    """The Kolmogorov-Smirnov statistic D of ``gaps`` against Exp(rate)."""
    xs = sorted(gaps)
    n = len(xs)
    d = 0.0
    for i, x in enumerate(xs):
        f = 1.0 - math.exp(-rate * x)
        d = max(d, (i + 1) / n - f, f - i / n)
    return d


# --- parsing -------------------------------------------------------------------------------
def test_parse_reads_the_points_and_the_duration() -> None:
    s = parse_arrivals(RAMP)
    assert s.points[:3] == ((0.0, 1.0), (300.0, 1.0), (600.0, 5.0))
    assert s.duration_s == 1500.0
    assert s.max_rate_rps == 5.0
    assert parse_arrivals(s.text) == s  # the text form parses back


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "expected poisson:T:RATE"),
        ("gamma:0:1,10:1", "expected poisson:T:RATE"),
        ("poisson:0:1", "at least 2 points"),
        ("poisson:0:1,10", "item 2 '10' is not T:RATE"),
        ("poisson:0:x,10:1", "item 1 '0:x': 'x' is not a number"),
        ("poisson:0:1,ten:1", "item 2 'ten:1': 'ten' is not a number"),
        ("poisson:0:1,10:-2", "point 2 (10:-2): rate must be >= 0"),
        ("poisson:-5:1,10:1", "point 1 (-5:1): time must be >= 0"),
        ("poisson:0:1,20:1,10:1", "point 3 (10:1): time decreases"),
        ("poisson:0:0,10:0,20:0", "every rate is 0"),
        ("poisson:0:nan,10:1", "point 1 (0:nan): time and rate must be finite"),
        ("poisson:0:1,0:2", "no length"),
    ],
)
def test_parse_errors_name_the_flag_and_the_item(text: str, fragment: str) -> None:
    with pytest.raises(ArrivalsError) as err:
        parse_arrivals(text)
    assert str(err.value).startswith("--arrivals: ")
    assert fragment in str(err.value)


def test_direct_construction_checks_the_same_rules() -> None:
    with pytest.raises(ArrivalsError, match="time decreases"):
        RateSchedule(((0.0, 1.0), (10.0, 1.0), (5.0, 1.0)))


# --- rate and its integral ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("t_s", "rate"),
    [(0.0, 1.0), (150.0, 1.0), (450.0, 3.0), (600.0, 5.0), (1035.0, 2.75), (1400.0, 0.5)],
)
def test_rate_interpolates_linearly(t_s: float, rate: float) -> None:
    assert parse_arrivals(RAMP).rate(t_s) == pytest.approx(rate)


def test_rate_is_zero_outside_the_schedule_and_steps_at_a_repeated_time() -> None:
    s = parse_arrivals("poisson:100:1,300:1,300:4,400:4")
    assert s.rate(50.0) == 0.0  # before the first point
    assert s.rate(299.999) == 1.0
    assert s.rate(300.0) == 4.0  # the later point's rate holds from the step on
    assert s.rate(400.0) == 0.0  # the schedule ends at the last point
    assert s.expected(0.0, 400.0) == pytest.approx(200.0 + 400.0)


def test_expected_is_the_hand_computed_integral() -> None:
    s = parse_arrivals(RAMP)
    # 300×1 + 300×(1+5)/2 + 300×5 + 270×(5+0.5)/2 + 330×0.5
    assert s.expected(0.0, 1500.0) == pytest.approx(300 + 900 + 1500 + 742.5 + 165)
    # from 450 (rate 3) to 600 (5), then 600..750 at 5
    assert s.expected(450.0, 750.0) == pytest.approx(150 * 4 + 150 * 5)
    assert s.expected(-100.0, 0.0) == 0.0
    assert s.expected(1500.0, 2000.0) == 0.0
    with pytest.raises(ValueError, match="ends before it starts"):
        s.expected(10.0, 5.0)


# --- the Poisson process --------------------------------------------------------------------
def test_arrivals_are_deterministic_for_a_seed_sorted_and_inside_the_schedule() -> None:
    s = parse_arrivals(RAMP)
    a = arrival_times(s, random.Random(7))
    assert a == arrival_times(s, random.Random(7))
    assert a != arrival_times(s, random.Random(8))
    assert a == sorted(a)
    assert a[0] >= 0.0 and a[-1] < s.duration_s


def test_counts_per_piece_match_the_integral_within_4_sigma() -> None:
    s = parse_arrivals(RAMP)
    times: list[float] = []
    runs = 5
    for seed in range(runs):
        times += arrival_times(s, random.Random(seed))
    for t0, t1, _, _ in s.segments():
        n = sum(1 for t in times if t0 <= t < t1)
        expected = runs * s.expected(t0, t1)
        assert abs(n - expected) <= 4 * math.sqrt(expected), (t0, t1, n, expected)


def test_gaps_on_a_constant_rate_are_exponential_ks() -> None:
    s = parse_arrivals("poisson:0:2,2500:2")
    times = arrival_times(s, random.Random(1))
    gaps = [b - a for a, b in zip([0.0, *times], times, strict=False)]
    # Kolmogorov-Smirnov at α = 0.001: D < 1.95/√n (equally spaced arrivals give D ≈ 0.63)
    assert _ks_exponential(gaps, 2.0) < 1.95 / math.sqrt(len(gaps))


def test_a_ramp_rescaled_by_its_integral_is_a_unit_rate_process_ks() -> None:
    # Time-rescaling theorem: Λ(t_i) − Λ(t_{i−1}) are Exp(1) for an exact NHPP.
    s = parse_arrivals("poisson:0:0.5,1000:6")
    times = arrival_times(s, random.Random(3))
    lam = [s.expected(0.0, t) for t in times]
    gaps = [b - a for a, b in zip([0.0, *lam], lam, strict=False)]
    assert _ks_exponential(gaps, 1.0) < 1.95 / math.sqrt(len(gaps))
