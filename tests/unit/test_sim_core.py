"""The simulator's loop against closed-form results, its determinism, and its clock.

Closed forms: fixed replicas at saturation serve ``slots ÷ service time`` each (the
emulator's reference profile: 4 / 4.5 s); Little's Law L = λ·W holds on the simulated
router. Behaviour: the saturation policy scales up on the ramp and beats its minimum.
Time: nothing in the loop reads a clock or sleeps, and a 1500 s scenario is simulated.
"""

from __future__ import annotations

import ast
import logging
import time
from pathlib import Path

import pytest

from inflight.measure.slo import DEFAULT_SLO
from inflight.sim import report
from inflight.sim.core import SimConfig, fixed_replicas, simulate
from inflight.workload.scenarios import get_scenario
from inflight.workload.trace import PlannedRequest

SIM_DIR = Path(__file__).resolve().parents[2] / "inflight" / "sim"


def _steady(rate_rps: float, duration_s: float) -> list[PlannedRequest]:
    """Reference requests (3,000 in, 300 out) at a constant spacing."""
    n = int(rate_rps * duration_s)
    return [PlannedRequest(i / rate_rps, 3000, 300) for i in range(n)]


def test_fixed_replicas_at_saturation_serve_slots_over_service_time() -> None:
    # 2 replicas x 4 slots / 4.5 s = 1.778 req/s; offered 3 req/s, so the router always
    # holds requests and every slot is busy. Completions counted over [200, 1000] s.
    planned = _steady(3.0, 1000.0)
    config = SimConfig(policy="fixed:2", queue_timeout_s=10_000.0, drain_s=0.0)
    result = simulate(config, planned, end_s=1000.0)
    done = [r.end_s for r in result.requests if r.ok and r.end_s is not None]
    in_window = [t for t in done if 200.0 <= t < 1000.0]
    throughput = len(in_window) / 800.0
    expected = 2 * config.profile.max_num_seqs / config.profile.service_s
    # Batches of 8 finish together every 4.5 s: the window's edges cost at most one batch.
    assert throughput == pytest.approx(expected, abs=8 / 800.0)
    assert all(p["desired"] == 2 and p["live"] == 2 for p in result.timeline)


def test_littles_law_holds_on_simulated_data() -> None:
    # Open loop over the ramp, held requests included: ∫L dt = Σ W, up to the engine's
    # 1 µs wake-up hint a request.
    sc = get_scenario("ramp")
    config = SimConfig(policy="saturation", min_replicas=3, max_replicas=8, startup_s=100.0)
    result = simulate(config, sc.plan(3), sc.arrivals.duration_s)
    law = report.littles_law(result)
    assert law["ratio"] == pytest.approx(1.0, abs=1e-4)
    assert law["L"] is not None and law["L"] > 1.0  # a real load, not an empty run


def test_a_seed_gives_the_same_run_and_another_seed_another() -> None:
    sc = get_scenario("spike")
    config = SimConfig(policy="saturation", min_replicas=3, max_replicas=8, startup_s=100.0)

    def run(seed: int) -> tuple[object, ...]:
        r = simulate(config, sc.plan(seed), sc.arrivals.duration_s)
        return (r.requests, r.timeline, r.decisions, r.l_integral)

    assert run(5) == run(5)
    assert run(5) != run(6)


def test_saturation_scales_up_on_the_ramp_and_beats_its_minimum() -> None:
    sc = get_scenario("ramp")
    planned = sc.plan(1)
    end_s = sc.arrivals.duration_s
    auto = simulate(
        SimConfig(policy="saturation", min_replicas=3, max_replicas=8, startup_s=100.0),
        planned,
        end_s,
    )
    low = simulate(SimConfig(policy="fixed:3", startup_s=100.0), planned, end_s)
    desired = [p["desired"] for p in auto.timeline]
    assert desired[0] == 3 and max(desired) == 8
    assert max(p["ready"] for p in auto.timeline) == 8
    # Replicas become ready start-up after they were asked for, never sooner.
    first_up = next(p["t"] for p in auto.timeline if p["desired"] > 3)
    first_ready = next(p["t"] for p in auto.timeline if p["ready"] > 3)
    assert first_ready == pytest.approx(first_up + 100.0)
    m_auto = report.measures(auto, DEFAULT_SLO)
    m_low = report.measures(low, DEFAULT_SLO)
    assert m_auto["slo_attainment"] > m_low["slo_attainment"] + 0.2
    assert m_auto["replica_seconds"] > m_low["replica_seconds"]
    assert auto.decisions and all(d.t >= -config_warmup() for d in auto.decisions)


def config_warmup() -> float:
    return SimConfig().warmup_s


def test_the_loop_reads_no_clock_and_a_1500_s_scenario_is_simulated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_clock(*_a: object, **_k: object) -> float:
        raise AssertionError("the simulation read a clock or slept")

    for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "sleep"):
        monkeypatch.setattr(time, name, no_clock)
    sc = get_scenario("ramp")
    logging.disable(logging.CRITICAL)  # a log record reads the clock; the loop must not
    try:
        result = simulate(
            SimConfig(policy="saturation", min_replicas=3, max_replicas=8, startup_s=100.0),
            sc.plan(2),
            sc.arrivals.duration_s,
        )
    finally:
        logging.disable(logging.NOTSET)
    assert result.finished_s >= 1500.0
    assert len(result.requests) > 3000


