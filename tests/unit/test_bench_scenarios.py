"""inflight/workload/scenarios.py: the named open-loop scenarios and plan_requests."""

from __future__ import annotations

import math
import random

import pytest

from inflight.workload.arrivals import arrival_times, parse_arrivals
from inflight.workload.lengths import parse_length
from inflight.workload.scenarios import SCENARIOS, Scenario, get_scenario, plan_requests
from inflight.workload.trace import PlannedRequest


def test_the_three_scenarios_exist_with_one_line_descriptions() -> None:
    assert set(SCENARIOS) == {"ramp", "spike", "diurnal"}
    for name, s in SCENARIOS.items():
        assert s.name == name
        assert s.description and "\n" not in s.description
        assert s.startup_s == 100.0
        assert s.prompt_tokens == parse_length("lognormal:3000:0.6", "--prompt-tokens")
        assert s.max_tokens == parse_length("lognormal:300:0.5", "--max-tokens")
    assert [(s.min_replicas, s.max_replicas) for s in SCENARIOS.values()] == [
        (3, 8),
        (3, 8),
        (1, 8),
    ]


@pytest.mark.parametrize(
    ("t_s", "rate"),
    [(0, 1.0), (299, 1.0), (450, 3.0), (600, 5.0), (899, 5.0), (1035, 2.75), (1170, 0.5),
     (1499, 0.5)],
)  # fmt: skip
def test_ramp_follows_workload_md(t_s: float, rate: float) -> None:
    ramp = get_scenario("ramp")
    assert ramp.arrivals.rate(t_s) == pytest.approx(rate)
    assert ramp.arrivals.duration_s == 1500.0


def test_ramp_peak_runs_eight_reference_replicas_at_about_70_percent() -> None:
    capacity_rps = 8 * 4 / 4.5  # 8 replicas × 4 slots / 4.5 s per request
    assert get_scenario("ramp").arrivals.max_rate_rps / capacity_rps == pytest.approx(
        0.70, abs=0.01
    )


def test_spike_is_a_4x_step_for_five_minutes() -> None:
    spike = get_scenario("spike").arrivals
    assert [spike.rate(t) for t in (0, 299.9, 300, 599.9, 600, 1199)] == [
        1.25,
        1.25,
        5,
        5,
        1.25,
        1.25,
    ]
    assert spike.duration_s == 1200.0
    assert spike.expected(0, 1200) == pytest.approx(900 * 1.25 + 300 * 5)


def test_diurnal_is_the_cosine_day_sampled_every_30_s() -> None:
    diurnal = get_scenario("diurnal").arrivals
    assert len(diurnal.points) == 61 and diurnal.duration_s == 1800.0
    for t, rate in diurnal.points:
        assert t % 30 == 0
        assert rate == pytest.approx(0.5 + 4.5 * (1 - math.cos(2 * math.pi * t / 1800)) / 2)
    assert diurnal.rate(0) == pytest.approx(0.5)
    assert diurnal.rate(900) == pytest.approx(5.0)
    # the 30 s chords lose under 0.1 % of the smooth day's 0.5·1800 + 2.25·1800 = 4950 requests
    assert diurnal.expected(0, 1800) == pytest.approx(4950, rel=1e-3)


def test_unknown_scenario_names_the_flag() -> None:
    known = "diurnal, hot-prefix, no-prefix, ramp, shared-prefix, spike"
    with pytest.raises(
        ValueError, match=rf"--scenario: unknown scenario 'flat' \(known: {known}\)"
    ):
        get_scenario("flat")


def test_scenario_checks_its_replica_bounds() -> None:
    s = get_scenario("ramp")
    with pytest.raises(ValueError, match="min_replicas <= max_replicas"):
        Scenario("x", "d", s.arrivals, s.prompt_tokens, s.max_tokens, 5, 3, 100.0)


def test_plan_is_a_pure_function_of_schedule_lengths_and_seed() -> None:
    s = get_scenario("spike")
    plan = plan_requests(s.arrivals, s.prompt_tokens, s.max_tokens, 11)
    assert plan == s.plan(11)
    assert plan != s.plan(12)
    assert abs(len(plan) - s.arrivals.expected(0, 1200)) < 4 * math.sqrt(2625)


def test_plan_draws_times_first_then_prompt_and_output_per_request() -> None:
    arrivals = parse_arrivals("poisson:0:2,50:2")
    prompt, output = (
        parse_length("uniform:1:1000", "--prompt-tokens"),
        parse_length("lognormal:300:0.5", "--max-tokens"),
    )
    rng = random.Random(4)
    times = arrival_times(arrivals, rng)
    expected = [PlannedRequest(t, prompt.sample(rng), output.sample(rng)) for t in times]
    assert plan_requests(arrivals, prompt, output, 4) == expected
