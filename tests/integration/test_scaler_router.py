"""The whole signal path: emulators ← router ← Prometheus ← scaler ← a KEDA-like client.

Real processes only: two emulators (time-scale 0.1), the router in front of them,
Prometheus scraping the router and the emulators every 0.5 s, and ``inflight scaler``
reading Prometheus (and a second one reading the router directly, without Prometheus).
Six closed-loop clients keep L at 6; the scalers are called through the generated stubs
exactly as KEDA calls them (GetMetricSpec → GetMetrics → IsActive).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import grpc
import pytest

from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from inflight import names
from inflight.prom import PrometheusServer
from tests.conftest import PrometheusFactory
from tests.support import ClosedLoop, ProcessTracker, Server, wait_for

MODEL = "scaler-test-model"
BODY = {"model": MODEL, "prompt": "summarize the meeting", "max_tokens": 300}
TIME_SCALE = "0.1"
SCRAPE_S = 0.5
# scale-up 1 s, scale-down 6 s; the floor off (the value's fall after the window is checked)
# The headroom off and the 60 s window (DOWN_S at this time-scale): the figures are L's.
META = {
    "timeScale": TIME_SCALE,
    "slotsPerReplica": "4",
    "floorWindowSeconds": "0",
    "queueHeadroom": "0",
    "scaleDownWindowSeconds": "60",
    # the SLO stage's discount off (it counts a peak of L at S / (S + TTFT) of itself): the
    # figures here are L's, through each source
    "sloTtftSeconds": "0",
}
DOWN_S = 6.0
WORKERS = 6


def start_emulator(procs: ProcessTracker, name: str) -> Server:
    return procs.start_inflight(
        ["emulator", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", MODEL,
         "--max-num-seqs", "4", "--time-scale", TIME_SCALE, "--startup-s", "0"],
        name=name,
    )  # fmt: skip


@pytest.fixture
def stack(
    procs: ProcessTracker, prometheus_factory: PrometheusFactory
) -> Iterator[
    tuple[Server, PrometheusServer, pb_grpc.ExternalScalerStub, pb_grpc.ExternalScalerStub]
]:
    emulators = [start_emulator(procs, f"emulator-{i}") for i in range(2)]
    router = procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--slots-per-endpoint", "4",
         "--health-interval-s", "0.5", "--endpoints", ",".join(e.url for e in emulators)],
        name="router",
    )  # fmt: skip
    host = "127.0.0.1:{}"
    prometheus = prometheus_factory(
        jobs={
            "router": [host.format(router.port)],
            "emulators": [host.format(e.port) for e in emulators],
        },
        scrape_interval_s=SCRAPE_S,
    )
    scaler = procs.start_inflight(
        ["scaler", "--grpc-port", "0", "--metrics-port", "{port}",
         "--prometheus-url", prometheus.url],
        name="scaler",
    )  # fmt: skip
    # The no-Prometheus default: the same scaler polling the router's /metrics itself.
    direct = procs.start_inflight(
        ["scaler", "--grpc-port", "0", "--metrics-port", "{port}",
         "--source", "direct", "--router-url", router.url, "--poll-interval-s", "0.1"],
        name="scaler-direct",
    )  # fmt: skip
    with (
        grpc.insecure_channel(f"127.0.0.1:{scaler.ports['grpc']}") as channel,
        grpc.insecure_channel(f"127.0.0.1:{direct.ports['grpc']}") as direct_channel,
    ):
        yield (
            router,
            prometheus,
            pb_grpc.ExternalScalerStub(channel),
            pb_grpc.ExternalScalerStub(direct_channel),
        )


def keda_poll(
    stub: pb_grpc.ExternalScalerStub, metadata: dict[str, str]
) -> tuple[float, float, bool] | None:
    """(target, value, active) as KEDA gets them each poll; None while UNAVAILABLE."""
    ref = pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=metadata)
    try:
        spec = stub.GetMetricSpec(ref, timeout=3).metricSpecs[0]
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName)
        values = stub.GetMetrics(request, timeout=3).metricValues
        active = stub.IsActive(ref, timeout=3).result
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return None
        raise
    assert len(values) == 1
    return spec.targetSizeFloat, values[0].metricValueFloat, active


def value(stub: pb_grpc.ExternalScalerStub, **extra: str) -> float | None:
    polled = keda_poll(stub, {**META, **extra})
    return None if polled is None else polled[1]


def prometheus_l(prometheus: PrometheusServer) -> float | None:
    query = urllib.parse.urlencode({"query": names.promql(names.PROMQL_L)})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_scaler_follows_the_routers_l_through_prometheus(stack) -> None:
    router, prometheus, stub, direct = stack
    wait_for(lambda: value(stub) == 0.0, timeout_s=60, what="the idle stack to answer 0")
    wait_for(lambda: value(direct) == 0.0, timeout_s=60, what="the direct source to answer 0")
    assert keda_poll(stub, META) == (4.0, 0.0, False)

    with ClosedLoop(router.url, WORKERS, BODY) as load:
        # L = 6 on 2 replicas x 4 slots: the value follows L, HPA derives ceil(6/4) = 2.
        wait_for(lambda: value(stub) == float(WORKERS), timeout_s=60, what="value to reach L=6")
        target, got, active = keda_poll(stub, META) or (0.0, 0.0, False)
        assert (target, active) == (4.0, True)
        assert got == float(WORKERS)
        assert -(-got // target) == 2
        # The direct source (no Prometheus) reads the same L from the router itself.
        wait_for(lambda: value(direct) == float(WORKERS), timeout_s=60,
                 what="direct-source value to reach 6")  # fmt: skip
        # The same L from vLLM's own gauges (running + waiting on each emulator).
        wait_for(lambda: value(stub, source="vllm") == float(WORKERS), timeout_s=60,
                 what="source=vllm value to reach 6")  # fmt: skip
        # The seed's rule on the same traffic: ~13 req/s scaled = 1.3 seed req/s > 0.5, so
        # it asks for ready + 1 = 3 replicas, i.e. value 3 x 4.
        wait_for(lambda: value(stub, policy="qps") == 12.0, timeout_s=60,
                 what="qps baseline to ask for 3 replicas")  # fmt: skip
    assert load.codes and set(load.codes) == {200}
    assert not load.errors, load.errors

    wait_for(lambda: prometheus_l(prometheus) == 0.0, timeout_s=60, what="Prometheus to see L=0")
    load_stopped = time.monotonic()
    assert value(stub) == float(WORKERS)  # held for the scale-down window
    wait_for(lambda: value(stub) == 0.0, timeout_s=60, what="value to fall after the window")
    assert time.monotonic() - load_stopped >= DOWN_S - SCRAPE_S
    assert keda_poll(stub, META) == (4.0, 0.0, False)
    wait_for(lambda: value(direct) == 0.0, timeout_s=60, what="direct-source value to fall")
