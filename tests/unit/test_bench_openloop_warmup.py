"""The live open-loop bench's trace warm-up (issue #24), pure parts: the warm-up's requests
are due before the window and kept apart, and a run is measured on the window alone with
the simulator's own function (``inflight.measure.warmup``): attainment over the window's
requests, replica-seconds of [0, end], the warm-up's requests still in flight after 0 out
of the router's L."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from inflight import cli
from inflight.bench.cli import register
from inflight.bench.openloop.frontier import sim_command
from inflight.bench.openloop.run import run_document, run_markdown
from inflight.bench.openloop.sender import OpenLoopRun, SentRequest, littles_law, send_order
from inflight.measure.records import RequestRecord, RouterSample
from inflight.measure.slo import SloSpec
from inflight.measure.warmup import carried_in_flight_s, window_l
from inflight.procs import inflight_command
from inflight.workload.plan import DEFAULT_TRACE_WARMUP_S, OpenLoopPlan, plan_from_args
from inflight.workload.trace import PlannedRequest

DATA = Path(__file__).resolve().parents[1] / "data"
AZURE_HEAD = DATA / "azure_llm_2023_code_head.csv"
T0 = 1000.0  # unix s of seed 0, the window's start
S = 0.1  # time-scale


def test_carried_in_flight_is_each_requests_overlap_with_the_window() -> None:
    # [-5, 3] overlaps 3 s, [-2, open] runs to the end (10 s), [-4, -1] ended before.
    assert carried_in_flight_s([(-5.0, 3.0), (-2.0, None), (-4.0, -1.0)], 0.0, 10.0) == 13.0
    assert carried_in_flight_s([(-5.0, 30.0)], 0.0, 10.0) == 10.0  # cut at the window's end
    assert carried_in_flight_s([(2.0, 4.0)], 0.0, 10.0) == 2.0  # any span, not just before
    assert carried_in_flight_s([], 0.0, 10.0) == 0.0
    with pytest.raises(ValueError, match="ends"):
        carried_in_flight_s([], 1.0, 0.0)
    # the router's mean L less their share of the window; never below 0
    assert window_l(3.0, 10.0, 10.0) == 2.0 and window_l(0.5, 10.0, 10.0) == 0.0
    assert window_l(None, 1.0, 10.0) is None


def test_the_warmup_is_due_before_the_window_and_kept_apart() -> None:
    warm = [PlannedRequest(0.0, 10, 5), PlannedRequest(7.5, 20, 5), PlannedRequest(10.0, 30, 5)]
    window = [PlannedRequest(0.0, 40, 5), PlannedRequest(4.0, 50, 5)]
    order = send_order(warm, window, 10.0)
    assert order == [(-10.0, True, 0), (-2.5, True, 1), (0.0, True, 2),
                     (0.0, False, 0), (4.0, False, 1)]  # fmt: skip
    assert send_order([], window, 0.0) == [(0.0, False, 0), (4.0, False, 1)]
    with pytest.raises(ValueError, match="within its 5 s"):
        send_order(warm, window, 5.0)
    with pytest.raises(ValueError, match="warm-up requests must be in order"):
        send_order(warm[::-1], window, 10.0)
    with pytest.raises(ValueError, match="--trace-warmup-s"):
        send_order([], window, -1.0)


def _sent(i: int, t_s: float, latency_s: float | None, shift_s: float = 0.0) -> SentRequest:
    """Planned at ``t_s`` (from its part's start), due ``shift_s`` later in seed s from the
    window's start, lasting ``latency_s`` seed s (None: cancelled at seed 30), answered OK."""
    due = T0 + (t_s + shift_s) * S
    if latency_s is None:
        rec = RequestRecord(due, T0 + 30 * S, None, 0, False, "unfinished")
        return SentRequest(i, PlannedRequest(t_s, 100, 10), due, rec, True)
    rec = RequestRecord(due, due + latency_s * S, due + 0.1 * S, 10, True)
    return SentRequest(i, PlannedRequest(t_s, 100, 10), due, rec, False)


def _warm_run() -> tuple[OpenLoopRun, OpenLoopPlan]:
    """A 20 s warm-up of three requests (one lasting into the window, one still open at the
    drain limit), then a window of two, [0, 10] and [10, 20] seed s."""
    warm = [_sent(0, 0.0, 5.0, -20.0), _sent(1, 10.0, 15.0, -20.0), _sent(2, 15.0, None, -20.0)]
    sent = [_sent(0, 0.0, 10.0), _sent(1, 10.0, 10.0)]
    # The router saw the window's one request and the warm-up's two still open: 3 from 0 to
    # 5 s, then 2 (the open one and the window's).
    samples = [RouterSample(T0 + t * S, 3 if t < 5 else 2, 0, 1) for t in range(21)]
    run = OpenLoopRun(
        t0=T0, time_scale=S, end_s=20.0, drain_s=10.0, sent=tuple(sent), samples=tuple(samples),
        sample_errors=0, end_t=max(s.record.end_t for s in sent), warmup=tuple(warm),
        warmup_s=20.0,
    )  # fmt: skip
    plan = OpenLoopPlan(
        "trace", "replay; warm-up: the trace's 0–20 s (3 requests) replayed first, not measured",
        tuple(x.planned for x in sent), 20.0, SloSpec(2.0, 2.0), 10.0, 1, 4, 30.0,
        meta={"trace_warmup": {"start_s": 0.0, "duration_s": 20.0, "requests": 3}},
        warmup=tuple(x.planned for x in warm), warmup_s=20.0,
    )  # fmt: skip
    return run, plan


def test_littles_law_takes_the_warmups_requests_out_of_the_routers_l() -> None:
    run, _ = _warm_run()
    ll = littles_law(run)
    # the window: λ = 2 / 20 s, W = 10 s, so λ·W = 1; the router read 3 then 2 (mean 2.25),
    # of which the warm-up's carried 5 + 20 seed s over the 20 s window
    assert ll["l_warmup_carried"] == pytest.approx(25.0 / 20.0)
    assert ll["lambda_w"] == pytest.approx(1.0)
    assert ll["l_router"] == pytest.approx(1.0, abs=0.05) and ll["error"] < 0.05
    # counted in, the warm-up would make the run look 2.25× busier than its clients
    bare = littles_law(OpenLoopRun(**{**run.__dict__, "warmup": ()}))
    assert bare["error"] > 0.5 and "l_warmup_carried" not in bare


def test_a_run_is_measured_on_the_windows_requests_and_replica_seconds() -> None:
    run, plan = _warm_run()
    # 3 replicas from before the warm-up to window seed 5, then 1: the warm-up's replicas
    # count only from 0 on
    rows = [{"t": T0 - 40 * S, "desired": 1, "ready": 1, "live": 1},
            {"t": T0 - 15 * S, "desired": 3, "ready": 3, "live": 3},
            {"t": T0 + 5 * S, "desired": 1, "ready": 1, "live": 1}]  # fmt: skip
    doc = run_document(run, plan, rows, policy="saturation", frozen=False, url="http://r",
                       model="m", created_at="now")  # fmt: skip
    assert doc["requests_sent"] == 2 and len(doc["requests"]) == 2
    assert doc["slo_attainment"] == 1.0 and doc["misses"] == {}  # the open warm-up one: not
    assert doc["replica_seconds"] == pytest.approx(3 * 5 + 1 * 15)
    assert doc["changes"] == 1  # the warm-up's move to 3 is the baseline, not a change
    w = doc["warmup"]
    assert (w["requests_planned"], w["requests_sent"], w["ok"], w["unfinished"]) == (3, 3, 2, 1)
    assert w["duration_s"] == 20.0 and w["live_replicas_at_window_start"] == 3
    assert w["in_flight_carried_s"] == pytest.approx(25.0)
    assert [r[4] for r in doc["warmup_requests"]] == pytest.approx([-20.0, -10.0, -5.0])
    assert doc["warmup_requests"][2][9] == "unfinished"
    assert doc["valid"], doc["invalid_reasons"]  # Little's Law holds on the window
    assert doc["scenario"]["trace_warmup"]["requests"] == 3
    assert "warm-up: the trace's 0–20 s (3 requests) replayed first, not measured" in (
        run_markdown(doc)
    )
    # without a warm-up the document has no warm-up keys
    cold = OpenLoopRun(**{**run.__dict__, "warmup": (), "warmup_s": 0.0})
    plain = OpenLoopPlan(**{**plan.__dict__, "warmup": (), "warmup_s": 0.0})
    doc = run_document(cold, plain, rows, policy="p", frozen=False, url="u", model="m",
                       created_at="now")  # fmt: skip
    assert "warmup" not in doc and "warmup_requests" not in doc


def _bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["bench", *argv])


