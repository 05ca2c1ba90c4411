"""Priorities and classes through the workload, ``inflight up``, ``inflight bench`` and
``inflight sim``: ``--priority-mix`` (a seeded draw, inflight.workload.priorities),
``--priority-class`` and ``--max-late-s`` handed to the router (seed seconds scaled to
real), and attainment a class in each report (issue 25, item 2)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from inflight.bench.openloop.frontier import sim_command
from inflight.bench.openloop.run import priority_up_args, run_document
from inflight.bench.openloop.sender import OpenLoopRun, SentRequest
from inflight.config import ConfigError
from inflight.measure.records import RequestRecord, RouterSample
from inflight.up.cli import UpSettings
from inflight.up.stack import router_args
from inflight.workload.plan import plan_from_args
from inflight.workload.priorities import assign, parse_mix
from inflight.workload.trace import PlannedRequest
from tests.support import open_loop_args


def _ns(**kw: Any) -> argparse.Namespace:
    flags = {"priority_mix": None, "priority_class": None, "max_late_s": None}
    return open_loop_args(**{"arrivals": "poisson:0:20,50:20", **flags, **kw})


# --- the workload ------------------------------------------------------------------------


def test_a_mix_draws_each_requests_priority_with_its_shares_and_changes_nothing_else() -> None:
    plain = plan_from_args(_ns())
    mixed = plan_from_args(_ns(priority_mix="0:0.5,10:0.5"))
    assert [replace(r, priority=0) for r in mixed.requests] == list(plain.requests)
    counts = Counter(r.priority for r in mixed.requests)
    assert set(counts) == {0, 10} and abs(counts[0] / len(mixed.requests) - 0.5) < 0.1
    assert plan_from_args(_ns(priority_mix="0:0.5,10:0.5")).requests == mixed.requests  # seeded
    assert plan_from_args(_ns(priority_mix="0:0.5,10:0.5", seed=2)).requests != mixed.requests
    assert mixed.meta["priority_mix"] == "0:0.5,10:0.5"
    skewed = assign(plain.requests, parse_mix("-1:0.9,5:0.1"), seed=1)
    assert Counter(r.priority for r in skewed)[-1] > 0.8 * len(skewed)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("0", "expected PRIORITY:SHARE"),
        ("x:1", "PRIORITY must be an integer"),
        ("0:a", "SHARE must be a number"),
        ("0:0,1:1", r"SHARE must be in \(0, 1\]"),
        ("0:0.5,0:0.5", "priority 0 given twice"),
        ("0:0.5,1:0.4", "must sum to 1"),
    ],
)
def test_a_bad_mix_names_the_flag_and_the_item(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=f"--priority-mix: .*{says}"):
        parse_mix(text)


def test_a_trace_with_priorities_refuses_a_mix_and_classes_refuse_a_deadline(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "prompt_tokens": 5, "max_tokens": 5, "priority": 3}\n')
    with pytest.raises(ValueError, match="--priority-mix: the trace gives"):
        plan_from_args(_ns(arrivals=None, trace=trace, priority_mix="0:1"))
    with pytest.raises(ValueError, match="--hold-deadline-s: each --priority-class"):
        plan_from_args(_ns(priority_class=["a:0:1"], hold_deadline_s=1.5))
    with pytest.raises(ValueError, match="--max-late-s: must be >= 0"):
        plan_from_args(_ns(max_late_s=-1.0))
    plan = plan_from_args(_ns(priority_class=["a:0:1", "b:9:shed"], max_late_s=30.0))
    assert plan.priority_classes == ("a:0:1", "b:9:shed") and plan.max_late_s == 30.0
    assert plan.scenario_meta()["priority_classes"] == ["a:0:1", "b:9:shed"]


# --- inflight up -------------------------------------------------------------------------


def settings(*flags: str) -> UpSettings:
    from inflight.cli import build_parser
    from inflight.up.cli import settings_from_args

    return settings_from_args(build_parser().parse_args(["up", *flags]))


def test_up_hands_the_classes_and_the_bound_to_its_router_in_real_seconds() -> None:
    cfg = settings("--time-scale", "0.1", "--priority-class", "high:0:1.5",
                   "--priority-class", "batch:100:shed", "--priority-class", "low:10:fifo",
                   "--max-late-s", "30")  # fmt: skip
    argv = router_args(cfg, Path("/s/endpoints.json"))
    assert [a for a in argv if a.startswith("--priority-class")] == [
        "--priority-class=high:0:0.15", "--priority-class=low:10:fifo",
        "--priority-class=batch:100:shed",
    ]  # fmt: skip
    assert argv[argv.index("--max-late-s") + 1] == "3"
    assert "--hold-deadline-s" not in argv  # each class has its own
    # The stack's own load states each request's priority: the router is told to trust it
    # (a router trusts no client's priority by default), and only when there are classes.
    assert "--client-priority" in argv
    assert "--client-priority" not in router_args(settings("--max-late-s", "30"), Path("/e"))
    # The bound alone, with the hold deadline; and the router's own parser takes it all.
    alone = router_args(settings("--max-late-s", "30"), Path("/e"))
    assert alone[alone.index("--max-late-s") + 1] == "30" and "--hold-deadline-s" in alone
    default = router_args(settings("--time-scale", "0.5"), Path("/e"))  # on by default
    assert default[default.index("--max-late-s") + 1] == "90"  # DEFAULT_MAX_LATE_S × 0.5
    assert "--max-late-s" not in router_args(settings("--max-late-s", "0"), Path("/e"))
    assert "--max-late-s" not in router_args(settings("--policy", "kpa"), Path("/e"))  # FIFO
    from router.config import add_arguments, settings_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    plan = settings_from_args(p.parse_args(argv[1:])).dispatch_plan
    assert [c.name for c in plan.classes] == ["high", "low", "batch"]
    assert plan.classes[0].deadline_s == pytest.approx(0.15) and plan.max_late_s == 3.0


def test_up_with_two_models_passes_the_classes_too() -> None:
    cfg = settings("--model", "a", "--model", "b", "--priority-class", "high:0:2")
    argv = router_args(cfg, Path("/s/endpoints.json"))
    assert "--priority-class=high:0:2" in argv and "--model-endpoints-file" in argv


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--priority-class", "high:0"), "--priority-class .*expected NAME:MAX_PRIORITY"),
        (("--priority-class", "a:0:1", "--priority-class", "b:0:2"), "must be above"),
        (
            ("--priority-class", "a:0:1", "--hold-deadline-s", "2"),
            "--hold-deadline-s .*own deadline",
        ),
        (("--max-late-s", "5", "--hold-deadline-s", "0"), "--max-late-s .*needs --hold-deadline-s"),
        (("--max-late-s", "-1"), "--max-late-s"),
        (("--priority-class", "a:0:1", "--policy", "vllm-waiting"), "router holds none"),
    ],
)
def test_up_refuses_bad_classes_naming_the_flag(flags: tuple[str, ...], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        settings(*flags)


# --- inflight bench ----------------------------------------------------------------------

T0, S = 1000.0, 0.1


def _sent(i: int, priority: int, ttft_s: float | None, error: str = "") -> SentRequest:
    start = T0 + i * S
    first = None if ttft_s is None else start + ttft_s * S
    end = start + 3 * S if first is None else first + 0.1 * S  # TPOT 0.01 s: within the SLO
    rec = RequestRecord(start, end, first, 10 if first else 0, first is not None, error)
    return SentRequest(i, PlannedRequest(float(i), 100, 10, priority), start, rec, False)


def test_bench_compare_passes_the_classes_and_reports_attainment_a_class() -> None:
    plan = plan_from_args(
        _ns(priority_mix="-1:0.5,5:0.5", priority_class=["high:0:1.5", "batch:10:shed"],
            max_late_s=30.0)
    )  # fmt: skip
    assert priority_up_args(plan) == [
        "--priority-class=high:0:1.5", "--priority-class=batch:10:shed", "--max-late-s", "30",
    ]  # fmt: skip
    sent = [_sent(0, -1, 0.5), _sent(1, 5, None, "HTTP 429: shed"), _sent(2, 0, 9.0)]
    run = OpenLoopRun(T0, S, 3.0, 10.0, tuple(sent), (RouterSample(T0, 1, 0, 1),), 0, T0 + 1)
    doc = run_document(run, plan, [], policy="fixed:1", frozen=True, url="u", model="m",
                       created_at="now")  # fmt: skip
    by = doc["by_class"]
    assert list(by) == ["high", "batch"]  # the router's names and order, not the priorities
    assert by["high"]["requests_sent"] == 2 and by["high"]["slo_attainment"] == 0.5
    assert by["batch"]["misses"] == {"http_429": 1}
    from inflight.bench.openloop.run import run_markdown

    assert "| fixed:1 | batch | 1 | 0.0 % | – | – | 1 |" in run_markdown(doc)


def test_bench_compare_refuses_a_bad_class_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from inflight import cli

    out = tmp_path / "out"
    argv = ["bench", "compare", "--arrivals", "poisson:0:1,10:1", "--priority-class", "a:x:1",
            "--out-dir", str(out)]  # fmt: skip
    assert cli.main(argv) == 2
    assert "--priority-class: 'a:x:1': MAX_PRIORITY must be an integer" in capsys.readouterr().err
    assert not out.exists()


def test_the_simulated_frontier_gets_the_same_mix_and_classes(tmp_path: Path) -> None:
    args = _ns(priority_mix="0:0.5,10:0.5", priority_class=["a:0:1"], max_late_s=20.0)
    argv = sim_command(args, plan_from_args(args), 1, 2, tmp_path)
    assert argv[argv.index("--priority-mix") + 1] == "0:0.5,10:0.5"
    assert "--priority-class=a:0:1" in argv and argv[argv.index("--max-late-s") + 1] == "20.0"


# --- inflight sim ------------------------------------------------------------------------


def test_sim_run_and_compare_draw_the_mix_and_report_attainment_a_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from inflight.sim.cli import main

    flags = ["--arrivals", "poisson:0:20,20:20", "--prompt-tokens", "200", "--max-tokens",
             "100", "--priority-mix", "0:0.5,100:0.5", "--priority-class", "high:0:1.5",
             "--priority-class", "batch:100:shed", "--max-late-s", "30"]  # fmt: skip
    assert (
        main(["sim", "run", *flags, "--policy", "fixed:1", "--out-dir", str(tmp_path / "r")]) == 0
    )
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    by = run["measures"]["by_class"]
    assert by["high"]["slo_attainment"] > by["batch"]["slo_attainment"] + 0.2
    assert by["batch"]["misses"]["http_429"] > 0
    total = by["high"]["requests_sent"] + by["batch"]["requests_sent"]
    assert total == run["measures"]["requests_sent"]
    assert "| fixed:1 | batch |" in capsys.readouterr().out
    out = tmp_path / "c"
    assert main(["sim", "compare", *flags, "--policies", "fixed:1", "--seeds", "1,2",
                 "--no-frontier", "--out-dir", str(out)]) == 0  # fmt: skip
    md = (out / "comparison.md").read_text()
    assert "## SLO attainment a priority class" in md and "| fixed:1 | high |" in md


def test_sim_refuses_a_bad_class_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from inflight.sim.cli import main

    argv = ["sim", "run", "--arrivals", "poisson:0:1,10:1", "--priority-class", "a:0:1",
            "--priority-class", "b:0:1", "--out-dir", "/nonexistent/x"]  # fmt: skip
    assert main(argv) == 2
    assert "--priority-class: class 'b': max priority 0 must be above" in capsys.readouterr().err


def test_bench_compare_gives_the_classes_only_to_stacks_whose_router_holds() -> None:
    # inflight up refuses --priority-class where the router holds nothing (vllm-waiting,
    # hpa-rps queue in the replicas); the comparison leaves the flags out there.
    from inflight.bench.openloop.compare import _router_holds
    from inflight.planes.policy_catalogue import parse_policies

    holds = {
        p.name: _router_holds(p)
        for p in parse_policies("fixed:2,saturation,kpa,vllm-waiting,hpa-rps")
    }
    assert holds == {"fixed:2": True, "saturation": True, "kpa": True, "vllm-waiting": False,
                     "hpa-rps": False}  # fmt: skip
    for name, ok in holds.items():
        flags = ["--policy", name] if name != "fixed:2" else ["--replicas", "2", "--no-autoscale"]
        if ok:
            settings(*flags, "--priority-class", "a:0:1")
        else:
            with pytest.raises(ConfigError, match="router holds none"):
                settings(*flags, "--priority-class", "a:0:1")
