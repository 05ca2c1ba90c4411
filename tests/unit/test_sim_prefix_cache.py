"""The simulator's replicas see the prefix cache: requests' block ids (the prefix scenarios,
Mooncake's hash_ids) become the engines' block hashes, the replicas' vLLM prefix-cache
counters are scraped, and a run reports its hit rate; no shared prefix, no change."""

from __future__ import annotations

import argparse
from dataclasses import replace

from inflight.planes.policy_catalogue import parse_policies
from inflight.sim import kvcache
from inflight.sim import scrapes as S
from inflight.sim.cli import sim_config
from inflight.sim.core import RequestResult, SimConfig, SimResult, Simulation, simulate
from inflight.workload.plan import plan_from_args
from inflight.workload.prefixes import PrefixShape
from inflight.workload.trace import PlannedRequest

CACHING = replace(SimConfig().profile, enable_prefix_caching=True)


def requests(groups: int, n: int = 40) -> list[PlannedRequest]:
    plain = [PlannedRequest(0.5 * i, 1600, 20) for i in range(n)]
    return PrefixShape(groups, 1500).assign(plain, seed=3)


def run(groups: int, caching: bool = True) -> tuple[Simulation, SimResult]:
    config = SimConfig(policy="fixed:2", profile=CACHING if caching else SimConfig().profile)
    sim = Simulation(config, requests(groups), end_s=20.0)
    return sim, sim.run()


def test_a_shared_prefix_hits_and_the_scrapes_count_it() -> None:
    sim, result = run(groups=2)
    assert result.prefix_cache is not None
    queries, hits = result.prefix_cache
    assert queries == 40 * 1600
    # each of 2 replicas computes each group's 11 shared blocks at most once
    assert hits >= (40 - 2 * 2) * 11 * 128
    scraped = [v for v in sim.scrapes.values[S.PREFIX_HITS] if v == v]  # not NaN
    assert scraped and max(scraped) == hits  # fixed fleet: no replica left, nothing lost
    assert max(v for v in sim.scrapes.values[S.PREFIX_QUERIES] if v == v) == queries


def test_no_shared_prefix_runs_as_without_caching() -> None:
    on, off = run(groups=0)[1], run(groups=0, caching=False)[1]
    assert on.prefix_cache == (40 * 1600, 0) and off.prefix_cache is None
    assert on.requests == off.requests


def test_hits_shorten_the_time_to_first_token() -> None:
    shared, off = run(groups=1)[1], run(groups=1, caching=False)[1]

    def ttft(rs: list[RequestResult]) -> float:
        return sum((r.first_s or 0.0) - r.sent_s for r in rs) / len(rs)

    assert ttft(shared.requests) < ttft(off.requests)


def test_mooncake_hash_ids_reach_the_engines() -> None:
    # 512-token blocks: the second prompt shares its first two with the first
    reqs = [
        PlannedRequest(0.0, 2000, 5, prefix_ids=(1, 2, 3, 4), prefix_block_tokens=512),
        PlannedRequest(30.0, 2000, 5, prefix_ids=(1, 2, 9, 10), prefix_block_tokens=512),
    ]
    result = simulate(SimConfig(policy="fixed:1", profile=CACHING), reqs)
    assert result.prefix_cache == (4000, 1024)


def test_no_prefix_caching_turns_it_off() -> None:
    flags = argparse.Namespace(
        kv_blocks=None, block_size=None, max_model_len=None, no_prefix_caching=True
    )
    config = kvcache.apply(SimConfig(profile=CACHING), flags)
    assert not config.profile.enable_prefix_caching
    assert kvcache.meta(flags) == {"prefix_caching": False}


def test_a_workload_with_block_ids_turns_the_replicas_caching_on() -> None:
    def config_for(scenario: str) -> SimConfig:
        args = argparse.Namespace(
            scenario=scenario,
            arrivals=None,
            trace=None,
            prompt_tokens=None,
            max_tokens=None,
            seed=1,
            slo_ttft_s=None,
            slo_tpot_s=None,
            drain_s=None,
        )
        [policy] = parse_policies("fixed:2", start_replicas=1)
        return sim_config(plan_from_args(args), policy, 1)

    assert config_for("shared-prefix").profile.enable_prefix_caching
    assert not config_for("spike").profile.enable_prefix_caching  # as before