def test_bench_run_and_compare_take_the_simulators_warmup_flag() -> None:
    for sub in (["run", "--results-file", "x.json"], ["compare", "--out-dir", "d"]):
        args = _bench_args(*sub, "--trace", str(AZURE_HEAD), "--trace-start-s", "180")
        plan = plan_from_args(args)  # the default, cut at the window's start
        assert args.trace_warmup_s is None and DEFAULT_TRACE_WARMUP_S > 180
        assert plan.warmup_s == 180.0 and len(plan.warmup) == 63
        assert "warm-up: the trace's 0–180 s (63 requests) replayed first" in plan.description
        off = plan_from_args(_bench_args(*sub, "--trace", str(AZURE_HEAD), "--trace-start-s",
                                         "180", "--trace-warmup-s", "0"))  # fmt: skip
        assert off.warmup == () and "no warm-up" in off.description


def test_the_simulated_frontier_gets_the_same_warmup(tmp_path: Path) -> None:
    # At rate × 2 the plan's warm-up lasts 80 seed s; the flag is in the trace's seconds (160).
    args = _bench_args("compare", "--out-dir", "d", "--trace", str(AZURE_HEAD),
                       "--trace-start-s", "180",
                       "--trace-duration-s", "10", "--trace-rate-scale", "2",
                       "--trace-warmup-s", "160", "--max-replicas", "2")  # fmt: skip
    plan = plan_from_args(args)
    assert plan.warmup_s == 80.0 and len(plan.warmup) == 51
    out = tmp_path / "f"
    argv = sim_command(args, plan, 1, 2, out)
    assert argv[argv.index("--trace-warmup-s") + 1] == "160.0"
    assert cli.main(argv[len(inflight_command()) :]) == 0
    sc: dict[str, Any] = json.loads((out / "comparison.json").read_text())["scenario"]
    assert sc["trace_warmup"] == plan.meta["trace_warmup"]
    assert sc["trace_warmup_s"] == plan.warmup_s and sc["description"] == plan.description
