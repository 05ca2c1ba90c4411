"""The scaler's L in each capacity dimension (``inflight_scaler_dimension_inflight``), end to
end: a real Prometheus scrapes a loopback endpoint with the router's and vLLM's names
(``FakeRouter``, a prometheus_client registry whose values the test sets), the servicer
runs in-process over real gRPC on loopback, and the gauges are read from its ``/metrics``.

The trigger admission's clock (``Limits``' monotonic) is the test's, so a trigger's idle
time passes without waiting: a trigger nobody calls is dropped ``trigger_idle_s`` after
its last call, or after its stream closes, and its gauges leave the next scrape.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
import grpc
import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from external_scaler.limits import Limits
from external_scaler.metrics import ScalerMetrics
from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from external_scaler.server import ScalerApp
from external_scaler.servicer import ExternalScalerServicer
from external_scaler.sources.prometheus import PrometheusSource
from inflight import names
from inflight.prom import PrometheusServer
from tests.component.test_scaler_servicer import FakeRouter, poll
from tests.conftest import PrometheusFactory

# L now (no windows, no floor), at time-scale 0.1 as test_scaler_prometheus.py (Prometheus
# scrapes every 0.5 s); 4 slots per replica, so target 4.
BASE = {
    "timeScale": "0.1",
    "scaleUpWindowSeconds": "0",
    "scaleDownWindowSeconds": "0",
    "floorWindowSeconds": "0",
}
IDLE_S = 120.0
Series = dict[tuple[str, str, str], float]  # (name, metric_name, dimension) → value


class KvRouter(FakeRouter):
    """FakeRouter plus vLLM's KV usage and the router's token gauges."""

    def __init__(self) -> None:
        super().__init__()
        reg = self.registry
        self.kv_usage = Gauge(names.VLLM_KV_CACHE_USAGE, "KV use", registry=reg)
        self.inflight_tokens = Gauge(names.ROUTER_ENDPOINT_INFLIGHT_TOKENS, "t", registry=reg)
        self.queued_tokens = Gauge(names.ROUTER_QUEUED_TOKENS, "t", registry=reg)
        self.kv_tokens = Gauge(names.ROUTER_ENDPOINT_KV_TOKENS, "t", registry=reg)


class Scaler:
    def __init__(self, app: ScalerApp, channel: grpc.aio.Channel, clock: list[float]) -> None:
        self.app = app
        self.stub = pb_grpc.ExternalScalerStub(channel)
        self.clock = clock

    @staticmethod
    def ref(metric_name: str, **extra: str) -> pb.ScaledObjectRef:
        metadata = {**BASE, "metricName": metric_name, **extra}
        return pb.ScaledObjectRef(name=metric_name, namespace="default", scalerMetadata=metadata)

    async def value(self, metric_name: str, **extra: str) -> float | None:
        """GetMetrics' value, or None while the scaler answers UNAVAILABLE."""
        request = pb.GetMetricsRequest(
            scaledObjectRef=self.ref(metric_name, **extra), metricName=metric_name
        )
        try:
            response = await self.stub.GetMetrics(request, timeout=3)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                return None
            raise
        return response.metricValues[0].metricValueFloat

    async def scrape(self) -> tuple[Series, str]:
        """The scaler's /metrics: its per-trigger gauge samples, and the text itself."""
        url = f"http://127.0.0.1:{self.app.metrics_port}/metrics"

        def get() -> str:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return str(resp.read().decode())

        text = await asyncio.to_thread(get)
        series: Series = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if "metric_name" in s.labels:
                    key = (s.name, s.labels["metric_name"], s.labels.get("dimension", ""))
                    series[key] = s.value
        return series, text


@pytest.fixture
def router() -> Iterator[KvRouter]:
    r = KvRouter()
    yield r
    r.close()


@pytest.fixture
def prometheus(prometheus_factory: PrometheusFactory, router: KvRouter) -> PrometheusServer:
    return prometheus_factory(
        jobs={"router": [router.url.removeprefix("http://")]}, scrape_interval_s=0.5
    )


@pytest.fixture
async def scaler(prometheus: PrometheusServer) -> AsyncIterator[Scaler]:
    clock = [1000.0]
    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    async with aiohttp.ClientSession() as session:
        servicer = ExternalScalerServicer(
            PrometheusSource(prometheus.url, session, metrics),
            metrics,
            stream_interval_s=0.05,
            limits=Limits(trigger_idle_s=IDLE_S, monotonic=lambda: clock[0]),
        )
        app = ScalerApp(servicer, registry)
        await app.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}")
        try:
            yield Scaler(app, channel, clock)
        finally:
            await channel.close()
            await app.stop(grace_s=1.0)


