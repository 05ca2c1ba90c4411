"""``mix:SHARE:SHORT+LONG``: the mixed-length workload the KV evidence uses (issue 23)."""

from __future__ import annotations

import random
import re

import pytest

from inflight.workload.arrivals import parse_arrivals
from inflight.workload.lengths import LengthError, parse_length
from inflight.workload.scenarios import plan_requests

MIX = "mix:0.3:uniform:100:500+uniform:2000:4000"


def test_a_mix_draws_each_length_from_one_part_by_its_share() -> None:
    dist = parse_length(MIX, "--prompt-tokens")
    assert dist.mean_tokens == pytest.approx(0.7 * 300 + 0.3 * 3000)
    assert parse_length(dist.text, "--prompt-tokens") == dist  # the text parses back
    draws = [dist.sample(random.Random(seed)) for seed in range(4000)]
    long = [d for d in draws if d >= 2000]
    assert all(100 <= d <= 500 or 2000 <= d <= 4000 for d in draws)
    assert len(long) / len(draws) == pytest.approx(0.3, abs=0.03)


def test_a_mix_plans_the_same_requests_for_a_seed() -> None:
    arrivals = parse_arrivals("poisson:0:2,300:2")
    dist = parse_length(MIX, "--prompt-tokens")
    out = parse_length("uniform:100:300", "--max-tokens")
    assert plan_requests(arrivals, dist, out, 7) == plan_requests(arrivals, dist, out, 7)
    assert plan_requests(arrivals, dist, out, 7) != plan_requests(arrivals, dist, out, 8)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mix:1.5:1+2", "mix SHARE must be in 0..1"),
        ("mix:0.3:100", "expected mix:SHARE:SHORT+LONG"),
        ("mix:0.3:1+2+3", "expected mix:SHARE:SHORT+LONG"),
        ("mix:0.3:mix:0.5:1+2", "a mix's parts cannot be mixes"),
        ("mix:x:1+2", "'x' is not a number"),
        ("mix:0.3:1+gamma:1:2", "expected N, lognormal"),
    ],
)
def test_a_bad_mix_is_refused_naming_the_flag(text: str, message: str) -> None:
    with pytest.raises(LengthError, match=re.escape(f"--prompt-tokens: {message}")):
        parse_length(text, "--prompt-tokens")
