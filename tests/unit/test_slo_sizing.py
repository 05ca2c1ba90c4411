"""The SLO stage (issue 40's lead): the fleet Erlang C gives for the arrivals and service
time measured and the operator's TTFT (``sloTtftSeconds``, experimental), named in the
decision's reason; its queueing arithmetic against textbook values and an independent
formula."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from inflight import names
from inflight.control.policy import PolicySpec, Sample, arrival_dispersion, decide
from inflight.control.slo_sizing import erlang_c, slo_fleet, wait_beyond
from inflight.planes.policy_catalogue import parse_policies, with_run


def erlang_c_direct(c: int, a: float) -> float:
    """Erlang C from its closed form (Kleinrock vol. 1, eq. 3.40), summed directly."""
    top = a**c / math.factorial(c) * c / (c - a)
    return top / (sum(a**k / math.factorial(k) for k in range(c)) + top)


@pytest.mark.parametrize(("c", "a"), [(1, 0.3), (2, 1.0), (4, 3.5), (10, 8.0), (20, 15.75)])
def test_erlang_c_is_the_closed_form(c: int, a: float) -> None:
    assert erlang_c(c, a) == pytest.approx(erlang_c_direct(c, a), rel=1e-9)


def test_erlang_c_textbook_values() -> None:
    assert erlang_c(1, 0.7) == pytest.approx(0.7)  # M/M/1: the utilization
    assert erlang_c(10, 8.0) == pytest.approx(0.409, abs=0.001)  # the usual table's value
    assert erlang_c(3, 3.0) == 1.0 and erlang_c(3, 0.0) == 0.0


def test_wait_beyond_decays_with_the_spare_servers() -> None:
    # M/M/1, rho 0.5, S 1 s: P(W > t) = 0.5 exp(-0.5 t)
    assert wait_beyond(1, 0.5, 1.0, 3.0) == pytest.approx(0.5 * math.exp(-1.5))
    assert wait_beyond(4, 4.5, 2.0, 1.0) == 1.0  # overloaded: everyone waits


@pytest.mark.parametrize(
    ("rate", "service_s", "wait_s", "goal"),
    [(3.5, 4.5, 2.0, 0.95), (3.5, 4.5, 2.0, 0.99), (10.0, 1.0, 0.5, 0.9), (0.2, 30.0, 5.0, 0.95)],
)
def test_slo_fleet_is_the_fewest_replicas_that_meet_the_goal(
    rate: float, service_s: float, wait_s: float, goal: float
) -> None:
    f = slo_fleet(rate, service_s, 4, wait_s, goal, 100)
    load = rate * service_s
    assert f.load == pytest.approx(load)
    assert wait_beyond(4 * f.replicas, load, service_s, wait_s) <= 1 - goal
    assert f.late == pytest.approx(wait_beyond(4 * f.replicas, load, service_s, wait_s))
    if f.replicas > 1:
        assert wait_beyond(4 * (f.replicas - 1), load, service_s, wait_s) > 1 - goal


def test_slo_fleet_worked_example_and_cap() -> None:
    assert slo_fleet(3.5, 4.5, 4, 2.0, 0.95, 8).replicas == 5
    assert slo_fleet(3.5, 4.5, 4, 2.0, 0.99, 8).replicas == 6
    capped = slo_fleet(50.0, 4.5, 4, 2.0, 0.95, 8)
    assert capped.replicas == 8 and capped.late == 1.0  # 225 slots offered, 32 allowed
    assert slo_fleet(0.0, 4.5, 4, 2.0, 0.95, 8).replicas == 1
    with pytest.raises(ValueError, match="slots"):
        slo_fleet(1.0, 1.0, 0, 1.0, 0.9, 8)


def test_dispersion_of_even_poisson_like_and_clumped_arrivals() -> None:
    even = [Sample(t, t) for t in range(0, 101, 10)]  # 10 every 10 s
    assert arrival_dispersion(even, 0, 100, 10) == 0.0
    clumps = [Sample(t, 50 * ((t // 10 + 1) // 2)) for t in range(0, 101, 10)]  # 50, 0, ...
    assert arrival_dispersion(clumps, 0, 100, 10) == pytest.approx(25.0, rel=0.2)
    # too few spans, or no arrivals: nothing known, Poisson
    assert arrival_dispersion([Sample(0, 0), Sample(10, 5)], 0, 10, 10) == 1.0
    assert arrival_dispersion([Sample(0, 3), Sample(10, 3), Sample(20, 3)], 0, 20, 10) == 1.0
    with pytest.raises(ValueError, match="counting_s"):
        arrival_dispersion(even, 0, 100, 0)


def test_dispersion_counts_no_faster_than_the_counter_is_scraped() -> None:
    # Even arrivals, 3.5 a second, on a counter scraped every 5 s and read back every
    # second (a range query's step, the simulator's reads): the readings move in 5 s steps.
    # Counted second by second they look like clumps (0, 0, 0, 0, 17.5, ...), which made the
    # SLO stage size for bursts that were the scrapes' rhythm; counted over the spec's
    # counting span (the scale-up window, 10 s, or a scrape if longer) they are even.
    stepped = [Sample(t, 3.5 * 5 * (t // 5)) for t in range(0, 1001)]
    spec = PolicySpec(slo_ttft_s=0.5, slo_goal=0.99, max_replicas=8, max_sample_gap_s=15.0)
    assert spec.counting_s == 10.0
    assert arrival_dispersion(stepped, 100, 1000, 1.0) > 10  # the scrapes' rhythm
    assert arrival_dispersion(stepped, 100, 1000, spec.counting_s) == 0.0
    assert PolicySpec(max_sample_gap_s=90.0).counting_s == 30.0  # a 30 s scrape
    ls, five_s, ready = window(3.5, 15.75, 8, most=30.0)
    d = decide(ls, spec, 1000.0, ready_replicas=8, arrivals=stepped, ready_series=ready)
    want = decide(ls, spec, 1000.0, ready_replicas=8, arrivals=five_s, ready_series=ready)
    fleet = slo_fleet(3.5, 4.5, 4, 1.0, 0.99, 8).replicas
    assert d.desired_replicas == want.desired_replicas == fleet


def window(rate: float, level: float, ready: int, end_s: float = 1000.0, most: float = 0.0):
    """L steady at ``level`` on ``ready`` replicas, arrivals evenly at ``rate`` for 1,000 s:
    their dispersion is 0, so Allen and Cunneen's factor (0 + 1) / 2 doubles the wait the
    TTFT allows. ``most``: L at 500 s, one second (the most in flight at once)."""
    ls = [Sample(t, most if t == 500 else level) for t in range(1, int(end_s) + 1)]
    arrivals = [Sample(t, rate * t) for t in range(0, int(end_s) + 1, 5)]
    ready_series = [Sample(0.0, float(ready))]
    return ls, arrivals, ready_series


def test_decide_asks_for_the_slo_fleet_and_names_the_stage() -> None:
    # 3.5 req/s, L 15.75 on 8 replicas (no queue): S = 15.75 / 3.5 = 4.5 s; even arrivals
    # double the 0.5 s budget to 1 s; at goal 0.99 that needs 6 replicas where L alone
    # asks for ceil(15.75 / 4) = 4. L was 30 once, so 6 replicas are no more than it held.
    ls, arrivals, ready = window(3.5, 15.75, 8, most=30.0)
    spec = PolicySpec(slo_ttft_s=0.5, slo_goal=0.99, max_replicas=8)
    d = decide(ls, spec, 1000.0, ready_replicas=8, arrivals=arrivals, ready_series=ready)
    want = slo_fleet(3.5, 4.5, 4, 1.0, 0.99, 8).replicas
    assert want > 4
    assert d.desired_replicas == want and d.value == pytest.approx(4 * want)
    assert d.reason.startswith("slo: 3.5 req/s x 4.5 s = 15.8 slots offered")
    off = PolicySpec(max_replicas=8, slo_ttft_s=0.0)  # sloTtftSeconds 0: the stage off
    d_off = decide(ls, off, 1000.0, 8, arrivals, ready_series=ready)
    assert d_off.desired_replicas == 4 and not d_off.reason.startswith("slo")


def test_no_more_slots_than_requests_ever_in_flight_at_once() -> None:
    # A closed loop of 16 clients: L never above 16, so 4 replicas hold every request and
    # none waits, whatever Erlang C says of the same rate from random arrivals.
    ls, arrivals, ready = window(3.5, 15.75, 4, most=16.0)
    spec = PolicySpec(slo_ttft_s=0.5, slo_goal=0.99, max_replicas=8)
    d = decide(ls, spec, 1000.0, ready_replicas=4, arrivals=arrivals, ready_series=ready)
    assert d.desired_replicas == 4
    assert "hold the most ever in flight over the last 900 s (16), so none waits" in d.reason


def test_the_stage_keeps_its_memory_with_the_floor_off() -> None:
    # L was 30 once, 500 s ago: with the floor and the late hold off, the decision still
    # reads that far back for the stage, so its cap is the 30 held then, not the 15.75 of
    # the last 70 s.
    ls, arrivals, ready = window(3.5, 15.75, 8, most=30.0)
    spec = PolicySpec(
        slo_ttft_s=0.5, slo_goal=0.99, max_replicas=8, floor_fraction=0.0, excursion_window_s=0.0
    )
    assert spec.memory_s >= spec.floor_window_s
    d = decide(ls, spec, 1000.0, ready_replicas=8, arrivals=arrivals, ready_series=ready)
    assert d.desired_replicas == slo_fleet(3.5, 4.5, 4, 1.0, 0.99, 8).replicas > 4


def test_decide_counts_the_queue_the_ttft_does_not_drain() -> None:
    # Little arrival but a deep queue: L sets the value, not the SLO fleet. 30 in flight on 8
    # busy slots at 0.1 req/s: S = 80 s (Little), so all but 2 ÷ 82 of L waits past the TTFT.
    ls, arrivals, ready = window(0.1, 30.0, 2)
    spec = PolicySpec(slo_ttft_s=2.0, max_replicas=8)
    d = decide(ls, spec, 1000.0, ready_replicas=2, arrivals=arrivals, ready_series=ready)
    assert d.value == pytest.approx(30.0 * 80.0 / 82.0, rel=1e-3)
    assert not d.reason.startswith("slo") and "L counted at 0.976 of itself" in d.reason
    # The same queue of 0.2 s requests (40 req/s): 8 busy slots drain it in 0.6 s, inside
    # the TTFT, so it buys no replica; the SLO fleet for the arrivals sets the count.
    ls, arrivals, ready = window(40.0, 30.0, 2)
    d = decide(ls, spec, 1000.0, ready_replicas=2, arrivals=arrivals, ready_series=ready)
    assert d.reason.startswith("slo") and d.desired_replicas == 3 and d.value == 12.0
    # With the stage off, L counts in full.
    off = replace(spec, slo_ttft_s=0.0)
    d = decide(ls, off, 1000.0, ready_replicas=2, arrivals=arrivals, ready_series=ready)
    assert d.value == pytest.approx(30.0) and "counted at" not in d.reason


def test_decide_plans_for_the_rise_seen_over_a_start_up() -> None:
    # Arrivals rising from 1 to 4 req/s over 1,000 s (3/1000 req/s²) rose 0.09 req/s over
    # every 30 s start-up: the SLO stage plans for it, and says so; over a 120 s start-up,
    # for 0.36 req/s more.
    ls = [Sample(t, 4.0) for t in range(1, 1001)]
    arrivals = [Sample(t, t + 1.5 * t * t / 1000) for t in range(0, 1001, 5)]
    ready = [Sample(0.0, 1.0)]
    spec = PolicySpec(slo_ttft_s=2.0, max_replicas=8, startup_s=30.0)
    d = decide(ls, spec, 1000.0, ready_replicas=1, arrivals=arrivals, ready_series=ready)
    assert "(+0.09, the rise seen over a 30 s start-up)" in d.reason
    longer = replace(spec, startup_s=120.0)
    d = decide(ls, longer, 1000.0, ready_replicas=1, arrivals=arrivals, ready_series=ready)
    assert "(+0.36, the rise seen over a 120 s start-up)" in d.reason


def test_decide_without_arrivals_is_the_stage_off() -> None:
    ls, _, ready = window(3.5, 15.75, 8)
    spec = PolicySpec(slo_ttft_s=0.5, slo_goal=0.99, max_replicas=8)
    d = decide(ls, spec, 1000.0, ready_replicas=8, ready_series=ready)
    assert d.desired_replicas == 4


def test_the_scaler_takes_the_slo_keys_with_defaults_and_refuses_bad_values() -> None:
    # The stage is the default (results/2026-12-07-slo-fixed-report): the scaler takes the
    # operator's SLO, at 2 s and 0.99 when not named, and names a key it refuses.
    spec = parse_metadata(dict(names.METADATA_DEFAULTS)).policy
    assert (spec.slo_ttft_s, spec.slo_goal) == (2.0, 0.99)
    assert parse_metadata({}).policy.slo_ttft_s == 2.0
    off = parse_metadata({names.META_SLO_TTFT_S: "0"}).policy
    assert off.slo_ttft_s == 0.0
    for key, bad in ((names.META_SLO_GOAL, "1"), (names.META_SLO_GOAL, "0"),
                     (names.META_SLO_TTFT_S, "-1"), (names.META_SLO_TTFT_S, "soon")):  # fmt: skip
        with pytest.raises(MetadataError, match=key):
            parse_metadata({key: bad})
    spec = parse_metadata({names.META_SLO_TTFT_S: "2", names.META_TIME_SCALE: "0.5"}).policy
    assert spec.slo_ttft_s == pytest.approx(1.0)  # seed seconds x timeScale


def test_a_variant_can_take_the_runs_own_slo_and_startup() -> None:
    (policy,) = parse_policies("saturation[sloTtftSeconds=run;startupSeconds=run]")
    assert with_run(policy.metadata, 1.5, 120.0) == (
        (names.META_SLO_TTFT_S, "1.5"),
        (names.META_STARTUP_S, "120"),
    )
    with pytest.raises(ValueError, match="sloTtftSeconds"):
        parse_policies("saturation[sloTtftSeconds=soon]")
    with pytest.raises(ValueError, match=names.META_TARGET_SATURATION):
        parse_policies("saturation[targetSaturation=run]")  # only what a run knows