def _equals(
    value: Callable[[], Awaitable[float | None]], want: float
) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return await value() == want

    return probe


DIM = names.SCALER_DIMENSION_INFLIGHT
BINDING = names.SCALER_CAPACITY_BINDING
# The counter's samples: counts stay when a trigger's gauges go.
# The counters labelled by metric_name (decisions, held decisions) keep their counts.
COUNTED = {
    name
    for counter in (names.SCALER_DECISIONS, names.SCALER_HELD_DECISIONS)
    for name in (counter, counter.removesuffix("_total") + "_created")
}


async def test_each_dimensions_l_kv_bound_then_router_demand_then_unmeasured(
    router: KvRouter, scaler: Scaler
) -> None:
    # KV-bound from vLLM's usage: L 4, 2 running on 0.75 of a cache:
    # L_kv = 4 x (0.75 / 2) x 4 = 6. The router admits on no tokens (capacity 0).
    router.inflight.set(4)
    router.running.set(2)
    router.kv_usage.set(0.75)
    await poll(_equals(lambda: scaler.value("inflight"), 6.0), timeout_s=30, what="value 6")
    series, _ = await scaler.scrape()
    assert series[(DIM, "inflight", "requests")] == 4.0
    assert series[(DIM, "inflight", "kv_tokens")] == 6.0
    assert series[(BINDING, "inflight", "kv_tokens")] == 1.0

    # The same window with capacity: requests: slots only, the KV dimension not measured.
    assert await scaler.value("slots", capacity="requests") == 4.0
    series, text = await scaler.scrape()
    assert series[(DIM, "slots", "requests")] == 4.0
    assert (DIM, "slots", "kv_tokens") not in series  # absent, not 0
    assert f'{DIM}{{dimension="kv_tokens",metric_name="slots"}}' not in text
    assert series[(BINDING, "slots", "requests")] == 1.0

    # The router's exact demand replaces the estimate where it has a capacity:
    # (4,000 in flight + 4,000 held) / 5,120 x 4 = 6.25.
    router.inflight_tokens.set(4000)
    router.queued_tokens.set(4000)
    router.kv_tokens.set(5120)
    await poll(_equals(lambda: scaler.value("inflight"), 6.25), timeout_s=30, what="value 6.25")
    series, _ = await scaler.scrape()
    assert series[(DIM, "inflight", "kv_tokens")] == 6.25
    assert series[(DIM, "inflight", "requests")] == 4.0

    # Neither source left (nothing running in vLLM, no token capacity at the router): the
    # KV series goes, L's stays.
    router.kv_tokens.set(0)
    router.running.set(0)
    await poll(_equals(lambda: scaler.value("inflight"), 4.0), timeout_s=30, what="value 4")
    series, _ = await scaler.scrape()
    assert (DIM, "inflight", "kv_tokens") not in series
    assert series[(DIM, "inflight", "requests")] == 4.0
    assert series[(BINDING, "inflight", "requests")] == 1.0


async def test_a_gone_triggers_gauges_leave_the_scrape_a_streamed_one_after_its_stream(
    router: KvRouter, scaler: Scaler
) -> None:
    router.inflight.set(4)
    router.running.set(2)
    router.kv_usage.set(0.75)
    await poll(_equals(lambda: scaler.value("deleted"), 6.0), timeout_s=30, what="deleted: 6")
    assert await scaler.value("streamed") == 6.0
    stream = scaler.stub.StreamIsActive(scaler.ref("streamed"))
    # Open (active: L 4): the stream holds its trigger.
    assert (await asyncio.wait_for(stream.read(), timeout=15)).result is True

    scaler.clock[0] += IDLE_S  # "deleted" was last called IDLE_S ago
    series, _ = await scaler.scrape()
    left = {key[0] for key in series if key[1] == "deleted"}
    assert left == COUNTED, left  # every gauge removed; the counters kept
    assert series[(DIM, "streamed", "kv_tokens")] == 6.0
    assert series[(DIM, "streamed", "requests")] == 4.0

    stream.cancel()

    async def closed() -> bool:
        return scaler.app.servicer.limits.streams == 0

    await poll(closed, what="the stream to close")
    series, _ = await scaler.scrape()
    assert (DIM, "streamed", "kv_tokens") in series  # closed now: idle from here
    scaler.clock[0] += IDLE_S
    series, _ = await scaler.scrape()
    assert {key[0] for key in series if key[1] == "streamed"} == COUNTED

    # Called again, the trigger's gauges come back.
    await poll(_equals(lambda: scaler.value("deleted"), 6.0), timeout_s=30, what="back")
    series, _ = await scaler.scrape()
    assert series[(DIM, "deleted", "kv_tokens")] == 6.0
