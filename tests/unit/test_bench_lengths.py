"""inflight/workload/lengths.py: --prompt-tokens / --max-tokens distributions."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from inflight.workload.lengths import MAX_TOKENS_PER_SAMPLE, LengthDist, LengthError, parse_length


def _samples(dist: LengthDist, n: int, seed: int = 1) -> list[int]:
    rng = random.Random(seed)
    return [dist.sample(rng) for _ in range(n)]


def test_constant_is_always_n() -> None:
    d = parse_length("300", "--max-tokens")
    assert d == LengthDist("constant", 300, 300)
    assert set(_samples(d, 50)) == {300}


def test_uniform_is_inclusive_at_both_ends() -> None:
    d = parse_length("uniform:3:6", "--prompt-tokens")
    xs = _samples(d, 2000)
    assert set(xs) == {3, 4, 5, 6}
    assert d.mean_tokens == 4.5


def test_lognormal_mean_is_mean_and_median_is_exp_mu() -> None:
    d = parse_length("lognormal:3000:0.6", "--prompt-tokens")
    xs = _samples(d, 40000)
    assert all(isinstance(x, int) and x >= 1 for x in xs)
    # mean 3000, sd 3000·√(e^0.36 − 1) = 1873: the standard error over 40,000 is 9.4
    assert statistics.fmean(xs) == pytest.approx(3000, abs=50)
    # mu = ln 3000 − 0.18: median 2506 (mu = ln 3000 would give 3000)
    assert statistics.median(xs) == pytest.approx(math.exp(math.log(3000) - 0.18), rel=0.02)


def test_lognormal_samples_are_clamped_into_range() -> None:
    low = _samples(parse_length("lognormal:1:3", "--max-tokens"), 2000)
    assert min(low) == 1  # half of the draws are below 0.5 and round to 0: clamped up to 1
    high = _samples(parse_length("lognormal:16384:3", "--max-tokens"), 2000)
    assert max(high) == MAX_TOKENS_PER_SAMPLE


def test_samples_are_deterministic_for_a_seed() -> None:
    d = parse_length("lognormal:300:0.5", "--max-tokens")
    assert _samples(d, 100, 5) == _samples(d, 100, 5)
    assert _samples(d, 100, 5) != _samples(d, 100, 6)


@pytest.mark.parametrize("text", ["7", "uniform:2:9", "lognormal:3000:0.6", "lognormal:2.5:0"])
def test_text_parses_back(text: str) -> None:
    d = parse_length(text, "--max-tokens")
    assert parse_length(d.text, "--max-tokens") == d


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "'' is not an integer"),
        ("abc", "'abc' is not an integer"),
        ("1.5", "'1.5' is not an integer"),
        ("0", "0 is out of range 1..16384"),
        ("-5", "-5 is out of range"),
        ("20000", "20000 is out of range"),
        ("gamma:1:2", "expected N, lognormal:MEAN:SIGMA or uniform:A:B, got 'gamma:1:2'"),
        ("lognormal:3000", "expected N, lognormal"),
        ("lognormal:x:0.5", "'x' is not a number"),
        ("lognormal:0.5:0.5", "MEAN must be in 1..16384"),
        ("lognormal:3000:-1", "SIGMA must be in 0..3"),
        ("lognormal:3000:inf", "'inf' is not a finite number"),
        ("uniform:5:3", "needs A <= B"),
        ("uniform:0:3", "0 is out of range"),
        ("uniform:1:x", "'x' is not an integer"),
    ],
)
def test_errors_name_the_flag_and_the_text(text: str, fragment: str) -> None:
    with pytest.raises(LengthError) as err:
        parse_length(text, "--prompt-tokens")
    assert str(err.value).startswith("--prompt-tokens: ")
    assert fragment in str(err.value)
