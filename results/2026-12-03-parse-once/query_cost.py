"""The default trigger's range query on Debian's Prometheus with a full window (``inflight
bench scaler``'s backfilled history): the whole ``or`` query and each of its 12 parts alone
(median ms of 5 asks, the answer's bytes), then the query asked as 1, 2, 3, 4, 6 and 12
concurrent requests of its parts (median ms of 9 asks; series answered)::

    PYTHONPATH=. .venv/bin/python results/2026-12-03-parse-once/query_cost.py
"""

from __future__ import annotations

import json
import math
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from external_scaler.metadata import parse_metadata
from external_scaler.sources.promql import range_query
from inflight.bench.components import scaler_history as history
from inflight.bench.components.scaler import METADATA, target_endpoint
from inflight.prom import PrometheusServer

QUERY = range_query(parse_metadata(METADATA))
PARTS = QUERY.expr.split(" or ")


def ask(url: str, expr: str, bounds: tuple[float, float]) -> bytes:
    params = {"query": expr, "start": f"{bounds[0]:.3f}", "end": f"{bounds[1]:.3f}", "step": "1"}
    with urllib.request.urlopen(f"{url}/api/v1/query_range?{urllib.parse.urlencode(params)}") as r:
        return bytes(r.read())


def timed(url: str, groups: list[str], pool: ThreadPoolExecutor, n: int) -> tuple[float, int]:
    """Median ms of ``n`` asks of ``groups`` at once, and the series they answered."""
    took, series = [], 0
    for _ in range(n):
        bounds = QUERY.bounds(time.time())
        began = time.perf_counter()
        bodies = list(pool.map(ask, [url] * len(groups), groups, [bounds] * len(groups)))
        took.append((time.perf_counter() - began) * 1000)
        series = sum(len(json.loads(b)["data"]["result"]) for b in bodies)
    return round(statistics.median(took), 1), series


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        past = history.states(1900)
        target, server = target_endpoint(past[-1])
        prom = PrometheusServer(Path(tmp) / "prometheus", jobs={"router": [target]})
        text = history.openmetrics(past, end_s=math.floor(time.time()) - 1, instance=target)
        history.backfill(prom.data_dir / "tsdb", text)
        prom.start()
        pool = ThreadPoolExecutor(len(PARTS))
        try:
            bounds = QUERY.bounds(time.time())
            print(f"whole query: {timed(prom.url, [QUERY.expr], pool, 5)[0]} ms, "
                  f"{len(ask(prom.url, QUERY.expr, bounds)):,} bytes")  # fmt: skip
            for i, part in enumerate(PARTS):
                ms = timed(prom.url, [part], pool, 5)[0]
                print(f"part {i}: {ms} ms, {len(ask(prom.url, part, bounds)):,} bytes  {part[:80]}")
            for size in (12, 6, 4, 3, 2, 1, 12):
                groups = [" or ".join(PARTS[i : i + size]) for i in range(0, len(PARTS), size)]
                ms, series = timed(prom.url, groups, pool, 9)
                print(f"{len(groups)} request(s) of {size} part(s): {ms} ms, {series} series")
        finally:
            pool.shutdown()
            prom.stop()
            server.shutdown()


if __name__ == "__main__":
    main()
