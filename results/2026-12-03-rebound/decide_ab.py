"""The default decision's cost, one tree's code: ``decide`` on 4,000 s of L sampled every
second (the scaler's 1 s range-query step), least of 5 timings of 5 calls per shape, in ms.
Run alternately from two trees (the previous code and this one) by ``decide_ab.sh``."""

import random
import time
from collections.abc import Callable

from inflight.control.policy import PolicySpec, Sample, decide

random.seed(1)
SHAPES: dict[str, Callable[[int], float]] = {
    "noisy": lambda t: float(random.randint(0, 40)),
    "bursts": lambda t: 20.0 if t % 300 < 60 else 1.0,
    "flat": lambda t: 5.0,
}
SPEC = PolicySpec(min_replicas=1, max_replicas=8)  # the default policy
READY = [Sample(0.0, 3.0), Sample(2000.0, 4.0), Sample(3000.0, 3.0)]
out = []
for shape, level in SHAPES.items():
    samples = [Sample(float(t), level(t)) for t in range(4000)]
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for i in range(5):
            decide(samples, SPEC, 3999.0 - i, ready_replicas=3, ready_series=READY)
        best = min(best, (time.perf_counter() - start) / 5)
    out.append(f"{shape}={1000 * best:.2f}")
print(" ".join(out))
