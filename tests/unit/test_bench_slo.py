"""inflight/measure/slo.py: outcomes, SLO attainment, replica-seconds, churn, the Pareto front."""

from __future__ import annotations

import pytest

from inflight.measure.records import RequestRecord
from inflight.measure.slo import (
    DEFAULT_SLO,
    Outcome,
    SloSpec,
    cause_of,
    changes_and_reversals,
    outcome_from_record,
    pareto_front,
    replica_seconds,
    run_measures,
    slo_measures,
)

SPEC = SloSpec(ttft_s=2.0, tpot_s=0.05)


def test_default_slo_is_two_seconds_and_fifty_milliseconds() -> None:
    assert DEFAULT_SLO == SPEC
    with pytest.raises(ValueError, match="SLO targets must be > 0"):
        SloSpec(0.0, 0.05)


def test_outcome_latencies() -> None:
    o = Outcome(sent_s=10.0, first_s=11.0, end_s=16.0, output_tokens=101, ok=True)
    assert (o.ttft_s, o.e2e_s, o.tpot_s) == (1.0, 6.0, pytest.approx(0.05))
    assert Outcome(0.0, 1.0, 2.0, 1, True).tpot_s is None  # one token: no TPOT
    assert Outcome(0.0, None, None, 0, False, "http_503").ttft_s is None


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        ("HTTP 429: Too Many Requests", "http_429"),
        ("HTTP 503: no ready endpoint", "http_503"),
        ("HTTP 500: ", "http_500"),
        ("TimeoutError: ", "error:TimeoutError"),
        ("ClientConnectorError: Cannot connect to host 127.0.0.1:1", "error:ClientConnectorError"),
        ('stream ended without [DONE]: data: {"x": 1}', "incomplete_stream"),
        ("", "error:unknown"),
        ("something odd", "error:unknown"),
    ],
)
def test_cause_of_the_loadgen_error_texts(error: str, cause: str) -> None:
    assert cause_of(error) == cause


def test_outcome_from_record_converts_to_seed_seconds_from_t0() -> None:
    # time-scale 0.25: one wall second is four seed seconds
    rec = RequestRecord(
        start_t=1000.5, end_t=1002.0, first_token_t=1000.75, output_tokens=30, ok=True
    )
    assert outcome_from_record(rec, 1000.0, 0.25) == Outcome(2.0, 3.0, 8.0, 30, True, None)
    bad = RequestRecord(1001.0, 1001.5, None, 0, False, "HTTP 429: slow down")
    assert outcome_from_record(bad, 1000.0, 0.5) == Outcome(2.0, None, 3.0, 0, False, "http_429")
    # still open at the drain limit: its end is unknown whatever the record says
    assert outcome_from_record(rec, 1000.0, 0.25, unfinished=True) == Outcome(
        2.0, 3.0, None, 30, False, "unfinished"
    )
    with pytest.raises(ValueError, match="time_scale must be > 0"):
        outcome_from_record(rec, 1000.0, 0.0)


def _hand_outcomes() -> list[Outcome]:
    return [
        Outcome(0.0, 1.0, 6.0, 101, True),  # A: TTFT 1.0, TPOT 0.05 (= target): met
        Outcome(1.0, 4.0, 14.0, 101, True),  # B: TTFT 3.0 and TPOT 0.1: slo_ttft first
        Outcome(2.0, 2.5, 3.5, 11, True),  # C: TTFT 0.5, TPOT 0.1: slo_tpot
        Outcome(3.0, None, 3.1, 0, False, "http_503"),  # D: failed
        Outcome(4.0, 6.0, 6.0, 1, True),  # E: TTFT 2.0 (= target), one token: met
        Outcome(5.0, 5.5, None, 40, False, "unfinished"),  # F: open at the drain limit
    ]


def test_slo_measures_on_a_hand_computed_run() -> None:
    m = slo_measures(_hand_outcomes(), SPEC)
    assert m["requests_sent"] == 6
    assert m["requests_ok"] == 4
    assert m["requests_met"] == 2
    assert m["slo_attainment"] == pytest.approx(2 / 6)
    # every miss counted once
    assert m["misses"] == {"http_503": 1, "slo_tpot": 1, "slo_ttft": 1, "unfinished": 1}
    # over OK requests: TTFT 1.0, 3.0, 0.5, 2.0 → sorted 0.5 1 2 3
    assert m["ttft_s"] == pytest.approx({"p50": 1.5, "p95": 2.85, "p99": 2.97})
    # E2E 6, 13, 1.5, 2 → sorted 1.5 2 6 13
    assert m["e2e_s"] == pytest.approx({"p50": 4.0, "p95": 11.95, "p99": 12.79})
    # TPOT only where ≥ 2 tokens: 0.05, 0.1, 0.1
    assert m["tpot_s"] == pytest.approx({"p50": 0.1, "p95": 0.1, "p99": 0.1})
    assert m["slo"] == {"ttft_s": 2.0, "tpot_s": 0.05}


