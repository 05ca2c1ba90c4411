"""Where the scaler's uncached GetMetrics time goes: Prometheus evaluating the default
trigger's one range query (``external_scaler.sources.promql.range_query``), against the same
query cut down, with a coarser step, or split into groups fetched in parallel.

Usage, from the repository root, nothing else running:
    .venv/bin/python results/2026-12-03-scaler-query-cost/profile.py [ROUNDS]

Debian's Prometheus on a loopback port scrapes the endpoint ``inflight bench scaler`` uses
(the router's names, L held at 6) every second for a few seconds; each variant is then
queried over the default lookback (the floor's memory, 1,810 s) ``CALLS`` times per round,
the variants' order rotating each round; the median wall time of the HTTP query (client
side, JSON body read, not parsed) is printed per variant and round, with its ratio to the
full query's in the same round.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from external_scaler.metadata import parse_metadata
from external_scaler.sources.promql import range_query
from inflight import names
from inflight.bench.components.scaler import METADATA, target_endpoint
from inflight.prom import PrometheusServer

CALLS = 30


def main(rounds: int) -> None:
    query = range_query(parse_metadata(METADATA))
    parts = query.expr.split(" or ")
    lookback = query.lookback_s
    print(f"default trigger: {len(parts)} parts, lookback {lookback:g} s, step {query.step_s:g} s")
    variants: dict[str, tuple[list[str], float]] = {
        "full (as shipped)": ([query.expr], query.step_s),
        "L alone": ([parts[0]], query.step_s),
        "first 2 parts": ([" or ".join(parts[:2])], query.step_s),
        "first 4 parts": ([" or ".join(parts[:4])], query.step_s),
        "first 8 parts": ([" or ".join(parts[:8])], query.step_s),
        "full, step 2.5 s": ([query.expr], 2.5),
        "full, step 5 s": ([query.expr], 5.0),
        "down part alone": ([parts[3]], query.step_s),
        "down part, @ end()": ([parts[3].replace("[1h])", "[1h] @ end())")], query.step_s),
        "3 groups in parallel": ([" or ".join(parts[i::3]) for i in range(3)], query.step_s),
        "12 parts in parallel": (parts, query.step_s),
    }
    # The five plain sums (L, vLLM's usage and running, the router's tokens in flight and
    # held) as one part, one series per metric name; the other seven parts as they are.
    sums = "|".join(
        [
            names.ROUTER_INFLIGHT,
            names.VLLM_KV_CACHE_USAGE,
            names.VLLM_RUNNING,
            names.ROUTER_ENDPOINT_INFLIGHT_TOKENS,
            names.ROUTER_QUEUED_TOKENS,
        ]
    )
    merged = [
        f'sum by (__name__) ({{__name__=~"{sums}"}})',
        *(parts[i] for i in (1, 2, 3, 4, 7, 8, 11)),
    ]
    variants["5 sums as 1 part (8 parts)"] = ([" or ".join(merged)], query.step_s)
    variants["8 parts in 3 parallel groups"] = (
        [" or ".join(merged[i::3]) for i in range(3)],
        query.step_s,
    )
    pool = ThreadPoolExecutor(len(parts))
    with tempfile.TemporaryDirectory(prefix="scaler-query-cost-") as tmp:
        target, server = target_endpoint(inflight=6)
        prometheus = PrometheusServer(Path(tmp) / "prometheus", jobs={"router": [target]})
        try:
            prometheus.start()
            time.sleep(8)  # a few scrapes: the cost is Prometheus' steps, not the data

            def timed(exprs: list[str], step_s: float) -> float:
                now = time.time()

                def one(expr: str) -> bytes:
                    params = {
                        "query": expr,
                        "start": f"{now - lookback:.3f}",
                        "end": f"{now:.3f}",
                        "step": f"{step_s:g}",
                    }
                    url = f"{prometheus.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
                    with urllib.request.urlopen(url, timeout=10) as resp:
                        return bytes(resp.read())

                began = time.perf_counter()
                list(pool.map(one, exprs))
                return (time.perf_counter() - began) * 1000

            labels = list(variants)
            for r in range(rounds):
                order = labels[r % len(labels) :] + labels[: r % len(labels)]
                medians = {}
                for name in order:
                    exprs, step_s = variants[name]
                    medians[name] = statistics.median(timed(exprs, step_s) for _ in range(CALLS))
                full = medians["full (as shipped)"]
                for name in labels:
                    ms = medians[name]
                    print(f"round {r + 1}  {name:<28} {ms:7.2f} ms  {ms / full:5.2f}")
        finally:
            prometheus.stop()
            server.shutdown()
            pool.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
