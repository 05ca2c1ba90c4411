"""Two routers, one killed under load: the scaler never answers the survivor's half of L.

Real processes only: two emulators (time-scale 0.1), two routers (one emulator each),
Prometheus scraping both routers every 0.5 s, ``inflight scaler`` reading Prometheus
(uncached) through the generated stubs. Four closed-loop clients per router keep L at 4
on each, 8 in all. Router B is killed with SIGKILL: Prometheus' sum then holds only A's
4, and the scaler must answer UNAVAILABLE (KEDA's fallback takes over) naming B, until
B is dropped from Prometheus' targets; then B is gone, not missing, and A's L is trusted.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest

from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from inflight import names
from inflight.prom import PrometheusServer
from tests.conftest import PrometheusFactory
from tests.support import ClosedLoop, ProcessTracker, Server, wait_for

MODEL = "routers-missing-model"
BODY = {"model": MODEL, "prompt": "write a long story", "max_tokens": 300}
TIME_SCALE = "0.1"
SCRAPE_S = 0.5
WORKERS = 4  # per router, on 4 slots: L = 4 at each router
# No smoothing, no hold: the value is L at Prometheus' newest step, so a partial sum
# would show at once (the windows would only delay it).
META = {
    "timeScale": TIME_SCALE,
    "scaleUpWindowSeconds": "0",
    "scaleDownWindowSeconds": "0",
    "scrapeIntervalSeconds": str(SCRAPE_S),
}


@dataclass
class Stack:
    routers: list[Server]
    prometheus: PrometheusServer
    stub: pb_grpc.ExternalScalerStub


@pytest.fixture
def stack(procs: ProcessTracker, prometheus_factory: PrometheusFactory) -> Iterator[Stack]:
    routers = []
    for i in range(2):
        emulator = procs.start_inflight(
            ["emulator", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name",
             MODEL, "--max-num-seqs", "4", "--time-scale", TIME_SCALE, "--startup-s", "0"],
            name=f"emulator-{i}",
        )  # fmt: skip
        router = procs.start_inflight(
            ["router", "--host", "127.0.0.1", "--port", "{port}", "--slots-per-endpoint", "4",
             "--health-interval-s", "0.5", "--endpoints", emulator.url],
            name=f"router-{i}",
        )  # fmt: skip
        routers.append(router)
    prometheus = prometheus_factory(
        jobs={"router": [f"127.0.0.1:{r.port}" for r in routers]}, scrape_interval_s=SCRAPE_S
    )
    scaler = procs.start_inflight(
        ["scaler", "--grpc-port", "0", "--metrics-port", "{port}",
         "--prometheus-url", prometheus.url, "--cache-ttl-s", "0"],
        name="scaler",
    )  # fmt: skip
    with grpc.insecure_channel(f"127.0.0.1:{scaler.ports['grpc']}") as channel:
        yield Stack(routers, prometheus, pb_grpc.ExternalScalerStub(channel))


def answer(stub: pb_grpc.ExternalScalerStub) -> tuple[grpc.StatusCode, float | None, str]:
    """One GetMetrics as KEDA sends it: (code, value when OK, details)."""
    ref = pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=META)
    request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inflight")
    try:
        values = stub.GetMetrics(request, timeout=3).metricValues
    except grpc.RpcError as exc:
        return exc.code(), None, exc.details() or ""
    return grpc.StatusCode.OK, values[0].metricValueFloat, ""


def prometheus_l(prometheus: PrometheusServer) -> float | None:
    """Prometheus' own sum of L now (instant query): what an unguarded scaler would read."""
    query = urllib.parse.urlencode({"query": names.promql(names.PROMQL_L)})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_a_killed_router_makes_l_unavailable_until_it_is_dropped(stack: Stack) -> None:
    router_a, router_b = stack.routers
    full = 2 * WORKERS
    with (
        ClosedLoop(router_a.url, WORKERS, BODY) as load_a,
        ClosedLoop(router_b.url, WORKERS, BODY),
    ):
        wait_for(lambda: answer(stack.stub)[1] == full, timeout_s=60, what="the value to reach 8")
        os.kill(router_b.process.pid, signal.SIGKILL)
        wait_for(lambda: router_b.process.poll() is not None, what="router B to die")

        seen: list[tuple[grpc.StatusCode, float | None, str]] = []

        def refused_naming_b() -> bool:
            got = answer(stack.stub)
            seen.append(got)
            code, value, details = got
            # Never the survivor's half (4): while B is a target, L is trusted only whole.
            # (Before Prometheus' next scrape of B the value may still be the full 8.)
            assert code != grpc.StatusCode.OK or (value or 0) > WORKERS + 1, seen[-5:]
            return code == grpc.StatusCode.UNAVAILABLE and f"127.0.0.1:{router_b.port}" in details

        wait_for(refused_naming_b, timeout_s=30, what="UNAVAILABLE naming router B")
        assert "partial" in seen[-1][2]
        # Prometheus' sum now holds A's L alone: exactly what must not be answered.
        wait_for(lambda: (prometheus_l(stack.prometheus) or 0) <= WORKERS, timeout_s=30,
                 what="Prometheus' sum to lose router B")  # fmt: skip
        for _ in range(5):
            assert refused_naming_b(), seen[-1]

        # B leaves discovery: it is gone, not missing, and A's L alone is L again.
        stack.prometheus.set_targets("router", [f"127.0.0.1:{router_a.port}"])
        value = wait_for(
            lambda: answer(stack.stub)[1], timeout_s=60, what="an answer once B is dropped"
        )
        assert 0 < value <= WORKERS
        assert load_a.codes.count(200) > 0
