"""The engines' preemptions in the runs of this folder (the simulator's measures do not
carry them): each named policy re-simulated as ``inflight sim compare`` runs it (same flags,
seed 1), every replica's engine kept, ``Engine.preemptions_total`` summed; the run's SLO
attainment printed beside it to show it is the comparison's run.

    python results/2026-12-02-sim-token-admission/preemptions.py POLICY,... [--admit-tokens N] \
        -- SIM-COMPARE-FLAGS

``--admit-tokens N`` (with ``--discover-kv-tokens``): the router admits against N tokens a
replica instead of the capacity its ``cache_config_info`` states (what-if: e.g. the usable
blocks, the null block left out).
"""

from __future__ import annotations

import argparse
import sys

from inflight.emulator.engine import Engine
from inflight.planes.policy_catalogue import parse_policies
from inflight.sim import kvcache, outages, report, token_admission
from inflight.sim.cli import register, sim_config
from inflight.sim.core import Simulation
from inflight.sim.fleet import SimReplica
from inflight.workload.plan import plan_from_args


class Kept(dict[int, SimReplica]):
    """The fleet's replicas (a public field), every engine kept as a replica is added."""

    def __init__(self, replicas: dict[int, SimReplica], engines: list[Engine]) -> None:
        super().__init__(replicas)
        self.engines = engines
        engines.extend(r.engine for r in replicas.values())

    def __setitem__(self, key: int, value: SimReplica) -> None:
        self.engines.append(value.engine)
        super().__setitem__(key, value)


def main(argv: list[str]) -> None:
    policies, rest = argv[0], argv[argv.index("--") + 1 :]
    mine = argv[1 : argv.index("--")]
    admit = int(mine[mine.index("--admit-tokens") + 1]) if "--admit-tokens" in mine else None
    parser = argparse.ArgumentParser(prog="inflight")
    register(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["sim", "compare", *rest, "--out-dir", "/nonexistent"])
    seed_1 = a if a.trace is not None else argparse.Namespace(**{**vars(a), "seed": 1})
    plan = plan_from_args(seed_1)  # a trace is the same on every seed
    for policy in parse_policies(policies, start_replicas=1):
        config = sim_config(plan, policy, 1)
        config = token_admission.apply(kvcache.apply(outages.apply(config, a), a), a)
        sim = Simulation(config, plan.requests, plan.end_s, plan.warmup, plan.warmup_s)
        if admit is not None and sim.router.kv_tokens is not None:
            sim.router.kv_tokens = admit
            for url in sim.fleet.by_url:
                sim.router.dispatcher.set_kv_capacity(url, admit)
        engines: list[Engine] = []
        sim.fleet.replicas = Kept(sim.fleet.replicas, engines)
        result = sim.run()
        m = report.measures(result, plan.slo)
        preempted = sum(e.preemptions_total for e in engines)
        print(
            f"{policy.name}\ttoken admission {token_admission.on(a)}"
            f"{'' if admit is None else f' at {admit} tokens'}\tpreemptions {preempted}"
            f"\tSLO attainment {m['slo_attainment'] * 100:.1f} %\treplicas started {len(engines)}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
