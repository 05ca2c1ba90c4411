"""The peers' control planes in the simulator: the loops of inflight.planes.peers around the
deciders of inflight.control.peers, fed by the simulated Prometheus, ticked as the live
stack ticks them."""

from __future__ import annotations

import pytest

from inflight.control.peers.base import Signal
from inflight.planes.peers.catalog import PEERS
from inflight.planes.peers.signals import NoData
from inflight.sim import peers
from inflight.sim import scrapes as S
from inflight.sim.core import SimConfig, Simulation, policy_names, simulate
from inflight.workload.scenarios import get_scenario
from inflight.workload.trace import PlannedRequest


def test_every_peer_is_a_policy() -> None:
    assert set(PEERS) <= set(policy_names())


@pytest.mark.parametrize("name", sorted(PEERS))
def test_each_peer_scales_up_on_the_ramp_and_names_itself(name: str) -> None:
    sc = get_scenario("ramp")
    config = SimConfig(policy=name, min_replicas=3, max_replicas=8, startup_s=100.0)
    result = simulate(config, sc.plan(1), sc.arrivals.duration_s)
    assert max(p["desired"] for p in result.timeline) > 3
    assert result.decisions and all(d.reason.startswith(f"{name}:") for d in result.decisions)


def test_kpa_averages_l_over_its_window() -> None:
    # A steady open load: Knative's stable average (60 one-second buckets) must read the
    # router's L, not a fraction of it (a loop ticked every 2 s fills half its buckets).
    planned = [PlannedRequest(i / 2.0, 3000, 300) for i in range(1200)]  # 2 req/s, 600 s
    sim = Simulation(SimConfig(policy="kpa", min_replicas=3, max_replicas=8), planned, 600.0)
    result = sim.run()
    law = [d for d in result.decisions if 300.0 <= d.t <= 600.0 and d.value is not None]
    assert law
    mean_value = sum(d.value for d in law if d.value is not None) / len(law)
    mean_l = sum(d.L for d in law if d.L is not None) / len(law)
    assert mean_value == pytest.approx(mean_l, rel=0.15)


def test_vllm_waiting_queues_in_the_replicas_not_the_router() -> None:
    planned = [PlannedRequest(i / 4.0, 3000, 300) for i in range(800)]  # 4 req/s > 1 replica
    sim = Simulation(
        SimConfig(policy="vllm-waiting", min_replicas=1, max_replicas=2), planned, 200.0
    )
    sim.run()
    assert max(sim.scrapes.values[S.QUEUED]) == 0.0
    assert max(v for v in sim.scrapes.values[S.VLLM_WAITING] if v == v) > 5.0


def test_the_reader_answers_from_the_scrapes_and_says_no_data() -> None:
    s = S.Scrapes()
    clock = [0.0]
    read = peers.reader(s, lambda: clock[0], 5.0)
    with pytest.raises(NoData):
        read(Signal.INFLIGHT)
    for t in range(0, 65, 5):
        s.scrape(
            float(t),
            {
                S.INFLIGHT: 7.0,
                S.QUEUED: 2.0,
                S.RECEIVED: 3.0 * t,
                S.READY: 2.0,
                S.VLLM_WAITING: float("nan"),
                S.VLLM_RUNNING: 0.0,
            },
        )
    clock[0] = 60.0
    assert read(Signal.INFLIGHT) == 7.0
    assert read(Signal.ROUTER_QUEUED) == 2.0
    assert read(Signal.ARRIVAL_RATE) == pytest.approx(3.0)
    with pytest.raises(NoData):  # a sum over no replica is an empty result
        read(Signal.VLLM_WAITING)
