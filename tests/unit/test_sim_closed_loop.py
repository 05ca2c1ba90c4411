"""The simulator's closed-loop sweep (``inflight.sim.closed_loop``) and ``inflight sim compare
--scenario sweep``: the live sweep's structure, closed forms on it, bad input named."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from inflight.planes.policy_catalogue import parse_policies
from inflight.sim.cli import main
from inflight.sim.closed_loop import SweepPlan, simulate_sweep, sweep_result
from inflight.sim.core import SimConfig
from inflight.sim.sweep_compare import bench_compare_args, run_policy
from inflight.workload.slowing import slowing_level
from inflight.workload.sweep import DEFAULT_TIME_SCALE, Level

# The reference replica: 4 slots, 4.5 s a request at a full batch.
SLOTS, SERVICE_S = 4, 4.5


def _plan(**overrides: object) -> SweepPlan:
    return SweepPlan.from_bench(bench_compare_args(**overrides), DEFAULT_TIME_SCALE)


def test_the_plan_is_inflight_bench_compares_sweep() -> None:
    plan = _plan()
    assert [lv.concurrency for lv in plan.levels] == [4, 8, 16, 32, 64]
    assert {lv.requests for lv in plan.levels} == {128}
    assert {lv.max_tokens for lv in plan.levels} == {300}
    assert (plan.prompt_tokens, plan.warmup_requests, plan.warmup_concurrency) == (3000, 8, 4)
    assert plan.gap_s == 10.0
    # The bench's wall periods at time-scale 0.2: a 0.1 s sampler is 0.5 seed s, and the
    # pause after a level (2 samples, at most 0.5 s wall) is 1 seed s.
    assert plan.sample_interval_s == pytest.approx(0.5)
    assert plan.settle_s == pytest.approx(1.0)
    assert SweepPlan(levels=plan.levels) == plan  # the dataclass defaults are the bench's
    small = _plan(concurrency=[2, 6], requests=12)
    assert [(lv.concurrency, lv.requests) for lv in small.levels] == [(2, 12), (6, 12)]


def _doc(policy: str, plan: SweepPlan, **config: object) -> dict[str, object]:
    [p] = parse_policies(policy)
    kwargs: dict[str, object] = {"max_replicas": 2, "startup_s": 30.0, "seed": 1, **config}
    return run_policy(p, plan, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("policy", "replicas"), [("fixed:1", 1), ("fixed:2", 2)])
def test_fixed_replicas_at_saturation_serve_slots_over_service_time(
    policy: str, replicas: int
) -> None:
    plan = _plan(concurrency=[8, 16, 32], requests=96)
    doc = _doc(policy, plan)
    expected = replicas * SLOTS / SERVICE_S
    for lv in doc["levels"]:  # type: ignore[attr-defined]
        if lv["concurrency"] >= replicas * SLOTS:
            # Closed loop: whole batches, no edge loss; only the engine's µs hints.
            assert lv["throughput_rps"] == pytest.approx(expected, rel=1e-3)
            assert lv["errors"] == 0 and lv["requests"] == 96
            assert lv["replicas"] == [replicas]


def test_littles_law_holds_per_level_and_l_is_the_client_count() -> None:
    doc = _doc("saturation", _plan(concurrency=[4, 16], requests=64))
    for lv in doc["levels"]:  # type: ignore[attr-defined]
        assert lv["littles_law_error"] < 0.02
        # N clients always hold N requests, but for the level's ramp-down tail.
        assert lv["concurrency"] * 0.8 < lv["l_router"] <= lv["concurrency"]


def test_levels_follow_the_bench_gaps_and_never_exceed_their_concurrency() -> None:
    plan = _plan(concurrency=[4, 8, 16], requests=40)
    run = simulate_sweep(SimConfig(policy="fixed:1"), plan)
    assert run.warmup is not None and run.warmup.finished and run.warmup.completed == 8
    warm_end = max(r.end_s for r in run.sim.requests[:8] if r.end_s is not None)
    assert run.windows[0].start_t == pytest.approx(warm_end + plan.gap_s, abs=1e-6)
    for prev, nxt in zip(run.windows, run.windows[1:], strict=False):
        assert nxt.start_t == pytest.approx(prev.end_t + plan.settle_s + plan.gap_s, abs=1e-6)
    for w in run.windows:
        assert len(w.records) == 40
        edges = sorted([(r.start_t, 1) for r in w.records] + [(r.end_t, -1) for r in w.records])
        level, most = 0, 0
        for _, step in edges:
            level += step
            most = max(most, level)
        assert most == w.concurrency
    assert run.sim.end_s == pytest.approx(run.windows[-1].end_t)


def test_a_time_bounded_level_lengthens_its_answers_on_schedule() -> None:
    level = slowing_level(4, [100, 400], 60.0)
    plan = SweepPlan(levels=(level,), warmup_requests=0)
    run = simulate_sweep(SimConfig(policy="fixed:1"), plan)
    [w] = run.windows
    early = [r for r in w.records if r.start_t < 60.0]
    late = [r for r in w.records if r.start_t >= 60.0]
    assert early and late
    assert {r.output_tokens for r in early} == {100}
    assert {r.output_tokens for r in late} == {400}
    assert max(r.start_t for r in w.records) < 120.0  # nothing sent after the duration


def test_the_same_seed_gives_the_same_sweep() -> None:
    plan = _plan(concurrency=[4, 16], requests=48)
    assert _doc("qps", plan) == _doc("qps", plan)
    result = sweep_result(
        simulate_sweep(SimConfig(policy="saturation"), plan),
        policy="saturation",
        frozen=False,
        command=[],
    )
    assert result.t0 == 0.0 and result.time_scale == 1.0 and result.extra["source"] == "sim"


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"levels": ()}, "--concurrency"),
        ({"warmup_requests": -1}, "--warmup"),
        ({"gap_s": -1.0}, "--gap-s"),
        ({"levels": (Level(0, 5, 300),)}, "--concurrency"),
        ({"levels": (Level(2, None, 300),)}, "a request count or a duration"),
    ],
)
def test_a_bad_plan_is_named(overrides: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        replace(_plan(), **overrides)  # type: ignore[arg-type]


def test_sim_compare_sweep_writes_the_live_comparisons_layout(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    # The whole default sweep; 0: every reproduction check of docs/workload.md passed.
    assert main(["sim", "compare", "--scenario", "sweep", "--out-dir", str(out)]) == 0
    body = json.loads((out / "comparison.json").read_text())
    assert body["schema"] == "inflight-bench-compare/1" and body["source"] == "sim"
    assert body["policies"] == ["fixed:1", "fixed:2", "qps", "saturation"]
    assert body["max_replicas"] == 2 and body["startup_s"] == 30.0
    for name, run in body["runs"].items():
        assert [lv["concurrency"] for lv in run["levels"]] == [4, 8, 16, 32, 64]
        assert all(lv["throughput_rps"] > 0 and lv["e2e_p50_s"] > 0 for lv in run["levels"])
        doc = json.loads((out / run["file"]).read_text())
        assert doc["policy"] == name and doc["timeline"]
    assert body["reproduced"] is True
    assert body["runs"]["fixed:1"]["changes"] == []
    assert body["runs"]["qps"]["changes"][0][1:] == [1, 2]  # qps scales up at c=4
    for name in ("comparison.md", "sweep.png", "timeseries.png", "saturation.md", "slowing.png"):
        assert (out / name).stat().st_size > 0
    # As live, the slowing model follows the sweep (no --no-slowing), and its checks pass.
    assert {n: r["file"] for n, r in body["slowing"].items()} == {
        "qps": "slowing-qps.json", "saturation": "slowing-saturation.json"}  # fmt: skip
    slowing = {c["name"]: c["status"] for c in body["checks"] if "slowing" in c["name"]}
    assert slowing == {
        "slowing model: the qps baseline scales down": "PASS",
        "slowing model: saturation holds (never scales down)": "PASS",
    }


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--scenario", "sweep", "--arrivals", "poisson:0:1,10:1"], "--arrivals"),
        (["--scenario", "sweep", "--seed", "3"], "--seed"),
        (["--scenario", "sweep", "--seeds", "1,2"], "--seeds"),
        (["--scenario", "sweep", "--max-tokens", "lognormal:300:0.5"], "--max-tokens"),
        (["--scenario", "sweep", "--requests", "0"], "--requests"),
        (["--scenario", "sweep", "--policies", "fixed:1,nope"], "--policies"),
        (["--scenario", "sweep", "--min-replicas", "1"], "--min-replicas"),
        (["--scenario", "ramp", "--concurrency", "4"], "--concurrency"),
    ],
)
def test_sim_compare_sweep_names_a_bad_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    assert main(["sim", "compare", *extra, "--out-dir", str(tmp_path / "x")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("offset_s", [-0.1, 5.0])
def test_a_scrape_offset_outside_the_interval_is_refused(offset_s: float) -> None:
    with pytest.raises(ValueError, match="scrape_offset_s"):
        SimConfig(scrape_offset_s=offset_s)


def test_the_scrape_offset_moves_the_scrapes() -> None:
    run = simulate_sweep(SimConfig(policy="fixed:1", scrape_offset_s=2.0), _plan(requests=8))
    times = [t for t, _ in run.sim.inflight_samples]
    assert times[0] == pytest.approx(2.0) and times[1] == pytest.approx(7.0)
