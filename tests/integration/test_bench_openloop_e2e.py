"""`inflight bench compare` in open-loop mode end to end: real `inflight up` stacks, tiny.

Two policies (the static maximum and saturation) on the same short Poisson ramp at a small
time-scale, about a minute. It proves the files and their fields, that both policies got
the same requests, that every stack stopped clean, and that nothing is left running. The
figures themselves are not judged (the full scenarios are opt-in: `--scenario ramp`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from inflight.measure.results import read_json
from inflight.procs import port_is_free
from tests.support import INFLIGHT

ARGS = (
    "bench", "compare", "--no-progress", "--arrivals", "poisson:0:0.5,40:3,60:3",
    "--policies", "fixed:2,saturation", "--max-replicas", "2", "--min-replicas", "1",
    "--prompt-tokens", "uniform:1000:4000", "--max-tokens", "lognormal:200:0.5",
    "--seed", "4", "--drain-s", "30", "--time-scale", "0.05", "--startup-s", "10",
    "--sample-interval-s", "0.02",
)  # fmt: skip

MEASURES = (
    "requests_sent", "slo_attainment", "ttft_s", "tpot_s", "e2e_s", "misses",
    "replica_seconds", "replica_seconds_ratio", "changes", "reversals", "littles_law",
    "pareto", "valid", "file",
)  # fmt: skip


@pytest.mark.serial  # the open-loop sender keeps a schedule: run alone, after the parallel stage
def test_open_loop_compare_writes_the_comparison_and_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    out = tmp_path / "2026-12-01-tiny-open"
    argv = [*INFLIGHT, *ARGS, "--out-dir", str(out), "--state-root", str(tmp_path / "state")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a run judged invalid

    assert {"fixed2.json.gz", "saturation.json.gz", "comparison.json", "comparison.md",
            "pareto.png", "timeseries.png"} <= {p.name for p in out.iterdir()}  # fmt: skip
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["schema"] == "inflight-bench-compare-openloop/1"
    assert doc["policies"] == ["fixed:2", "saturation"] and doc["time_scale"] == 0.05
    assert doc["baseline"] == "fixed:2" and doc["source"] == "live"
    assert doc["scenario"]["seed"] == 4 and doc["scenario"]["max_replicas"] == 2
    assert doc["scenario"]["startup_up_args"] == ["--startup-s", "10"]
    planned = doc["scenario"]["requests_planned"]
    assert planned > 0
    for name, run in doc["runs"].items():
        for key in MEASURES:
            assert key in run, (name, key)
        assert run["requests_sent"] == planned  # nothing sent is left out
        assert set(run["ttft_s"] or {}) <= {"p50", "p95", "p99"}
        assert run["littles_law"]["l_router"] is not None
        assert run["replica_field"] == "live"
    # the static frontier, simulated on the same requests (--frontier sim, the default)
    fr = doc["frontier"]
    assert fr["source"] == "sim" and list(fr["fleets"]) == ["fixed:1", "fixed:2"], fr
    assert fr["missing"] == [] and fr["command"][:3] == ["inflight", "sim", "compare"]
    sim = json.loads((out / "frontier-sim" / "comparison.json").read_text())
    assert sim["scenario"]["requests_planned"] == planned and sim["scenario"]["seeds"] == [4]
    for run in doc["runs"].values():
        assert run["frontier_gap"] is not None and run["dominated_by_fixed"] is not None
    assert "## Against the static frontier" in (out / "comparison.md").read_text()
    assert doc["runs"]["fixed:2"]["replica_seconds_ratio"] == 1.0
    assert doc["runs"]["fixed:2"]["changes"] == 0
    assert doc["pareto_front"], doc["runs"]

    runs = {n: read_json(out / f"{n}.json.gz") for n in ("fixed2", "saturation")}
    # the same planned requests for both policies
    plans = [[r[1:4] for r in run["requests"]] for run in runs.values()]
    assert plans[0] == plans[1] and len(plans[0]) == planned
    for run in runs.values():
        stack = run["stack"]
        assert stack["clean"], stack
        assert stack["pids_left_after_stop"] == [] and stack["ports_busy_after_stop"] == []
        assert stack["ports_seen"] and all(port_is_free(p) for p in stack["ports_seen"])
    assert "| saturation |" in (out / "comparison.md").read_text()


@pytest.mark.serial  # the open-loop sender keeps a schedule: run alone, after the parallel stage
def test_a_live_frontier_runs_the_missing_fixed_fleets_live(tmp_path: Path) -> None:
    out = tmp_path / "2026-12-02-tiny-live-frontier"
    args = [a if a != "fixed:2,saturation" else "saturation" for a in ARGS]
    argv = [*INFLIGHT, *args, "--frontier", "live", "--out-dir", str(out),
            "--state-root", str(tmp_path / "state")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    doc = json.loads((out / "comparison.json").read_text())
    assert doc["policies"] == ["saturation"]  # the fleets are the frontier's, not policies
    fr = doc["frontier"]
    assert fr["source"] == "live" and list(fr["fleets"]) == ["fixed:1", "fixed:2"]
    assert [f["file"] for f in fr["fleets"].values()] == ["fixed1.json.gz", "fixed2.json.gz"]
    assert not (out / "frontier-sim").exists()
    for name in ("fixed1", "fixed2"):
        run = read_json(out / f"{name}.json.gz")
        assert run["requests_sent"] == doc["scenario"]["requests_planned"]
        assert run["stack"]["clean"], run["stack"]
    assert doc["baseline"] == "fixed:2" and doc["baseline_from"] == "frontier"
    assert doc["runs"]["saturation"]["frontier_gap"] is not None
