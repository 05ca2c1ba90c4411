"""What anticipation costs the scaler per decision: ``decide`` on 4,000 s of L sampled every
second (the scaler's 1 s range-query step), anticipateSeconds 0 against 130, interleaved in
one run. Usage, from the repository root:
.venv/bin/python results/2026-12-02-anticipate/decide_cost.py
Another key of the policy, off against on, the rest the default's:
.venv/bin/python results/2026-12-02-anticipate/decide_cost.py startup_s 0 30
"""

import dataclasses
import random
import sys
import time
from collections.abc import Callable

from inflight.control.policy import PolicySpec, Sample, decide

FIELD, OFF, ON = sys.argv[1:4] if len(sys.argv) > 1 else ("anticipate_s", "0", "130")

ROUNDS, CALLS = 5, 5
random.seed(1)
SHAPES: dict[str, Callable[[int], float]] = {
    "noisy (L 0-40 at random)": lambda t: float(random.randint(0, 40)),
    "bursts (L 20 for 60 s every 300 s)": lambda t: 20.0 if t % 300 < 60 else 1.0,
    "flat (L 5)": lambda t: 5.0,
}
BASE = PolicySpec(min_replicas=1, max_replicas=8)
SPECS = {
    f"off ({OFF})": dataclasses.replace(BASE, **{FIELD: float(OFF)}),
    f"on ({ON})": dataclasses.replace(BASE, **{FIELD: float(ON)}),
}
print(f"| L | {FIELD} {OFF} | {ON} | ratio |")
print("|---|---:|---:|---:|")
for shape, level in SHAPES.items():
    samples = [Sample(float(t), level(t)) for t in range(4000)]
    spent = dict.fromkeys(SPECS, 0.0)
    for _ in range(ROUNDS):  # interleaved: each round runs both
        for name, spec in SPECS.items():
            start = time.perf_counter()
            for i in range(CALLS):
                decide(samples, spec, 3999.0 - i, ready_replicas=3)
            spent[name] += time.perf_counter() - start
    off, on = (1000 * spent[n] / (ROUNDS * CALLS) for n in SPECS)
    print(f"| {shape} | {off:.1f} ms | {on:.1f} ms | {on / off:.1f}x |")