# The one module of inflight/sim/ that does I/O by design: it reads a deployment's Prometheus
# history (dates on its command line), offline; nothing of the simulation imports it.
IO_MODULES = {"prom_trace.py"}


def test_nothing_in_sim_imports_a_clock_or_sleeps() -> None:
    forbidden_modules = {"time", "datetime", "asyncio", "threading"}
    modules = sorted(p for p in SIM_DIR.glob("*.py") if p.name not in IO_MODULES)
    assert len(modules) > 10, f"{SIM_DIR}: the simulator's modules are not there"
    for path in modules:
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found = {a.name.split(".")[0] for a in node.names} & forbidden_modules
                assert not found, f"{path.name} imports {found}"
            elif isinstance(node, ast.ImportFrom) and node.module:
                top = node.module.split(".")[0]
                assert top not in forbidden_modules, f"{path.name} imports from {node.module}"
            elif isinstance(node, ast.Attribute):
                assert node.attr != "sleep", f"{path.name} calls .sleep"


@pytest.mark.parametrize(
    ("text", "n"), [("fixed:1", 1), ("fixed:8", 8), ("saturation", None), ("qps", None)]
)
def test_fixed_policy_parsing(text: str, n: int | None) -> None:
    assert fixed_replicas(text) == n


@pytest.mark.parametrize("text", ["fixed:0", "fixed:x", "fixed:"])
def test_bad_fixed_policy_names_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--policy"):
        fixed_replicas(text)


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"policy": "bogus"}, "--policy"),
        ({"min_replicas": -1}, "--min-replicas"),
        ({"min_replicas": 4, "max_replicas": 3}, "--max-replicas"),
        ({"startup_s": -1.0}, "--startup-s"),
    ],
)
def test_bad_config_names_the_flag(kwargs: dict[str, object], flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        SimConfig(**kwargs)  # type: ignore[arg-type]


def test_scale_to_zero_and_back_on_stream_is_active() -> None:
    # min 0: idle past KEDA's 300 s cooldown → 0 replicas; the first requests at 400 s are
    # held by the router, the next scrape shows them in L, StreamIsActive pushes true
    # within a second and KEDA activates at once (not at its next 30 s poll).
    planned = [PlannedRequest(400.0 + 0.5 * i, 1000, 50) for i in range(40)]
    config = SimConfig(policy="saturation", min_replicas=0, max_replicas=2, startup_s=30.0)
    result = simulate(config, planned, end_s=420.0)
    zero = [p for p in result.timeline if p["desired"] == 0]
    assert zero and 0.0 < zero[0]["t"] < 400.0
    up = next(p for p in result.timeline if p["t"] >= 400.0 and p["desired"] >= 1)
    assert up["t"] <= 400.0 + config.scrape_interval_s + 2 * config.stream_interval_s
    assert all(r.ok for r in result.requests)  # held, then served once a replica is ready
    first_served = min(r.first_s for r in result.requests if r.first_s is not None)
    assert first_served >= up["t"] + config.startup_s


def test_the_control_planes_periods_are_inflight_ups_defaults() -> None:
    from inflight.control.trigger import SCRAPE_INTERVAL_S
    from inflight.up.cli import UpSettings

    fields = UpSettings.model_fields
    c = SimConfig()
    assert c.hpa_sync_s == fields["hpa_sync_s"].default
    assert c.polling_interval_s == fields["polling_interval_s"].default
    assert c.cooldown_s == fields["cooldown_s"].default
    assert c.scrape_interval_s == SCRAPE_INTERVAL_S


def _spike(policy: str, hold_deadline_s: float, peers_too: bool = False) -> dict[str, object]:
    sc = get_scenario("spike")
    config = SimConfig(
        policy=policy,
        min_replicas=3,
        max_replicas=8,
        startup_s=100.0,
        hold_deadline_s=hold_deadline_s,
        hold_deadline_peers=peers_too,
    )
    return report.measures(simulate(config, sc.plan(1), sc.arrivals.duration_s), DEFAULT_SLO)


def test_the_hold_deadline_serves_on_time_requests_first_and_loses_none() -> None:
    # The spike overloads 3 replicas for their 100 s start-up. FIFO makes the backlog
    # late and every request behind it too; the deadline serves those that can still be
    # on time first, so only about the capacity shortfall misses. Same replicas (the
    # order does not change L), nothing lost, and the late ones wait longer: the tail.
    fifo, deadline = _spike("saturation", 0.0), _spike("saturation", 1.5)
    for m in (fifo, deadline):
        assert m["requests_ok"] == m["requests_sent"]
    assert deadline["slo_attainment"] > fifo["slo_attainment"] + 0.2  # type: ignore[operator]
    assert deadline["replica_seconds"] == pytest.approx(fifo["replica_seconds"], rel=0.02)
    assert deadline["ttft_s"]["p99"] > fifo["ttft_s"]["p99"]  # type: ignore[index]


def test_peers_hold_fifo_whatever_the_deadline() -> None:
    # inflight.control.hold_order: a peer's run models its own system, which queues FIFO.
    assert _spike("kpa", 1.5) == _spike("kpa", 0.0)


def test_hold_deadline_peers_puts_a_peer_behind_inflights_router() -> None:
    # inflight sim --hold-deadline-peers: what the order alone is worth under a peer.
    fifo, ordered = _spike("kpa", 1.5), _spike("kpa", 1.5, peers_too=True)
    assert ordered["slo_attainment"] > fifo["slo_attainment"] + 0.2  # type: ignore[operator]
    assert ordered["requests_ok"] == ordered["requests_sent"]
