"""``decide`` per call on 4,000 one-second samples of L (three shapes, the defaults), from two
source trees, alternately in fresh processes (old, new, new, old, ...). Usage, from the
repository root, with clean trees of the two commits at OLD and NEW:
.venv/bin/python results/2026-12-03-recurrence-cost/decide_cost_trees.py OLD NEW [ROUNDS]
"""

import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, random, time
from inflight.control.policy import PolicySpec, Sample, decide
random.seed(1)
shapes = {
    "noisy (L 0-40 at random)": lambda t: float(random.randint(0, 40)),
    "bursts (L 20 for 60 s every 300 s)": lambda t: 20.0 if t % 300 < 60 else 1.0,
    "flat (L 5)": lambda t: 5.0,
}
spec = PolicySpec(min_replicas=1, max_replicas=8)
out = {}
for shape, level in shapes.items():
    samples = [Sample(float(t), level(t)) for t in range(4000)]
    decide(samples, spec, 3999.0, ready_replicas=3)  # warm
    start = time.perf_counter()
    values = [decide(samples, spec, 3999.0 - i, ready_replicas=3).value for i in range(25)]
    out[shape] = {"ms": 1000 * (time.perf_counter() - start) / 25, "values": values}
print(json.dumps(out))
"""


def run(tree: str) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=tree, env={"PYTHONPATH": tree},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result: dict[str, dict[str, object]] = json.loads(done.stdout)
    return result


def main() -> None:
    old, new = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    times: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    for r in range(rounds):
        order = [("old", old), ("new", new)] if r % 2 == 0 else [("new", new), ("old", old)]
        got = {name: run(tree) for name, tree in order}
        for shape in got["old"]:
            # The same decisions from both trees: a faster path, not another rule.
            assert got["old"][shape]["values"] == got["new"][shape]["values"], shape
            for name in ("old", "new"):
                times[name].setdefault(shape, []).append(float(got[name][shape]["ms"]))  # type: ignore[arg-type]
    print(f"| L ({rounds} rounds, alternating) | old ms | new ms | new / old |")
    print("|---|---:|---:|---:|")
    for shape, olds in times["old"].items():
        news = times["new"][shape]
        o, n = statistics.median(olds), statistics.median(news)
        spread = f"{min(olds):.1f}–{max(olds):.1f} | {min(news):.1f}–{max(news):.1f}"
        print(f"| {shape} | {o:.1f} | {n:.1f} | {n / o:.2f} |  <!-- ranges {spread} -->")


if __name__ == "__main__":
    main()
