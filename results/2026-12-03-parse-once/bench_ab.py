"""Two scalers' GetMetrics (uncached unless ``--cache-ttl-s``) on one Prometheus with a full
window, rounds interleaved:
the previous code (``--old``, a checkout's root) and this tree's.

``inflight bench scaler``'s setup (its backfilled history, ``scaler_history``, its target
and its ``measure``), then one ``inflight scaler --cache-ttl-s TTL`` per tree (``PYTHONPATH``
picks the code; ``python -P``: without it ``-m`` puts the working directory first, and a
run from the repository root would start this tree's code twice) and ``--rounds`` rounds
of ``--calls`` calls each, alternating which goes first, with Prometheus' count of the
range queries each answered. Prints one line per round and tree (p50, p90, p99 ms) and
the medians' ratio::

    python results/2026-12-03-parse-once/bench_ab.py --old /tmp/wt_old --rounds 5
    python results/2026-12-03-parse-once/bench_ab.py --old /tmp/wt_old --cache-ttl-s 1
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from inflight.bench.components import scaler_history as history
from inflight.bench.components.scaler import measure, summary, target_endpoint
from inflight.procs import ManagedProcess
from inflight.prom import PrometheusServer


def scaler(
    tree: Path, prometheus_url: str, log_dir: Path, name: str, ttl_s: float
) -> tuple[ManagedProcess, int]:
    ready = log_dir / f"{name}.ready.json"
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = ManagedProcess(
        [sys.executable, "-P", "-m", "inflight", "scaler", "--grpc-port", "0",
         "--metrics-port", "0", "--prometheus-url", prometheus_url, "--cache-ttl-s", str(ttl_s),
         "--log-level", "WARNING", "--ready-file", str(ready)],
        name=name, env=env, log_path=log_dir / f"{name}.log", ready_file=ready,
    ).start()  # fmt: skip
    ports = proc.wait_ports(timeout_s=60)
    proc.wait_ready(f"http://127.0.0.1:{ports['metrics']}/health", timeout_s=60)
    return proc, ports["grpc"]


def range_queries(prometheus_url: str) -> float:
    """Prometheus' own count of the range queries it has answered (its /metrics)."""
    import urllib.request

    with urllib.request.urlopen(f"{prometheus_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_http_requests_total{")
        and 'handler="/api/v1/query_range"' in line
    )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--old", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--cache-ttl-s", type=float, default=0.0)
    args = p.parse_args()
    new = Path(__file__).resolve().parents[2]
    with tempfile.TemporaryDirectory(prefix="bench-scaler-ab-") as tmp:
        past = history.states(1900)
        target, server = target_endpoint(past[-1])
        prom = PrometheusServer(Path(tmp) / "prometheus", jobs={"router": [target]})
        procs: list[ManagedProcess] = []
        p50: dict[str, list[float]] = {"old": [], "new": []}
        try:
            text = history.openmetrics(past, end_s=math.floor(time.time()) - 1, instance=target)
            history.backfill(prom.data_dir / "tsdb", text)
            prom.start()
            ports = {}
            for name, tree in (("old", args.old.resolve()), ("new", new)):
                proc, ports[name] = scaler(tree, prom.url, Path(tmp), name, args.cache_ttl_s)
                procs.append(proc)
            for r in range(args.rounds):
                order = ("old", "new") if r % 2 == 0 else ("new", "old")
                for name in order:
                    before = range_queries(prom.url)
                    s = summary(measure(ports[name], args.calls, warmup=5))
                    asked = range_queries(prom.url) - before
                    p50[name].append(s["p50_ms"])
                    print(f"{r + 1} {name} p50={s['p50_ms']:.1f} p90={s['p90_ms']:.1f} "
                          f"p99={s['p99_ms']:.1f} ms, {asked:g} range queries "
                          f"for {args.calls + 5} calls", flush=True)  # fmt: skip
        finally:
            for proc in procs:
                proc.stop()
            prom.stop()
            server.shutdown()
    old, new_ = statistics.median(p50["old"]), statistics.median(p50["new"])
    print(f"median p50: old {old:.1f} ms, new {new_:.1f} ms, new/old {new_ / old:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
