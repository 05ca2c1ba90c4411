"""One tree's costs, in ms (least of 7 timings): the scaler's own part of an uncached
GetMetrics on a live-shaped answer (Prometheus' JSON, values as strings: json.loads, the
window and KV series (``observed_from_matrix``), ``costed_decision``), and the router's token demand
of a 2,000-id prompt (``router.tokens.demand_of``, as the open-loop bench sends it). Run by
``ab.sh`` alternately from two trees (PYTHONPATH picks the tree)."""

import gc
import json
import random
import time

from external_scaler.decision import costed_decision
from external_scaler.sources.prometheus import observed_from_matrix
from inflight.sim.core import SimConfig, Simulation
from inflight.sim.scaler import SimScaler
from inflight.workload.trace import PlannedRequest
from router.tokens import demand_of

random.seed(3)
plan, t = [], 0.0
while t < 2000:  # 2 requests/s of 100-4,000 prompt tokens on 3 replicas, KV series present
    t += random.expovariate(2.0)
    plan.append(PlannedRequest(t, random.randint(100, 4000), random.randint(5, 300)))
sim = Simulation(SimConfig(policy="fixed:3"), plan, 2000.0)
sim.run()
now = sim.scrapes.times_s[-1]
scaler = SimScaler({**sim.config.metadata(), "policy": "saturation"}, sim.scrapes, lambda: now)
start, end = scaler.query.bounds(now)
data = sim.scrapes.matrix(scaler.query, start, end)
for item in data["result"]:  # Prometheus answers values as strings
    item["values"] = [[t, repr(float(v))] for t, v in item["values"]]
body = json.dumps({"status": "success", "data": data})
ids = {"prompt": [random.randrange(32000) for _ in range(2000)], "max_tokens": 100}


def best(fn, reps: int) -> float:
    """Least of 7 timings of ``reps`` calls, the collector off while timed (its pauses
    depend on what else the process holds, not on the code timed)."""
    least = float("inf")
    for _ in range(7):
        gc.collect()
        gc.disable()
        began = time.perf_counter()
        for _ in range(reps):
            fn()
        least = min(least, (time.perf_counter() - began) / reps)
        gc.enable()
    return 1000 * least


parsed = json.loads(body)["data"]
observed = observed_from_matrix(parsed, scaler.query, start, end)
figures = {
    "json": best(lambda: json.loads(body), 10),
    "observed": best(lambda: observed_from_matrix(parsed, scaler.query, start, end), 10),
    "decide": best(lambda: costed_decision(scaler.spec, observed), 10),
    "demand_2000_ids": best(lambda: demand_of(ids, chat=False), 200),
}
points = sum(len(i["values"]) for i in data["result"])
print(f"points={points} " + " ".join(f"{k}={v:.3f}" for k, v in figures.items()))
