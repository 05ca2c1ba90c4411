"""The bound on Prometheus range queries over real gRPC: past ``--max-queries-per-s``
(after a burst of ``--max-triggers``) a fetch is refused with RESOURCE_EXHAUSTED naming
the flag; an answer from the cache costs nothing, and the bucket refills.

In-process: a real Prometheus scrapes a router-like loopback server (``FakeRouter``), and
the source's and the bucket's monotonic clock is the test's, stepped by hand. As a
process: ``inflight scaler`` reads the bound from ``INFLIGHT_SCALER_MAX_QUERIES_PER_S``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp
import grpc
import pytest
from prometheus_client import CollectorRegistry

from external_scaler.limits import QueryRate
from external_scaler.metrics import ScalerMetrics
from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from external_scaler.server import ScalerApp
from external_scaler.servicer import ExternalScalerServicer
from external_scaler.sources.prometheus import PrometheusSource
from inflight import names
from tests.component.test_scaler_servicer import INSTANT, FakeRouter, poll
from tests.conftest import PrometheusFactory
from tests.support import ProcessTracker

# Three triggers whose range queries differ (their selectors do), on the same router.
SELECTORS = ('job="router"', 'job=~"router"', 'job="router",instance!=""')


class Rated:
    def __init__(
        self, stub: pb_grpc.ExternalScalerStub, registry: CollectorRegistry, clock: list[float]
    ) -> None:
        self.stub = stub
        self.registry = registry
        self.clock = clock  # the source's and the bucket's monotonic seconds

    async def metrics(self, selector: str) -> pb.GetMetricsResponse:
        ref = pb.ScaledObjectRef(
            name="llm", namespace="default", scalerMetadata={**INSTANT, "selector": selector}
        )
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inflight")
        return await self.stub.GetMetrics(request, timeout=3)

    def refused(self) -> float:
        kind = {"kind": names.SCALER_ERROR_TOO_MANY_QUERIES}
        return self.registry.get_sample_value(names.SCALER_ERRORS, kind) or 0.0


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    r = FakeRouter()
    r.inflight.set(3)
    yield r
    r.close()


@pytest.fixture
async def rated(prometheus_factory: PrometheusFactory, router: FakeRouter) -> AsyncIterator[Rated]:
    prometheus = prometheus_factory(
        jobs={"router": [router.url.removeprefix("http://")]}, scrape_interval_s=0.5
    )
    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    clock = [1000.0]

    def now() -> float:
        return clock[0]

    async with aiohttp.ClientSession() as session:
        source = PrometheusSource(
            prometheus.url,
            session,
            metrics,
            cache_ttl_s=100.0,
            query_rate=QueryRate(1.0, burst=2, monotonic=now),
            monotonic=now,
        )
        servicer = ExternalScalerServicer(source, metrics)
        app = ScalerApp(servicer, registry)
        await app.start()
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}")
        try:
            yield Rated(pb_grpc.ExternalScalerStub(channel), registry, clock)
        finally:
            await channel.close()
            await app.stop(grace_s=1.0)


async def test_fetches_past_the_rate_are_refused_cached_answers_are_free(rated: Rated) -> None:
    r = rated

    async def first(selector: str) -> pb.GetMetricsResponse | None:
        r.clock[0] += 2.0  # a full bucket for each try: an empty window costs a fetch too
        try:
            return await r.metrics(selector)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:  # no scrape of L yet
                raise
            return None

    a, b, c = SELECTORS
    answer = await poll(lambda: first(a), what="a first answer")
    assert answer.metricValues[0].metricValueFloat == 3.0
    # The clock stands still from here: the bucket holds one fetch (2 less the one for a).
    await r.metrics(b)  # the last fetch
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await r.metrics(c)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-queries-per-s 1" in (err.value.details() or "")
    assert r.refused() == 1.0
    # Within --cache-ttl-s of their fetch, a and b are answered from the cache: no fetch.
    for selector in (a, b):
        assert (await r.metrics(selector)).metricValues[0].metricValueFloat == 3.0
    assert r.refused() == 1.0
    # One second refills one fetch.
    r.clock[0] += 1.0
    assert (await r.metrics(c)).metricValues[0].metricValueFloat == 3.0


def test_the_process_reads_the_bound_from_its_variable(
    procs: ProcessTracker, refused_port: Callable[[], int]
) -> None:
    """``INFLIGHT_SCALER_MAX_QUERIES_PER_S`` and ``…_MAX_TRIGGERS`` (the burst): with the
    cache off, the third call within a day is refused, whatever the first two got (a
    Prometheus that refuses connections: each call is a fetch that fails UNAVAILABLE)."""
    scaler = procs.start_inflight(
        ["scaler", "--grpc-port", "0", "--metrics-port", "{port}"],
        name="scaler",
        env={
            "INFLIGHT_SCALER_PROMETHEUS_URL": f"http://127.0.0.1:{refused_port()}",
            "INFLIGHT_SCALER_MAX_QUERIES_PER_S": "0.00001",
            "INFLIGHT_SCALER_MAX_TRIGGERS": "2",
            "INFLIGHT_SCALER_CACHE_TTL_S": "0",
        },
    )
    ref = pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=INSTANT)
    request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inflight")
    codes = []
    with grpc.insecure_channel(f"127.0.0.1:{scaler.ports['grpc']}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        for _ in range(3):
            with pytest.raises(grpc.RpcError) as err:
                stub.GetMetrics(request, timeout=3)
            codes.append(err.value.code())
    assert codes == [grpc.StatusCode.UNAVAILABLE] * 2 + [grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert "--max-queries-per-s 1e-05" in (err.value.details() or "")
