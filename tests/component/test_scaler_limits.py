"""The servicer's bounds over real gRPC: too many streams or distinct triggers are
refused with RESOURCE_EXHAUSTED naming the bound and its flag; what was admitted works on.

The source is the real DirectSource polling a router-like loopback HTTP server
(``FakeRouter`` from the servicer tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest
from prometheus_client import CollectorRegistry

from external_scaler.limits import Limits
from external_scaler.metrics import ScalerMetrics
from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from external_scaler.server import ScalerApp
from external_scaler.servicer import ExternalScalerServicer
from external_scaler.sources.direct import DirectSource
from inflight import names
from tests.component.test_scaler_servicer import INSTANT, FakeRouter, poll


class Bounded:
    def __init__(self, stub: pb_grpc.ExternalScalerStub, registry: CollectorRegistry) -> None:
        self.stub = stub
        self.registry = registry

    @staticmethod
    def ref(**metadata: str) -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=metadata)

    async def metrics(self, **metadata: str) -> pb.GetMetricsResponse:
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref(**metadata), metricName="inflight")
        return await self.stub.GetMetrics(request, timeout=3)

    def errors(self, kind: str) -> float:
        return self.registry.get_sample_value(names.SCALER_ERRORS, {"kind": kind}) or 0.0


@pytest.fixture
async def bounded() -> AsyncIterator[Bounded]:
    router = FakeRouter()
    router.inflight.set(3)
    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    try:
        async with aiohttp.ClientSession() as session:
            source = DirectSource([router.url], session, metrics, poll_interval_s=0.05)
            source.start()
            limits = Limits(max_streams=1, max_triggers=2, trigger_idle_s=600.0)
            servicer = ExternalScalerServicer(
                source, metrics, stream_interval_s=0.05, limits=limits
            )
            app = ScalerApp(servicer, registry)
            await app.start()
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}")
            try:
                yield Bounded(pb_grpc.ExternalScalerStub(channel), registry)
            finally:
                await channel.close()
                await app.stop(grace_s=1.0)
    finally:
        router.close()


async def _first_answer(b: Bounded, **metadata: str) -> pb.GetMetricsResponse:
    async def answered() -> pb.GetMetricsResponse | None:
        try:
            return await b.metrics(**metadata)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:  # no poll yet
                raise
            return None

    return await poll(answered, what="a first answer")


async def test_a_third_distinct_trigger_is_refused_the_admitted_two_work(bounded: Bounded) -> None:
    b = bounded
    await _first_answer(b, **INSTANT, slotsPerReplica="4")
    await b.metrics(**INSTANT, slotsPerReplica="5")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await b.metrics(**INSTANT, slotsPerReplica="6")
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-triggers 2" in (err.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await b.stub.IsActive(b.ref(**INSTANT, slotsPerReplica="7"), timeout=3)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert b.errors(names.SCALER_ERROR_TOO_MANY_TRIGGERS) == 2.0
    # The two admitted triggers keep being answered.
    for slots in ("4", "5"):
        reply = await b.metrics(**INSTANT, slotsPerReplica=slots)
        assert reply.metricValues[0].metricValueFloat == 3.0


async def test_a_second_stream_is_refused_until_the_first_closes(bounded: Bounded) -> None:
    b = bounded
    await _first_answer(b, **INSTANT)
    first = b.stub.StreamIsActive(b.ref(**INSTANT))
    assert (await asyncio.wait_for(first.read(), timeout=15)).result is True  # L = 3: active
    second = b.stub.StreamIsActive(b.ref(**INSTANT))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await asyncio.wait_for(second.read(), timeout=15)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-streams 1" in (err.value.details() or "")
    assert b.errors(names.SCALER_ERROR_TOO_MANY_STREAMS) == 1.0
    first.cancel()

    async def reopened() -> bool:
        stream = b.stub.StreamIsActive(b.ref(**INSTANT))
        try:
            return (await asyncio.wait_for(stream.read(), timeout=15)).result is True
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            return False
        finally:
            stream.cancel()

    assert await poll(reopened, what="a stream slot freed by closing the first")
