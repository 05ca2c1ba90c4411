"""The trace warm-up (issue #24): a window cut from the middle of a trace is replayed after
the trace's seconds before it, unmeasured, so the stack enters the window as that traffic
left it (``inflight.workload.trace_formats``, ``inflight.workload.plan``,
``inflight.sim.core``). The window's measured requests are exactly those arriving inside it;
the replicas at its start reflect the warm-up's traffic."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from inflight.measure.slo import replica_seconds, value_at
from inflight.planes.policy_catalogue import parse_policies
from inflight.sim import report
from inflight.sim.cli import main, sim_config, simulate_plan
from inflight.sim.core import SimConfig, simulate
from inflight.workload.plan import DEFAULT_TRACE_WARMUP_S, plan_from_args
from inflight.workload.trace import PlannedRequest, write_trace
from inflight.workload.trace_formats import TraceWindow, load_trace
from tests.support import open_loop_args

DATA = Path(__file__).resolve().parents[1] / "data"
AZURE_HEAD = DATA / "azure_llm_2023_code_head.csv"  # real: the first 69 requests


def _ns(**kw: Any) -> argparse.Namespace:
    return open_loop_args(**{"min_replicas": 1, "max_replicas": 4, "startup_s": 30.0, **kw})


def _busy_then_quiet(path: Path) -> Path:
    """4 req/s of reference requests for 600 s (about 4 replicas' worth), then 0.2 req/s
    to 900 s: a window from 600 s starts just after a busy stretch."""
    busy = [PlannedRequest(i / 4.0, 3000, 300) for i in range(2400)]
    quiet = [PlannedRequest(600.0 + 5.0 * i, 3000, 300) for i in range(60)]
    write_trace(path, busy + quiet)
    return path


def test_the_warmup_is_the_traces_seconds_before_the_window() -> None:
    whole = load_trace(AZURE_HEAD).requests
    # The excerpt: 12 requests in the first 1.4 s, 51 from 29.5 to 39.3 s, 6 at 183 s.
    window = {"start_s": 180.0, "duration_s": 10.0, "rate_scale": 2.0}
    cold = load_trace(AZURE_HEAD, TraceWindow(**window))
    warm = load_trace(AZURE_HEAD, TraceWindow(**window, warmup_s=160.0))
    # The window's own requests do not change with a warm-up.
    assert warm.requests == cold.requests and len(cold.requests) == 6
    assert warm.end_s == cold.end_s == 5.0
    assert cold.warmup == () and cold.warmup_s == 0.0 and "trace_warmup" not in cold.meta
    # The warm-up: exactly the rows with 20 <= t < 180 (the 51 of the burst), times from
    # 20 s, halved as the window's are.
    before = [r for r in whole if 20.0 <= r.t_s < 180.0]
    assert len(before) == 51
    assert [(r.t_s, r.prompt_tokens, r.max_tokens) for r in warm.warmup] == [
        pytest.approx(((r.t_s - 20.0) / 2.0, r.prompt_tokens, r.max_tokens)) for r in before
    ]
    assert warm.warmup_s == 80.0
    assert warm.meta["trace_warmup"] == {"start_s": 20.0, "duration_s": 160.0, "requests": 51}
    # A warm-up longer than the trace before the window is cut at the trace's start.
    capped = load_trace(AZURE_HEAD, TraceWindow(start_s=180.0, warmup_s=900.0))
    assert capped.warmup_s == 180.0 and len(capped.warmup) == 63
    with pytest.raises(ValueError, match="--trace-warmup-s: must be >= 0"):
        TraceWindow(start_s=29.0, warmup_s=-1.0)


def test_the_plan_takes_the_default_warmup_and_says_so(tmp_path: Path) -> None:
    trace = _busy_then_quiet(tmp_path / "t.jsonl")
    plan = plan_from_args(_ns(trace=trace, trace_start_s=600.0, trace_warmup_s=None))
    # The default (900 s) is cut at the window's start (600 s): all 2,400 busy requests.
    assert DEFAULT_TRACE_WARMUP_S == 900.0
    assert plan.warmup_s == 600.0 and len(plan.warmup) == 2400 and len(plan.requests) == 60
    assert "warm-up: the trace's 0–600 s (2400 requests) replayed first" in plan.description
    assert plan.scenario_meta()["trace_warmup_s"] == 600.0
    off = plan_from_args(_ns(trace=trace, trace_start_s=600.0, trace_warmup_s=0.0))
    assert off.warmup == () and "no warm-up: the stack starts idle" in off.description
    # A caller without the flag (a command that does not add --trace-warmup-s) gets none.
    live = plan_from_args(_ns(trace=trace, trace_start_s=600.0))
    assert live.warmup == () and "no warm-up" in live.description
    # A window from the trace's start has nothing before it.
    first = plan_from_args(_ns(trace=trace, trace_duration_s=600.0, trace_warmup_s=None))
    assert first.warmup == () and "warm-up" not in first.description
    with pytest.raises(ValueError, match="--trace-warmup-s: only with --trace"):
        plan_from_args(_ns(arrivals="poisson:0:1,60:1", trace_warmup_s=60.0))


def test_a_windows_measured_requests_are_exactly_those_arriving_inside_it(tmp_path: Path) -> None:
    plan = plan_from_args(
        _ns(trace=_busy_then_quiet(tmp_path / "t.jsonl"), trace_start_s=600.0, trace_warmup_s=None)
    )
    [policy] = parse_policies("saturation")
    result = simulate_plan(sim_config(plan, policy, 1), plan)
    assert [r.sent_s for r in result.requests] == [p.t_s for p in plan.requests]
    assert all(0.0 <= r.sent_s <= plan.end_s for r in result.requests)
    assert len(result.warmup) == 2400 and all(r.sent_s < 0.0 for r in result.warmup)
    m = report.measures(result, plan.slo)
    assert m["requests_sent"] == 60
    # Replica-seconds are the window's only: [0, end], however many ran before it.
    assert m["replica_seconds"] == pytest.approx(
        replica_seconds(result.points("live"), 0.0, plan.end_s)
    )
    assert m["replica_seconds"] <= 4 * plan.end_s
    # Little's Law on the window: the warm-up's requests still open at 0 are taken out.
    assert m["littles_law"]["ratio"] == pytest.approx(1.0, abs=1e-4)


def test_replicas_at_the_windows_start_reflect_the_warmup(tmp_path: Path) -> None:
    trace = _busy_then_quiet(tmp_path / "t.jsonl")
    [policy] = parse_policies("saturation")
    at_start = {}
    for warmup in (None, 0.0):
        plan = plan_from_args(_ns(trace=trace, trace_start_s=600.0, trace_warmup_s=warmup))
        result = simulate_plan(sim_config(plan, policy, 1), plan)
        at_start[warmup] = value_at(result.points("ready"), 0.0)
    # After 600 s at 4 req/s (L about 18 on 4 slots a replica) the window starts with the
    # fleet that traffic asked for; cold, with the minimum.
    assert at_start[None] == 4
    assert at_start[0.0] == 1


def test_a_warmup_request_outside_its_span_is_refused() -> None:
    with pytest.raises(ValueError, match="the warm-up's requests must lie within its 10 s"):
        simulate(SimConfig(), [PlannedRequest(0.0, 10, 10)], 1.0,
                 warmup=[PlannedRequest(11.0, 10, 10)], warmup_traffic_s=10.0)  # fmt: skip


def test_sim_run_replays_the_warmup_and_its_header_says_so(tmp_path: Path) -> None:
    trace = _busy_then_quiet(tmp_path / "t.jsonl")
    common = ["--trace", str(trace), "--trace-start-s", "600", "--max-replicas", "4",
              "--startup-s", "30"]  # fmt: skip
    assert main(["sim", "run", *common, "--out-dir", str(tmp_path / "warm")]) == 0
    assert main(["sim", "run", *common, "--trace-warmup-s", "0",
                 "--out-dir", str(tmp_path / "cold")]) == 0  # fmt: skip
    warm = json.loads((tmp_path / "warm" / "run.json").read_text())
    cold = json.loads((tmp_path / "cold" / "run.json").read_text())
    assert "warm-up: the trace's 0–600 s" in warm["workload"]["description"]
    assert "no warm-up" in cold["workload"]["description"]
    assert warm["measures"]["requests_sent"] == cold["measures"]["requests_sent"] == 60
    # The warmed stack starts the window with 4 replicas, the cold one with 1.
    timeline = [json.loads(x) for x in (tmp_path / "warm" / "timeline.jsonl").open()]
    assert value_at([(p["t"], p["ready"]) for p in timeline], 0.0) == 4
    assert warm["measures"]["replica_seconds"] > cold["measures"]["replica_seconds"]


def test_sim_tunes_workers_replay_the_warmup(tmp_path: Path) -> None:
    """``inflight sim tune`` rebuilds each seed's plan in its workers from the workload
    flags: the warm-up flag is among them (without it a worker's window started cold)."""
    from inflight.sim.tune_cli import WORKLOAD_KEYS, _seed_plan

    trace = _busy_then_quiet(tmp_path / "t.jsonl")
    values = dict.fromkeys(WORKLOAD_KEYS)
    values.update(trace=str(trace), trace_start_s=600.0, max_replicas=4, startup_s=30.0,
                  hold_deadline_peers=False)  # fmt: skip
    warm = _seed_plan(tuple(values.items()), 1)
    assert warm.warmup_s == 600.0 and len(warm.warmup) == 2400
    values["trace_warmup_s"] = 0.0
    assert _seed_plan(tuple(values.items()), 1).warmup == ()
