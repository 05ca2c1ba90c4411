"""``inflight sim tune``'s held-out mode: the chosen setting reported on seeds or a trace
window the search did not see, with real re-simulated figures, and bad splits refused."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from inflight.planes.policy_catalogue import parse_policies
from inflight.sim.cli import main
from inflight.sim.tune_cli import WORKLOAD_KEYS, _figures
from inflight.workload.trace import PlannedRequest, write_trace

ARRIVALS = ["--arrivals", "poisson:0:1,100:3,200:1", "--min-replicas", "1",
            "--max-replicas", "3", "--startup-s", "30"]  # fmt: skip
SPACE = ["--targets", "1,0.75", "--down-windows-s", "60", "--growth-horizons-s", "0",
         "--floor-fractions", "0,0.6", "--attainment", "0.5", "--jobs", "1"]  # fmt: skip


def _tune(args: list[str], out: Path) -> tuple[int, str, str, dict[str, Any]]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["sim", "tune", *args, "--out", str(out)])
    body = json.loads(out.read_text()) if out.exists() else {}
    return code, stdout.getvalue(), stderr.getvalue(), body


def _flags(**given: Any) -> tuple[tuple[str, Any], ...]:
    values: dict[str, Any] = dict.fromkeys(WORKLOAD_KEYS)
    values["hold_deadline_peers"] = False
    values.update(given)
    return tuple((k, values[k]) for k in WORKLOAD_KEYS)


def test_held_out_seeds_report_the_chosen_setting_re_simulated(tmp_path: Path) -> None:
    code, out, err, body = _tune([*ARRIVALS, *SPACE, "--seeds", "1", "--holdout-seeds", "2"],
                                 tmp_path / "t.json")  # fmt: skip
    assert code == 0, err
    [held] = body["holdout"]
    assert held["label"] == "seeds 2" and held["seeds"] == [2]
    tuned = "saturation[" + ";".join(f"{k}={v}" for k, v in body["metadata"].items()) + "]"
    assert set(held["runs"]) == {tuned, "saturation"}
    # The held-out figures are the setting's own on seed 2, against fixed:3 on seed 2.
    flags = _flags(arrivals=ARRIVALS[1], min_replicas=1, max_replicas=3, startup_s=30.0)
    [policy] = parse_policies(tuned, start_replicas=1)
    [fixed] = parse_policies("fixed:3", start_replicas=1)
    att, rs = _figures(flags, policy, 2)
    _, top = _figures(flags, fixed, 2)
    run = held["runs"][tuned]
    assert run["slo_attainment"] == pytest.approx(att)
    assert run["replica_seconds_ratio"] == pytest.approx(rs / top)
    assert isinstance(run["frontier_gap"], float) and isinstance(run["dominated_by_fixed"], list)
    assert "Held out" in out and "| seeds 2 | saturation |" in out
    # both floor fractions were judged: the space reached the search
    fractions = {j["metadata"]["floorFraction"] for j in body["judged"]}
    assert fractions == {"0", "0.6"}


def _two_window_trace(path: Path) -> Path:
    """0-100 s: one request every 2 s; 100-200 s: four a second (a different load)."""
    quiet = [PlannedRequest(2.0 * i, 1000, 100) for i in range(50)]
    busy = [PlannedRequest(100.0 + 0.25 * i, 1000, 100) for i in range(400)]
    write_trace(path, [*quiet, *busy])
    return path


def test_a_held_out_trace_window_is_judged_on_that_window(tmp_path: Path) -> None:
    trace = _two_window_trace(tmp_path / "trace.jsonl")
    args = ["--trace", str(trace), "--trace-duration-s", "100", "--min-replicas", "1",
            "--max-replicas", "3", "--startup-s", "30", *SPACE, "--seeds", "1",
            "--holdout-trace-start-s", "100"]  # fmt: skip
    code, _, err, body = _tune(args, tmp_path / "t.json")
    assert code == 0, err
    # The search saw only 0-100 s: fixed:3 over its 100 s, not the trace's 200.
    assert body["baseline"]["seeds"]["1"]["replica_seconds"] == pytest.approx(300.0, rel=0.05)
    [held] = body["holdout"]
    assert held["label"] == "trace 100-200 s" and held["trace_start_s"] == 100.0
    flags = _flags(trace=str(trace), trace_start_s=100.0, trace_duration_s=100.0,
                   min_replicas=1, max_replicas=3, startup_s=30.0)  # fmt: skip
    [default] = parse_policies("saturation", start_replicas=1)
    att, _ = _figures(flags, default, 1)
    assert held["runs"]["saturation"]["slo_attainment"] == pytest.approx(att)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--seeds", "1,2", "--holdout-seeds", "2,3"], "--holdout-seeds: 2,3 shares seeds"),
        (["--seeds", "1", "--holdout-trace-start-s", "100"], "--holdout-trace-start-s"),
    ],
)
def test_a_bad_split_is_refused_before_any_run(
    tmp_path: Path, extra: list[str], needle: str
) -> None:
    code, _, err, body = _tune([*ARRIVALS, *SPACE, *extra], tmp_path / "t.json")
    assert code == 2 and needle in err and body == {}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--holdout-trace-start-s", "50"], "overlaps the tuned window 0-100 s"),
        (["--holdout-seeds", "2"], "a trace is the same on every seed"),
        (["--holdout-trace-start-s", "-5"], "must be >= 0"),
    ],
)
def test_a_bad_trace_split_is_refused(tmp_path: Path, extra: list[str], needle: str) -> None:
    trace = _two_window_trace(tmp_path / "trace.jsonl")
    args = ["--trace", str(trace), "--trace-duration-s", "100", "--max-replicas", "3",
            *SPACE, "--seeds", "1", *extra]  # fmt: skip
    code, _, err, body = _tune(args, tmp_path / "t.json")
    assert code == 2 and needle in err and body == {}


def test_a_trace_holdout_needs_a_tuned_window(tmp_path: Path) -> None:
    trace = _two_window_trace(tmp_path / "trace.jsonl")
    args = ["--trace", str(trace), "--max-replicas", "3", *SPACE, "--seeds", "1",
            "--holdout-trace-start-s", "100"]  # fmt: skip
    code, _, err, _ = _tune(args, tmp_path / "t.json")
    assert code == 2 and "needs --trace-duration-s" in err
