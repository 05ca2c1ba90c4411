"""Two routers, one failing its scrapes: the scaler may raise or keep the count, never lower it.

Real processes and servers: Prometheus scraping two router-like loopback servers every
0.5 s, and ``inflight scaler`` reading Prometheus (uncached) through the generated stubs.
The routers are ``FakeRouter``s (the router's metric names from a prometheus_client
registry whose values the test sets, and a switch that makes every scrape answer 503, as a
router in a restart loop does), so L is exactly what the test sets. Both stand in front of
the same 3 replicas (``router_endpoints{state="ready"}`` 3), 4 slots each: target 4.

``sum()`` silently drops a router whose scrape failed, so L read then is a lower bound.
Before issue 26 the scaler refused it (UNAVAILABLE while such a router was a target, so a
crash-looping router froze scale-up behind KEDA's fallback) and looked only at the newest
step (a router down during the window's peak and back now let the window scale down).
"""

from __future__ import annotations

import json
import threading
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
from tests.component.test_scaler_servicer import FakeRouter
from tests.conftest import PrometheusFactory
from tests.support import ProcessTracker, Server, wait_for

SCRAPE_S = 0.5
READY = 3
META = {
    "timeScale": "0.1",
    "scaleUpWindowSeconds": "0",
    "scaleDownWindowSeconds": "0",  # the value is L at the newest step: nothing hides it
    "scrapeIntervalSeconds": str(SCRAPE_S),
    "floorWindowSeconds": "0",  # nor the floor's memory of peaks
}  # minReplicaCount, maxReplicaCount: KEDA's 0 and 100, which change nothing here


@dataclass
class Stack:
    a: FakeRouter
    b: FakeRouter
    prometheus: PrometheusServer
    scaler: Server
    stub: pb_grpc.ExternalScalerStub


@pytest.fixture
def stack(procs: ProcessTracker, prometheus_factory: PrometheusFactory) -> Iterator[Stack]:
    a, b = FakeRouter(), FakeRouter()
    try:
        for router in (a, b):
            router.ready.set(READY)
        targets = [r.url.removeprefix("http://") for r in (a, b)]
        prometheus = prometheus_factory(jobs={"router": targets}, scrape_interval_s=SCRAPE_S)
        scaler = procs.start_inflight(
            ["scaler", "--grpc-port", "0", "--metrics-port", "{port}",
             "--prometheus-url", prometheus.url, "--cache-ttl-s", "0"],
            name="scaler",
        )  # fmt: skip
        with grpc.insecure_channel(f"127.0.0.1:{scaler.ports['grpc']}") as channel:
            yield Stack(a, b, prometheus, scaler, pb_grpc.ExternalScalerStub(channel))
    finally:
        a.close()
        b.close()


def answer(
    stub: pb_grpc.ExternalScalerStub, meta: dict[str, str] = META
) -> tuple[grpc.StatusCode, float | None, str]:
    """One GetMetrics as KEDA sends it: (code, value when OK, details)."""
    ref = pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=meta)
    request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inflight")
    try:
        values = stub.GetMetrics(request, timeout=3).metricValues
    except grpc.RpcError as exc:
        return exc.code(), None, exc.details() or ""
    return grpc.StatusCode.OK, values[0].metricValueFloat, ""


def is_active(stub: pb_grpc.ExternalScalerStub, meta: dict[str, str] = META) -> bool:
    ref = pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=meta)
    return stub.IsActive(ref, timeout=3).result


