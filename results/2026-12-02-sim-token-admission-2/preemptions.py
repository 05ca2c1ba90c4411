"""The engines' preemptions in the runs of this folder (the simulator's measures do not
carry them): each named policy re-simulated as ``inflight sim compare`` runs it (same flags,
seed 1), every replica's engine kept, ``Engine.preemptions_total`` summed; the run's SLO
attainment printed beside it to show it is the comparison's run.

    python results/2026-12-02-sim-token-admission-2/preemptions.py POLICY,... -- SIM-COMPARE-FLAGS

(``results/2026-12-02-sim-token-admission/preemptions.py`` without its ``--admit-tokens``
what-if: the router now admits against the usable blocks itself.)
"""

from __future__ import annotations

import argparse
import sys

from inflight.emulator.engine import Engine
from inflight.planes.policies import parse_policies
from inflight.sim import kvcache, outages, report, token_admission
from inflight.sim.cli import _plan, register, sim_config
from inflight.sim.core import Simulation


def main(argv: list[str]) -> None:
    policies, rest = argv[0], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser(prog="inflight")
    register(parser.add_subparsers(dest="command"))
    a = parser.parse_args(["sim", "compare", *rest, "--out-dir", "/nonexistent"])
    plan = _plan(a, 1)
    for policy in parse_policies(policies, start_replicas=1):
        config = sim_config(plan, policy, 1)
        config = token_admission.apply(kvcache.apply(outages.apply(config, a), a), a)
        sim = Simulation(config, plan.requests, plan.end_s, plan.warmup, plan.warmup_s)
        engines: list[Engine] = [r.engine for r in sim.fleet.replicas.values()]
        start = sim.fleet._start

        def kept(now_s: float, start=start, engines=engines, fleet=sim.fleet):
            state = start(now_s)
            engines.append(fleet.replicas[state.id].engine)
            return state

        sim.fleet._start = kept  # type: ignore[method-assign]
        result = sim.run()
        m = report.measures(result, plan.slo)
        preempted = sum(e.preemptions_total for e in engines)
        print(
            f"{policy.name}\ttoken admission {token_admission.on(a)}"
            f"\tpreemptions {preempted}"
            f"\tSLO attainment {m['slo_attainment'] * 100:.1f} %\treplicas started {len(engines)}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
