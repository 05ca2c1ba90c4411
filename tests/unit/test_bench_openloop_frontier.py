"""The live comparison's simulated frontier (``inflight.bench.openloop.frontier``): the
child ``inflight sim compare`` gets the comparison's own workload, so the fixed fleets see
the same requests, SLO, drain, start-up and hold deadline. The command is run in-process
here (the bench runs it as a child)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest

from inflight import cli
from inflight.bench.openloop.frontier import sim_command
from inflight.procs import inflight_command
from inflight.workload.plan import plan_from_args

AZURE_HEAD = Path(__file__).resolve().parents[1] / "data" / "azure_llm_2023_code_head.csv"


def _args(**kw: Any) -> argparse.Namespace:
    base = {"scenario": None, "arrivals": None, "trace": None, "prompt_tokens": None,
            "max_tokens": None, "seed": None, "slo_ttft_s": None, "slo_tpot_s": None,
            "drain_s": None, "min_replicas": None, "max_replicas": None, "startup_s": None,
            "hold_deadline_s": None}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def _simulate(args: argparse.Namespace, lo: int, hi: int, out: Path) -> tuple[Any, dict[str, Any]]:
    plan = plan_from_args(args)
    argv = sim_command(args, plan, lo, hi, out)
    prefix = inflight_command()
    assert argv[: len(prefix)] == prefix and argv[-2:] == ["--out-dir", str(out)]
    assert cli.main(argv[len(prefix) :]) == 0
    return plan, json.loads((out / "comparison.json").read_text())


def test_the_fleets_get_the_comparisons_workload(tmp_path: Path) -> None:
    args = _args(arrivals="poisson:0:1,60:2", prompt_tokens="uniform:1000:2000",
                 max_tokens="100", seed=7, slo_ttft_s=1.5, drain_s=30.0, min_replicas=1,
                 max_replicas=3, startup_s=20.0, hold_deadline_s=0.0)  # fmt: skip
    plan, doc = _simulate(args, 1, 3, tmp_path / "f")
    assert doc["source"] == "sim" and doc["policies"] == ["fixed:1", "fixed:2", "fixed:3"]
    assert doc["frontier"] is None  # --no-frontier: the child does not recurse
    sc = doc["scenario"]
    assert sc["requests_planned"] == len(plan.requests) and sc["seeds"] == [7]
    assert (sc["arrivals"], sc["prompt_tokens"], sc["max_tokens"]) == (
        "poisson:0:1,60:2", "uniform:1000:2000", "100",
    )  # fmt: skip
    assert sc["slo"] == {"ttft_s": 1.5, "tpot_s": 0.05} and sc["drain_s"] == 30.0
    assert (sc["startup_s"], sc["hold_deadline_s"]) == (20.0, 0.0)
    assert (sc["min_replicas"], sc["max_replicas"]) == (1, 3)
    rs = [doc["runs"][f"fixed:{n}"]["replica_seconds"] for n in (1, 2, 3)]
    assert rs == pytest.approx([60.0, 120.0, 180.0])  # N replicas over the 60 s of traffic


def test_a_windowed_public_trace_reaches_the_simulator(tmp_path: Path) -> None:
    args = _args(trace=AZURE_HEAD, trace_start_s=29.0, trace_duration_s=20.0,
                 trace_rate_scale=2.0, max_replicas=2)  # fmt: skip
    plan, doc = _simulate(args, 1, 2, tmp_path / "f")
    sc = doc["scenario"]
    assert sc["requests_planned"] == len(plan.requests) == 51
    assert sc["trace_format"] == "azure" and sc["duration_s"] == 10.0
    assert sc["trace_window"] == {"start_s": 29.0, "duration_s": 20.0, "rate_scale": 2.0}
    assert sc["seeds"] == [1]  # a trace: one run
    # The live run sends only the window: the simulated fleets get no warm-up either.
    assert "trace_warmup" not in sc and "no warm-up" in sc["description"]