def target_up(prometheus: PrometheusServer, router: FakeRouter) -> float | None:
    """Prometheus' ``up`` for ``router`` now (1 scraped, 0 failed), None before a scrape."""
    instance = router.url.removeprefix("http://")
    query = urllib.parse.urlencode({"query": f'{names.PROMETHEUS_UP}{{instance="{instance}"}}'})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def scaler_metric(scaler: Server, name: str) -> float:
    with urllib.request.urlopen(f"{scaler.url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def test_a_crash_looping_router_does_not_freeze_scale_up(stack: Stack) -> None:
    """Router b fails every scrape: a's 6 alone would lower 3 replicas to 2, so the answer
    keeps 3 (12) and stays active; a surge at a (30) is answered, down or flapping b or
    not, and never anything below the 12 that keeps the count."""
    stack.a.inflight.set(6)
    stack.b.inflight.set(6)
    wait_for(lambda: answer(stack.stub)[1] == 12.0, timeout_s=60, what="the value to reach 12")
    stack.b.failing.set()
    wait_for(lambda: target_up(stack.prometheus, stack.b) == 0.0, timeout_s=30,
             what="Prometheus to see router b down")  # fmt: skip
    partial = names.SCALER_ERRORS + '{kind="source_partial"}'
    # The range query's newest step may trail the instant query that saw b down: wait for
    # the first answer judged partial, then count five more.
    wait_for(lambda: answer(stack.stub) and scaler_metric(stack.scaler, partial) >= 1,
             timeout_s=30, what="a first answer on partial data")  # fmt: skip
    before = scaler_metric(stack.scaler, partial)
    seen: list[tuple[grpc.StatusCode, float | None, str]] = []
    for _ in range(5):
        seen.append(answer(stack.stub))
        assert seen[-1] == (grpc.StatusCode.OK, 12.0, ""), seen  # held: 3 x 4, not a's 6
        assert is_active(stack.stub)
    assert scaler_metric(stack.scaler, partial) >= before + 5

    stack.a.inflight.set(30)  # the surge, while b is down
    wait_for(lambda: answer(stack.stub)[1] == 30.0, timeout_s=30, what="scale-up to 30")

    # b in a restart loop: up for a scrape or two, down again. Every answer is one that
    # raises or keeps the count; with b up its 6 counts again (36).
    stop = threading.Event()

    def crash_loop() -> None:
        while not stop.wait(0.7):
            if stack.b.failing.is_set():
                stack.b.failing.clear()
            else:
                stack.b.failing.set()

    flapper = threading.Thread(target=crash_loop, daemon=True)
    flapper.start()
    try:
        for _ in range(20):
            code, value, details = answer(stack.stub)
            assert code == grpc.StatusCode.OK, details
            assert value in (30.0, 36.0), value
    finally:
        stop.set()
        flapper.join(timeout=5)


def test_a_router_down_inside_the_window_blocks_a_scale_down(stack: Stack) -> None:
    """The window is 20 s (200 s x 0.1). Router b fails its scrapes for a while and comes
    back: the steps in between missed its share of L, perhaps the peak, so while they are
    in the window the count is kept (12), although every step reads L = 2, which would
    lower 3 replicas to 1. (Before: with b back, only the newest step was checked and 2
    was answered.) Until Prometheus' history covers the window, the start of the window
    is a gap, and 12 is answered for that reason: the test starts once 2 is answered."""
    meta = {**META, "scaleUpWindowSeconds": "10", "scaleDownWindowSeconds": "200"}
    stack.a.inflight.set(2)
    stack.b.inflight.set(0)
    wait_for(lambda: answer(stack.stub, meta)[1] == 2.0, timeout_s=90,
             what="the value 2 on a whole window")  # fmt: skip
    stack.b.failing.set()
    wait_for(lambda: target_up(stack.prometheus, stack.b) == 0.0, timeout_s=30,
             what="Prometheus to see router b down")  # fmt: skip
    stack.b.failing.clear()
    wait_for(lambda: target_up(stack.prometheus, stack.b) == 1.0, timeout_s=30,
             what="Prometheus to see router b up again")  # fmt: skip
    # (The newest step may lag Prometheus' own ``up`` by a step: the first answer given.)
    value = wait_for(lambda: answer(stack.stub, meta)[1], timeout_s=30, what="an answer")
    assert value == 12.0  # held, not 2
    for _ in range(5):
        assert answer(stack.stub, meta) == (grpc.StatusCode.OK, 12.0, "")
        assert is_active(stack.stub, meta)
