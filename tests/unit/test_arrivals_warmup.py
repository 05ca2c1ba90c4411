"""The ``--arrivals`` warm-up (``--arrivals-warmup-s S``, ``inflight.workload.plan``): a
synthetic schedule's first S seconds are replayed first and not measured, as a trace
window's seconds before it are (``--trace-warmup-s``). The requests are exactly those
planned without the flag, only split: ``t < S`` the warm-up (times unchanged), the rest the
window (times − S); S = 0 is the plan of old. The simulator and the live bench take it as
``OpenLoopPlan.warmup``, the same as a trace's."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pytest

from inflight import cli
from inflight.bench.openloop.frontier import sim_command
from inflight.measure.slo import value_at
from inflight.planes.policy_catalogue import parse_policies
from inflight.procs import inflight_command
from inflight.sim import report
from inflight.sim.calibrate import openloop_args
from inflight.sim.cli import main, sim_config, simulate_plan
from inflight.sim.core import SimResult
from inflight.workload.plan import OpenLoopPlan, plan_from_args
from tests.support import open_loop_args

# 4 req/s of reference requests for 300 s (about four replicas' worth), then 0.2 req/s to
# 600 s: with S = 300 the warm-up is the burst and the window the quiet stretch after it.
BURST_THEN_QUIET = "poisson:0:4,300:4,300:0.2,600:0.2"
SMALL = "poisson:0:1,60:1,60:0.5,120:0.5"
HEADER = "warm-up: the schedule's 0–300 s (1192 requests) replayed first, not measured"


def _ns(**kw: Any) -> argparse.Namespace:
    return open_loop_args(**{"min_replicas": 1, "max_replicas": 4, "startup_s": 30.0, **kw})


def _simulate(plan: OpenLoopPlan, policy: str = "saturation") -> SimResult:
    [p] = parse_policies(policy)
    return simulate_plan(sim_config(plan, p, 1), plan)


# --- the split -----------------------------------------------------------------------------
def test_the_warmup_is_the_same_requests_split_at_s() -> None:
    mix = {"prompt_tokens": "uniform:1000:4000", "max_tokens": "lognormal:300:0.5",
           "seed": 5, "priority_mix": "0:0.5,10:0.5"}  # fmt: skip
    whole = plan_from_args(_ns(arrivals=SMALL, **mix))
    split = plan_from_args(_ns(arrivals=SMALL, arrivals_warmup_s=45.0, **mix))
    before = [r for r in whole.requests if r.t_s < 45.0]
    after = [r for r in whole.requests if r.t_s >= 45.0]
    assert before and after and len(before) + len(after) == len(whole.requests)
    # The warm-up: the requests of 0–45 s as planned (times, lengths, priorities).
    assert split.warmup == tuple(before) and split.warmup_s == 45.0
    # The window: the rest, 45 s earlier, nothing else changed.
    assert [(r.t_s, r.prompt_tokens, r.max_tokens, r.priority) for r in split.requests] == [
        (pytest.approx(r.t_s - 45.0), r.prompt_tokens, r.max_tokens, r.priority) for r in after
    ]
    assert {r.priority for r in split.warmup} == {0, 10}  # the mix drawn over all of them
    assert whole.end_s == 120.0 and split.end_s == 75.0
    assert split.meta["arrivals_warmup_s"] == 45.0
    assert split.meta["arrivals_warmup"] == {
        "start_s": 0.0, "duration_s": 45.0, "requests": len(before),
    }  # fmt: skip
    sc = split.scenario_meta()
    assert sc["requests_planned"] == len(after) and sc["duration_s"] == 75.0
    assert sc["arrivals"] == SMALL and sc["arrivals_warmup_s"] == 45.0
    assert split.description == (
        f"Poisson arrivals {SMALL}; warm-up: the schedule's 0–45 s ({len(before)} requests) "
        "replayed first, not measured"
    )


def test_zero_is_the_plan_without_the_flag() -> None:
    without = plan_from_args(_ns(arrivals=SMALL))  # a caller without the flag
    assert plan_from_args(_ns(arrivals=SMALL, arrivals_warmup_s=None)) == without
    zero = plan_from_args(_ns(arrivals=SMALL, arrivals_warmup_s=0.0))
    assert zero == without and zero.warmup == () and zero.warmup_s == 0.0
    assert "arrivals_warmup_s" not in zero.meta and "warm-up" not in zero.description


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"arrivals": SMALL, "arrivals_warmup_s": -1.0}, "must be a finite number >= 0, got -1"),
        ({"arrivals": SMALL, "arrivals_warmup_s": math.nan}, "must be a finite number >= 0"),
        ({"arrivals": SMALL, "arrivals_warmup_s": math.inf}, "must be a finite number >= 0"),
        ({"arrivals": SMALL, "arrivals_warmup_s": 120.0}, "the schedule lasts 120"),
        ({"arrivals": SMALL, "arrivals_warmup_s": 500.0}, "leaves no window"),
        ({"scenario": "spike", "arrivals_warmup_s": 60.0}, "only with --arrivals"),
        ({"scenario": "spike", "arrivals_warmup_s": 0.0}, "only with --arrivals"),
        # The rate is 0 after 10 s: nothing arrives in the window.
        ({"arrivals": "poisson:0:5,10:5,10:0,100:0", "arrivals_warmup_s": 10.0},
         "no request left in the window 10–100 s"),
    ],
)  # fmt: skip
def test_bad_warmups_are_refused_naming_the_flag(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=r"^--arrivals-warmup-s: ") as exc:
        plan_from_args(_ns(**kw))
    assert message in str(exc.value)


def test_a_trace_is_refused_too(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "prompt_tokens": 10, "max_tokens": 5}\n')
    with pytest.raises(ValueError, match="--arrivals-warmup-s: only with --arrivals"):
        plan_from_args(_ns(trace=trace, arrivals_warmup_s=1.0))


def test_the_cli_refuses_a_bad_warmup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["sim", "run", "--arrivals", SMALL, "--arrivals-warmup-s", "120",
            "--out-dir", str(tmp_path / "r")]  # fmt: skip
    assert main(argv) == 2
    assert "--arrivals-warmup-s: 120 s leaves no window" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


# --- the simulator -------------------------------------------------------------------------
def test_the_warmup_is_not_measured_and_the_window_starts_warm() -> None:
    cold_plan = plan_from_args(_ns(arrivals=BURST_THEN_QUIET))
    warm_plan = plan_from_args(_ns(arrivals=BURST_THEN_QUIET, arrivals_warmup_s=300.0))
    cold, warm = _simulate(cold_plan), _simulate(warm_plan)
    burst = [r for r in cold_plan.requests if r.t_s < 300.0]
    assert len(burst) == len(warm_plan.warmup) == 1192 and len(warm_plan.requests) == 64
    # The warm-up's requests were served before 0 and are not among the measured ones.
    assert len(warm.warmup) == 1192 and all(r.sent_s < 0.0 for r in warm.warmup)
    assert all(r.ok for r in warm.warmup)
    cold_m, warm_m = report.measures(cold, cold_plan.slo), report.measures(warm, warm_plan.slo)
    assert cold_m["requests_sent"] == 1192 + 64 and warm_m["requests_sent"] == 64
    # Without the flag the burst meets the minimum (1 replica) and much of it misses the
    # SLO; with it the burst is history and attainment is the quiet window's alone.
    assert value_at(cold.points("ready"), 0.0) == 1
    assert value_at(warm.points("ready"), 0.0) == 4  # the replicas the burst made it start
    assert cold_m["slo_attainment"] < 0.6 < warm_m["slo_attainment"]
    # The same stack on the same requests, 300 s earlier: the window's requests fare as
    # they did after the burst without the flag, and the fleet at its start is the one the
    # unflagged run had at 300 s.
    late = [r for r in cold.requests if r.sent_s >= 300.0]
    assert len(late) == len(warm.requests) == 64
    assert [r.first_s for r in warm.requests] == [
        pytest.approx(None if r.first_s is None else r.first_s - 300.0, abs=1e-6) for r in late
    ]
    assert [r.ok for r in warm.requests] == [r.ok for r in late]
    assert value_at(cold.points("ready"), 300.0) == value_at(warm.points("ready"), 0.0)
    # Replica-seconds are the window's only: at most 4 replicas over its 300 s.
    assert warm_m["replica_seconds"] <= 4 * 300.0 < cold_m["replica_seconds"]


def test_a_fixed_fleet_is_measured_on_the_window_alone() -> None:
    plan = plan_from_args(_ns(arrivals=BURST_THEN_QUIET, arrivals_warmup_s=300.0))
    m = report.measures(_simulate(plan, "fixed:2"), plan.slo)
    assert m["requests_sent"] == 64
    assert m["replica_seconds"] == pytest.approx(2 * 300.0)


# --- the commands --------------------------------------------------------------------------
def test_sim_compare_names_the_warmup_and_calibrate_rereads_it(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    argv = ["sim", "compare", "--arrivals", BURST_THEN_QUIET, "--arrivals-warmup-s", "300",
            "--policies", "saturation", "--seeds", "1", "--no-frontier", "--max-replicas", "4",
            "--startup-s", "30", "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((out / "comparison.json").read_text())
    sc = doc["scenario"]
    assert HEADER in sc["description"] and HEADER in (out / "comparison.md").read_text()
    assert sc["arrivals_warmup_s"] == 300.0 and sc["arrivals_warmup"]["requests"] == 1192
    assert sc["requests_planned"] == 64 and sc["duration_s"] == 300.0
    assert doc["runs"]["saturation"]["requests_sent"] == 64
    # `inflight sim calibrate` rebuilds the plan from this block: the same warm-up.
    again = plan_from_args(openloop_args(sc))
    assert len(again.requests) == 64 and len(again.warmup) == 1192 and again.warmup_s == 300.0


def test_the_live_comparisons_simulated_frontier_gets_the_warmup(tmp_path: Path) -> None:
    args = _ns(arrivals=SMALL, arrivals_warmup_s=45.0, min_replicas=1, max_replicas=2,
               startup_s=None, hold_deadline_s=None)  # fmt: skip
    plan = plan_from_args(args)
    out = tmp_path / "f"
    argv = sim_command(args, plan, 1, 2, out)
    assert argv[argv.index("--arrivals-warmup-s") + 1] == "45.0"
    prefix = inflight_command()
    assert cli.main(argv[len(prefix) :]) == 0
    sc = json.loads((out / "comparison.json").read_text())["scenario"]
    assert sc["arrivals_warmup"] == plan.meta["arrivals_warmup"]
    assert sc["requests_planned"] == len(plan.requests)
    # Without a warm-up the child gets no flag.
    cold = _ns(arrivals=SMALL, max_replicas=2, startup_s=None, hold_deadline_s=None)
    assert "--arrivals-warmup-s" not in sim_command(cold, plan_from_args(cold), 1, 2, out)


def test_sim_tunes_workers_and_the_bench_take_the_flag() -> None:
    from inflight.sim.tune_cli import WORKLOAD_KEYS, _seed_plan

    values: dict[str, Any] = dict.fromkeys(WORKLOAD_KEYS)
    values.update(arrivals=SMALL, arrivals_warmup_s=45.0, max_replicas=2,
                  hold_deadline_peers=False)  # fmt: skip
    assert _seed_plan(tuple(values.items()), 1).warmup_s == 45.0
    parser = argparse.ArgumentParser()
    cli_sub = parser.add_subparsers(dest="command")
    from inflight.bench.cli import register

    register(cli_sub)
    for command, required in (("run", "--results-file"), ("compare", "--out-dir")):
        a = parser.parse_args(["bench", command, "--arrivals", SMALL, "--arrivals-warmup-s",
                               "45", required, "x"])  # fmt: skip
        assert a.arrivals_warmup_s == 45.0
        assert plan_from_args(a).warmup_s == 45.0