def test_slo_measures_of_nothing_sent() -> None:
    m = slo_measures([], SPEC)
    assert m["requests_sent"] == 0 and m["slo_attainment"] is None
    assert m["ttft_s"] is None and m["tpot_s"] is None and m["e2e_s"] is None
    assert m["misses"] == {}


def test_a_tighter_slo_moves_ok_requests_into_slo_misses() -> None:
    m = slo_measures(_hand_outcomes(), SloSpec(ttft_s=0.9, tpot_s=1.0))
    assert m["misses"] == {"http_503": 1, "slo_ttft": 3, "unfinished": 1}  # A, B, E too slow
    assert m["requests_met"] == 1  # C alone


@pytest.mark.parametrize(
    ("points", "start", "end", "expected"),
    [
        ([(0.0, 2), (10.0, 3)], 5.0, 20.0, 2 * 5 + 3 * 10),
        ([(10.0, 3), (0.0, 2)], 5.0, 20.0, 40.0),  # order of the input does not matter
        ([(0.0, 2), (10.0, 3), (30.0, 9)], 5.0, 20.0, 40.0),  # a point after the end: ignored
        ([(8.0, 4)], 5.0, 10.0, 0 * 3 + 4 * 2),  # before the first point: 0
        ([(0.0, 2), (5.0, 4)], 5.0, 7.0, 8.0),  # a point at the start holds from it
        ([(0.0, 2), (4.0, 1), (4.0, 6)], 5.0, 6.0, 6.0),  # equal times: the last wins
        ([], 0.0, 10.0, 0.0),
        ([(0.0, 3)], 5.0, 5.0, 0.0),
    ],
)
def test_replica_seconds(
    points: list[tuple[float, int]], start: float, end: float, expected: float
) -> None:
    assert replica_seconds(points, start, end) == pytest.approx(expected)


def test_replica_seconds_refuses_a_backwards_window() -> None:
    with pytest.raises(ValueError, match="ends before it starts"):
        replica_seconds([(0.0, 1)], 10.0, 5.0)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2, 2, 3, 1, 2], (4, 2)),
        ([1, 2, 1, 2, 1], (4, 3)),  # flapping: every change after the first reverses
        ([3, 4, 5, 8, 8], (3, 0)),
        ([5, 5, 5], (0, 0)),
        ([2], (0, 0)),
        ([], (0, 0)),
    ],
)
def test_changes_and_reversals(values: list[int], expected: tuple[int, int]) -> None:
    points = [(float(i), n) for i, n in enumerate(values)]
    assert changes_and_reversals(points) == expected


def test_pareto_front() -> None:
    points = {
        "saturation": (0.64, 0.941),
        "same_as_sat": (0.64, 0.941),  # equal points are both kept
        "kpa": (0.63, 0.945),
        "ray": (0.82, 0.952),
        "vllm-waiting": (0.73, 0.684),  # dominated by kpa
        "qps": (0.99, 0.997),
        "static8": (1.00, 0.998),
        "worse": (1.00, 0.997),  # dominated by qps (cheaper, same attainment)
    }
    assert pareto_front(points) == {"kpa", "ray", "qps", "static8"}
    assert pareto_front({}) == set()


def test_run_measures_adds_replica_seconds_and_desired_churn_in_the_window() -> None:
    live = [(0.0, 3), (100.0, 5), (200.0, 3)]
    desired = [(0.0, 3), (40.0, 4), (90.0, 5), (190.0, 3), (300.0, 8)]
    m = run_measures(_hand_outcomes(), live, desired, SPEC, 50.0, 250.0)
    assert m["replica_seconds"] == pytest.approx(3 * 50 + 5 * 100 + 3 * 50)
    assert m["mean_replicas"] == pytest.approx(800 / 200)
    # desired at the start is 4 (carried in): 4→5, 5→3; the 8 at t=300 is after the end
    assert (m["changes"], m["reversals"]) == (2, 1)
    assert m["slo_attainment"] == pytest.approx(2 / 6)


def test_an_ok_request_without_a_first_token_time_is_judged_on_its_end() -> None:
    # loadgen always sees the "data: [DONE]" event of an OK stream; if none was timed, the
    # first token came at the end at the latest
    fast, slow = Outcome(0.0, None, 1.5, 0, True), Outcome(0.0, None, 2.5, 0, True)
    assert slo_measures([fast, slow], SPEC)["misses"] == {"slo_ttft": 1}
