"""The slowing model in the simulator (``inflight sim compare --scenario slowing``, and after
the sweep unless ``--no-slowing``): the live schedule, docs/workload.md's claim on it (λ falls
while L stays; the QPS rule scales down, saturation holds), Little's Law per phase, the
reproduction checks that read it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from inflight.bench.cli import register as register_bench
from inflight.measure import repro
from inflight.measure.records import RouterSample
from inflight.measure.results import read_json
from inflight.measure.stats import MAX_LITTLES_LAW_ERROR, littles_law_error, time_average
from inflight.sim.cli import main
from inflight.sim.cli import register as register_sim
from inflight.sim.closed_loop import SweepPlan, simulate_sweep
from inflight.sim.core import SimConfig
from inflight.sim.sweep_compare import bench_compare_args
from inflight.workload import slowing as slowing_model
from inflight.workload.sweep import DEFAULT_TIME_SCALE

RESULTS = Path(__file__).resolve().parents[2] / "results"
# A live `inflight bench compare` at its defaults (its slowing runs are committed).
LIVE = RESULTS / "2026-12-01-compare"
AS_LIVE = "saturation[queueHeadroom=0;scaleDownWindowSeconds=60;sloTtftSeconds=0]"
SLOWING_FLAGS = ("no_slowing", "slowing_concurrency", "slowing_max_tokens", "slowing_phase_s")
Doc = Mapping[str, Any]
EPS_S = 1e-3  # run documents keep seed times to the ms


def _parse(argv: Sequence[str], register: Any) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="inflight")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(argv)


def _bench_args(*flags: str) -> argparse.Namespace:
    return _parse(["bench", "compare", "--out-dir", "-", *flags], register_bench)


def _sim_args(*flags: str) -> argparse.Namespace:
    return _parse(
        ["sim", "compare", "--scenario", "slowing", "--out-dir", "-", *flags], register_sim
    )


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Doc]:
    """``inflight sim compare --scenario slowing``: the runs, by policy; saturation as the
    committed live runs (2026-12-01) ran it, its settings named (no queueing headroom, a 60 s
    scale-down window: today's defaults too; no SLO stage, the default since 2026-12-07)."""
    out = tmp_path_factory.mktemp("slowing") / "cmp"
    policies = f"qps,{AS_LIVE}"
    args = ["sim", "compare", "--scenario", "slowing", "--policies", policies, "--out-dir"]
    assert main([*args, str(out)]) == 0
    body = json.loads((out / "comparison.json").read_text())
    return {
        name.split("[")[0]: json.loads((out / r["file"]).read_text())
        for name, r in body["slowing"].items()
    }


def _phases(doc: Doc) -> list[tuple[float, float, int]]:
    """(start, end, max_tokens) of each phase, seed s from the run's start: the schedule's
    offsets after the level's start; the last phase ends when sending stops."""
    [level] = doc["levels"]
    start = (level["start_t"] - doc["t0_unix"]) / doc["time_scale"]
    offsets = [t for t, _ in doc["slowing_phases"]]
    step = offsets[1] - offsets[0]
    return [(start + t, start + t + step, m) for t, m in doc["slowing_phases"]]


def _desired_at(doc: Doc, t: float) -> int:
    return int([p for p in doc["timeline"] if p[0] <= t][-1][1])


# --- the schedule is the live one -------------------------------------------------------
CUSTOM = "--slowing-concurrency 4 --slowing-max-tokens 100,400,200 --slowing-phase-s 40"


@pytest.mark.parametrize("flags", [(), tuple(CUSTOM.split())])
def test_the_sim_takes_the_live_slowing_flags_and_builds_the_live_level(
    flags: tuple[str, ...],
) -> None:
    live, sim = _bench_args(*flags), _sim_args(*flags)
    assert {k: getattr(sim, k) for k in SLOWING_FLAGS} == {
        k: getattr(live, k) for k in SLOWING_FLAGS
    }
    assert slowing_model.level_from_args(sim) == slowing_model.level_from_args(live)


def _level_span(doc: Doc) -> tuple[float, float]:
    [level] = doc["levels"]
    return (
        (level["start_t"] - doc["t0_unix"]) / doc["time_scale"],
        (level["end_t"] - doc["t0_unix"]) / doc["time_scale"],
    )


def test_the_simulated_runs_match_the_committed_live_ones(simulated: dict[str, Doc]) -> None:
    assert set(simulated) == {
        "qps",
        "saturation",
    }  # inflight.bench.closedloop.compare runs these two
    for name, doc in simulated.items():
        live = read_json(LIVE / f"slowing-{name}.json")  # committed gzipped
        assert doc["slowing_phases"] == live["slowing_phases"]
        assert doc["slowing_phases"] == [[0.0, 300], [75.0, 600], [150.0, 1200], [225.0, 2400]]
        assert [lv["concurrency"] for lv in doc["levels"]] == [8]
        assert doc["warmup"] == live["warmup"]
        # The level follows the warm-up without a gap and ends as live (seed s).
        (start, end), (live_start, live_end) = _level_span(doc), _level_span(live)
        assert start == pytest.approx(live_start, abs=1.0), name
        assert end == pytest.approx(live_end, abs=5.0), name
        [lv], [live_lv] = doc["levels"], live["levels"]
        assert lv["requests"] == live_lv["requests"], name
        assert lv["throughput_rps"] == pytest.approx(live_lv["throughput_rps"], rel=0.03), name


def test_each_request_is_sent_with_its_phases_max_tokens(simulated: dict[str, Doc]) -> None:
    for doc in simulated.values():
        phases = _phases(doc)
        seen: set[tuple[int, int]] = set()
        for r in doc["requests"]:
            sent_s, tokens = r[1], r[4]
            # The document rounds times to the ms; nothing is sent after the last phase.
            [m] = [m for a, b, m in phases if a - EPS_S <= sent_s < b - EPS_S]
            assert tokens == m
            seen.add((m, tokens))
        assert {m for _, m in seen} == {m for *_, m in phases}  # every phase sent some


def test_the_warm_up_sends_the_workloads_length_and_the_level_follows_without_a_gap() -> None:
    # inflight.bench.closedloop.sweep.run_sweep warms up with the workload's body (--max-tokens),
    # whatever the
    # slowing level's first phase; inflight.bench.closedloop.compare passes gap_s=0 to the slowing
    # runs.
    args = bench_compare_args(max_tokens="200", warmup=4)
    level = slowing_model.slowing_level(4, [100, 400], 30.0)
    plan = SweepPlan.from_bench(args, DEFAULT_TIME_SCALE, levels=(level,), gap_s=0.0)
    run = simulate_sweep(SimConfig(policy="fixed:1"), plan)
    warm = run.sim.requests[:4]
    assert {r.output_tokens for r in warm} == {200}
    warm_end = max(r.end_s for r in warm if r.end_s is not None)
    assert run.windows[0].start_t == pytest.approx(warm_end)
    assert {r.output_tokens for r in run.windows[0].records} == {100, 400}


# --- docs/workload.md: λ falls while L stays; qps scales down, saturation holds -------------
def test_saturation_holds_its_replicas_while_the_qps_rule_scales_down(
    simulated: dict[str, Doc],
) -> None:
    sat, qps = simulated["saturation"], simulated["qps"]
    phases = _phases(sat)
    # Saturation scales up once, in the first phase (8 in flight on 4 slots), then holds
    # 2 through every later phase, however slow the answers get.
    first_end = phases[0][1]
    assert [c[1:] for c in repro.replica_changes(sat, 0.0, first_end)] == [(1, 2)]
    for a, b, _ in phases[1:]:
        assert _desired_at(sat, a) == 2 and repro.replica_changes(sat, a, b) == []
        assert {s[3] for s in sat["router_samples"] if a <= s[0] <= b} == {2}  # ready
    # The QPS rule reads the falling λ as less load and scales the full system down.
    q_phases = _phases(qps)
    downs = [c for c in repro.replica_changes(qps, q_phases[1][0], q_phases[-1][1]) if c[2] < c[1]]
    assert downs, qps["timeline"]
    assert min(s[3] for s in qps["router_samples"] if s[0] >= downs[0][0]) == 1


def test_littles_law_holds_in_every_phase_as_lambda_falls(simulated: dict[str, Doc]) -> None:
    for name, doc in simulated.items():
        samples = [RouterSample(*s) for s in doc["router_samples"]]
        rates, waits = [], []
        for a, b, _ in _phases(doc):
            # L at the router; λ·W from the client, over the phase
            # (inflight.measure.stats.level_stats's
            # definition on a window: every request in the system during it, and the time
            # each spent in it).
            l_router = time_average(samples, a, b)
            assert l_router is not None
            inside = [
                (max(r[1], a), min(r[2], b)) for r in doc["requests"] if r[1] < b and r[2] > a
            ]
            lam = len(inside) / (b - a)
            w = sum(y - x for x, y in inside) / len(inside)
            assert littles_law_error(l_router, lam, w) <= MAX_LITTLES_LAW_ERROR, (name, a)
            # L stays at the client count while the answers lengthen...
            assert l_router == pytest.approx(8, rel=0.05), (name, a)
            done = [r[2] - r[1] for r in doc["requests"] if a <= r[2] < b]
            rates.append(len(done) / (b - a))
            waits.append(sum(done) / len(done))
        # ...so λ (completions/s) falls and W rises phase over phase.
        assert rates == sorted(rates, reverse=True) and len(set(rates)) == len(rates), name
        assert waits == sorted(waits) and len(set(waits)) == len(waits), name


# --- the reproduction checks and the files ------------------------------------------------
def test_the_slowing_checks_pass_on_the_simulated_runs(simulated: dict[str, Doc]) -> None:
    checks = {c["name"]: c for c in repro.slowing_checks(simulated)}
    assert set(checks) == {
        "slowing model: the qps baseline scales down",
        "slowing model: saturation holds (never scales down)",
    }
    assert all(c["status"] == "PASS" for c in checks.values()), checks


def test_scenario_slowing_writes_only_the_slowing_runs(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    argv = ["sim", "compare", "--scenario", "slowing", "--no-slowing",  # slowing runs anyway
            "--policies", "fixed:1,saturation", "--slowing-concurrency", "4",
            "--slowing-max-tokens", "100,200", "--slowing-phase-s", "30"]  # fmt: skip
    assert main([*argv, "--out-dir", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {
        "comparison.json", "comparison.md", "slowing-saturation.json", "slowing.png"}  # fmt: skip
    body = json.loads((out / "comparison.json").read_text())
    assert body["runs"] == {} and list(body["slowing"]) == ["saturation"]
    assert body["slowing_model"]["phases"] == [[0.0, 100], [30.0, 200]]
    doc = json.loads((out / "slowing-saturation.json").read_text())
    assert doc["slowing_phases"] == [[0.0, 100], [30.0, 200]]
    assert [lv["concurrency"] for lv in doc["levels"]] == [4]


def test_no_slowing_leaves_the_sweep_alone(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    argv = ["sim", "compare", "--scenario", "sweep", "--no-slowing", "--concurrency", "4",
            "--requests", "8", "--policies", "qps,saturation"]  # fmt: skip
    assert main([*argv, "--out-dir", str(out)]) in (0, 1)  # 1: a sweep this small fails checks
    names = {p.name for p in out.iterdir()}
    assert "saturation.json" in names and not any(n.startswith("slowing") for n in names)
    body = json.loads((out / "comparison.json").read_text())
    assert body["slowing"] == {} and "slowing_model" not in body
    assert not [c for c in body["checks"] if c["name"].startswith("slowing model")]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--slowing-max-tokens", "300,abc"], "--slowing-max-tokens"),
        (["--slowing-max-tokens", "300,0"], "--slowing-max-tokens"),
        (["--slowing-concurrency", "0"], "--slowing-concurrency"),
    ],
)
def test_a_bad_slowing_flag_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], needle: str
) -> None:
    out = tmp_path / "x"
    assert main(["sim", "compare", "--scenario", "slowing", *flags, "--out-dir", str(out)]) == 2
    assert needle in capsys.readouterr().err
    assert not out.exists()
