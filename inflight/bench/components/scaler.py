"""``inflight bench scaler``: GetMetrics latency of ``inflight scaler`` against a real
Prometheus.

Starts Debian's Prometheus on a loopback port, scraping a small endpoint that exposes the
router's and vLLM's series the default trigger reads, with ``--history-s`` (1,900 s) of them
backfilled first (``scaler_history``: a deployed scaler's range query answers 1,810 steps a
series; a fresh Prometheus, seconds' worth), then two scaler processes: one with the
default 1 s cache and one with ``--cache-ttl-s 0`` (every call is a range query). Each gets
``--calls`` sequential GetMetrics calls through the generated stubs, with KEDA's 3 s
deadline, and the client-side latency percentiles are printed. The issue's target: p99 ≤
20 ms uncached. (Until 2026-12-01 this was ``scripts/bench_scaler.py``; until 2026-12-03 it
had the router's L alone, constant, and no history.)
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIServer

from inflight import names
from inflight.bench.components import scaler_history as history
from inflight.bench.components.procs import INFLIGHT
from inflight.procs import ManagedProcess
from inflight.prom import PrometheusServer

METADATA = dict(names.METADATA_DEFAULTS)  # production windows: 10 s up, 60 s down
TARGET_P99_MS = 20.0


def target_endpoint(state: history.State) -> tuple[str, WSGIServer]:
    """A loopback /metrics with the router's and vLLM's series at ``state``, as the
    history has them (``scaler_history.exposition``); returns (host:port, server)."""
    import threading
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    body = history.exposition(state).encode()

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4")])
        return [body]

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = make_server("127.0.0.1", 0, app, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"127.0.0.1:{server.server_address[1]}", server


def steps_of_l(prometheus_url: str) -> int:
    """How many steps of L the default trigger's range query answers now (its window is
    1,810 one-second steps): what the scaler reads on each uncached call."""
    import urllib.parse
    import urllib.request

    from external_scaler.metadata import parse_metadata
    from external_scaler.sources.promql import range_query

    query = range_query(parse_metadata(METADATA))
    start_s, end_s = query.bounds(time.time())
    params = {"query": query.expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}",
              "step": f"{query.step_s:g}"}  # fmt: skip
    url = f"{prometheus_url}/api/v1/query_range?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return max(
        (len(item["values"]) for item in result if item["metric"].get("signal") == "inflight"),
        default=0,
    )


def start_scaler(
    prometheus_url: str, cache_ttl_s: float, log_dir: Path
) -> tuple[ManagedProcess, int]:
    ready_file = log_dir / f"scaler-cache-{cache_ttl_s:g}.ready.json"
    proc = ManagedProcess(
        [*INFLIGHT, "scaler", "--grpc-port", "0",
         "--metrics-port", "0", "--prometheus-url", prometheus_url,
         "--cache-ttl-s", str(cache_ttl_s), "--log-level", "WARNING",
         "--ready-file", str(ready_file)],
        name=f"scaler-cache-{cache_ttl_s:g}",
        log_path=log_dir / f"scaler-cache-{cache_ttl_s:g}.log",
        ready_file=ready_file,
    ).start()  # fmt: skip
    ports = proc.wait_ports(timeout_s=60)
    proc.wait_ready(f"http://127.0.0.1:{ports['metrics']}/health", timeout_s=60)
    return proc, ports["grpc"]


def measure(grpc_port: int, calls: int, warmup: int) -> list[float]:
    """Latencies (ms) of ``calls`` sequential GetMetrics calls, after ``warmup`` unmeasured."""
    import grpc

    from external_scaler.proto import externalscaler_pb2 as pb
    from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc

    ref = pb.ScaledObjectRef(name="bench", namespace="default", scalerMetadata=METADATA)
    request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=METADATA[names.META_METRIC_NAME])
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        deadline = time.monotonic() + 60
        while True:  # until Prometheus has a sample on the 1 s grid of the default windows
            try:
                stub.GetMetrics(request, timeout=3)
                break
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        for _ in range(warmup):
            stub.GetMetrics(request, timeout=3)
        out = []
        for _ in range(calls):
            began = time.perf_counter()
            reply = stub.GetMetrics(request, timeout=3)
            out.append((time.perf_counter() - began) * 1000)
            if len(reply.metricValues) != 1:
                raise RuntimeError(f"GetMetrics answered {len(reply.metricValues)} values, not 1")
        return out


def summary(latencies_ms: list[float]) -> dict[str, float]:
    q = statistics.quantiles(latencies_ms, n=100, method="inclusive")
    return {
        "calls": len(latencies_ms),
        "p50_ms": round(q[49], 3),
        "p90_ms": round(q[89], 3),
        "p99_ms": round(q[98], 3),
        "max_ms": round(max(latencies_ms), 3),
        "mean_ms": round(statistics.fmean(latencies_ms), 3),
    }


def main(args: argparse.Namespace) -> int:
    modes: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scaler-") as tmp:
        tmp_path = Path(tmp)
        past = history.states(max(1, args.history_s))
        target, http_server = target_endpoint(past[-1])
        prometheus = PrometheusServer(tmp_path / "prometheus", jobs={"router": [target]})
        scalers: list[ManagedProcess] = []
        try:
            if args.history_s > 0:
                text = history.openmetrics(past, end_s=math.floor(time.time()) - 1, instance=target)
                history.backfill(prometheus.data_dir / "tsdb", text)
            prometheus.start()
            for label, ttl in (("uncached", 0.0), ("cached", 1.0)):
                proc, port = start_scaler(prometheus.url, ttl, tmp_path)
                scalers.append(proc)
                latencies = measure(port, args.calls, args.warmup)
                modes[label] = {"cache_ttl_s": ttl, **summary(latencies)}
            steps = steps_of_l(prometheus.url)
        finally:
            for proc in scalers:
                proc.stop()
            prometheus.stop()
            http_server.shutdown()

    print(
        "GetMetrics latency, sequential calls, real Prometheus on loopback; "
        f"{args.history_s:g} s of history backfilled: the range query answered {steps} "
        "steps of L (1,810 in a deployment that has run for half an hour)"
    )
    print(f"{'mode':<10} {'calls':>6} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for label, r in modes.items():
        print(
            f"{label:<10} {r['calls']:>6} {r['p50_ms']:>8.2f} {r['p90_ms']:>8.2f} "
            f"{r['p99_ms']:>8.2f} {r['max_ms']:>8.2f}"
        )
    p99 = modes["uncached"]["p99_ms"]
    verdict = "meets" if p99 <= TARGET_P99_MS else "MISSES"
    print(f"target p99 <= {TARGET_P99_MS:g} ms uncached: {verdict} ({p99:.2f} ms)")
    if args.json:
        results = {"metadata": METADATA, "history_s": args.history_s, "steps_of_l": steps, **modes}
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0
