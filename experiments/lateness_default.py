"""The evidence for ``--max-late-s``' default (inflight.control.hold_order.DEFAULT_MAX_LATE_S).

For each open-loop scenario and seed, ``inflight sim`` (saturation, --hold-deadline-s 1.5,
the scenario's replicas and start-up) without the bound: requests sent and served, the
longest TTFT; then with each bound: the requests it refuses (503) and the SLO attainment.
With ``--show N``, the first N refused requests of seed 1: when held, when refused, the
replicas ready then, and their TTFT without the bound. Seconds are seed seconds::

    python -m experiments.lateness_default --scenarios ramp,spike,diurnal --bounds 120,180
"""

from __future__ import annotations

import argparse

from inflight.measure.slo import DEFAULT_SLO
from inflight.sim import report
from inflight.sim.core import SimConfig, SimResult, simulate
from inflight.workload.scenarios import get_scenario


def run(name: str, bound: float, seed: int) -> SimResult:
    sc = get_scenario(name)
    config = SimConfig(
        policy="saturation",
        min_replicas=sc.min_replicas,
        max_replicas=sc.max_replicas,
        startup_s=sc.startup_s,
        hold_deadline_s=1.5,
        max_late_s=bound,
    )
    return simulate(config, sc.plan(seed), sc.arrivals.duration_s)


def ready_at(result: SimResult, t_s: float) -> float | None:
    ready = None
    for point in result.timeline:
        if point["t"] > t_s:
            break
        ready = point["ready"]
    return ready


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default="ramp,spike,diurnal")
    p.add_argument("--bounds", default="120,180")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--show", type=int, default=0)
    a = p.parse_args()
    for name in a.scenarios.split(","):
        for seed in map(int, a.seeds.split(",")):
            base = run(name, 0.0, seed)
            att = report.measures(base, DEFAULT_SLO)["slo_attainment"]
            ttfts = [r.first_s - r.sent_s for r in base.requests if r.first_s is not None]
            served = sum(r.ok for r in base.requests)
            print(f"{name} seed {seed}, no bound: {len(base.requests)} sent, {served} served, "
                  f"longest TTFT {max(ttfts):.1f} s, attainment {att:.3f}")  # fmt: skip
            for bound in map(float, a.bounds.split(",")):
                res = run(name, bound, seed)
                refused = [(i, r) for i, r in enumerate(res.requests) if not r.ok]
                att = report.measures(res, DEFAULT_SLO)["slo_attainment"]
                print(f"  --max-late-s {bound:g}: {len(refused)} refused, attainment {att:.3f}")
                for i, r in refused[: a.show] if seed == 1 else []:
                    end = r.end_s if r.end_s is not None else float("nan")
                    first = base.requests[i].first_s
                    ttft = "-" if first is None else f"{first - r.sent_s:.1f}"
                    print(f"    #{i} held {r.sent_s:.1f}, refused {end:.1f} (waited "
                          f"{end - r.sent_s:.1f}), {ready_at(res, end)} replicas ready; "
                          f"without the bound its TTFT {ttft}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
