"""The gRPC servicer in-process, over real sockets, called through the generated stubs.

The source is the real ``DirectSource`` polling a small router-like HTTP server (a
prometheus_client registry on a loopback port) whose L the test sets; a second HTTP
server that never answers stands in for a hung Prometheus.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from typing import Any

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from external_scaler.errors import (
    MetadataError,
    ScalerError,
    SourceEmpty,
    SourceError,
    SourceRejected,
    SourceTimeout,
)
from external_scaler.metadata import ScalerSpec
from external_scaler.metrics import ScalerMetrics
from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from external_scaler.server import SERVICE_NAME, ScalerApp
from external_scaler.servicer import ExternalScalerServicer
from external_scaler.sources import Observed
from external_scaler.sources.direct import DirectSource
from external_scaler.sources.prometheus import PrometheusSource
from inflight import names
from inflight.control.policy import Decision, Sample, Window
from tests.support import LoopbackHTTPServer, QuietHandler

# The value is L now: no windows, no floor (its memory would hold 0.6 x the peak) and no
# late scale-up's hold (on by default: a scale-up like recent short excursions is held).
INSTANT = {
    "scaleUpWindowSeconds": "0",
    "scaleDownWindowSeconds": "0",
    "floorWindowSeconds": "0",
    "startupSeconds": "0",
}


class FakeRouter:
    """A loopback HTTP server exposing the router's L, arrivals and ready endpoints."""

    def __init__(self, hang: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.inflight = Gauge(names.ROUTER_INFLIGHT, "L", registry=self.registry)
        self.received = Counter(
            names.ROUTER_REQUESTS_RECEIVED.removesuffix("_total"), "arrivals",
            registry=self.registry,
        )  # fmt: skip
        ready = Gauge(names.ROUTER_ENDPOINTS, "endpoints", ["state"], registry=self.registry)
        self.ready = ready.labels("ready")
        self.ready.set(1)
        # vLLM's names too, so a trigger with source=vllm finds its series.
        self.running = Gauge(names.VLLM_RUNNING, "running", registry=self.registry)
        self.waiting = Gauge(names.VLLM_WAITING, "waiting", registry=self.registry)
        self.release = threading.Event()
        # Set: every request answers 503, as a router in a restart loop fails its scrapes.
        self.failing = threading.Event()
        registry, release, failing = self.registry, self.release, self.failing

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if hang:
                    release.wait(30)
                    return
                if failing.is_set():
                    self.respond(b"restarting", "text/plain", status=503)
                    return
                self.respond(generate_latest(registry), "text/plain; version=0.0.4")

        self.http = LoopbackHTTPServer(Handler)
        self.url = self.http.url

    def close(self) -> None:
        self.release.set()
        self.http.close()


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    r = FakeRouter()
    yield r
    r.close()


class Harness:
    def __init__(self, app: ScalerApp, channel: grpc.aio.Channel, registry: CollectorRegistry):
        self.app = app
        self.channel = channel
        self.stub = pb_grpc.ExternalScalerStub(channel)
        self.registry = registry

    @staticmethod
    def ref(**metadata: str) -> pb.ScaledObjectRef:
        return pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=metadata)

    async def metrics(self, **metadata: str) -> pb.GetMetricsResponse:
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref(**metadata), metricName="inflight")
        return await self.stub.GetMetrics(request, timeout=3)

    async def value(self, **metadata: str) -> float | None:
        try:
            return (await self.metrics(**metadata)).metricValues[0].metricValueFloat
        except grpc.aio.AioRpcError:
            return None


async def poll(probe, timeout_s: float = 15.0, what: str = "condition"):
    """Async twin of tests.support.wait_for (the loop must keep running while we wait)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    last = None
    while True:
        last = await probe()
        if last:
            return last
        if asyncio.get_running_loop().time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last={last!r}")
        await asyncio.sleep(0.05)


async def _harness(
    source, registry: CollectorRegistry, call_budget_s: float = 2.5, stream_interval_s: float = 1.0
) -> AsyncIterator[Harness]:
    metrics = ScalerMetrics(registry)
    servicer = ExternalScalerServicer(
        source(metrics), metrics, call_budget_s=call_budget_s, stream_interval_s=stream_interval_s
    )
    app = ScalerApp(servicer, registry)
    await app.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}")
    try:
        yield Harness(app, channel, registry)
    finally:
        await channel.close()
        await app.stop(grace_s=1.0)


@pytest.fixture
async def direct(router: FakeRouter) -> AsyncIterator[Harness]:
    async with aiohttp.ClientSession() as session:
        holder: list[DirectSource] = []

        def make(metrics: ScalerMetrics) -> DirectSource:
            src = DirectSource([router.url], session, metrics, poll_interval_s=0.05)
            src.start()
            holder.append(src)
            return src

        async for h in _harness(make, CollectorRegistry(), stream_interval_s=0.05):
            yield h


async def test_keda_sequence_spec_metrics_active(router: FakeRouter, direct: Harness) -> None:
    router.inflight.set(6)
    await poll(lambda: _equals(direct.value(**INSTANT), 6.0), what="value 6")
    spec = await direct.stub.GetMetricSpec(direct.ref(**INSTANT), timeout=3)
    assert len(spec.metricSpecs) == 1
    assert spec.metricSpecs[0].metricName == "inflight"
    assert (spec.metricSpecs[0].targetSizeFloat, spec.metricSpecs[0].targetSize) == (4.0, 4)
    values = (await direct.metrics(**INSTANT)).metricValues
    assert len(values) == 1  # HPA sums every value: exactly one
    assert (values[0].metricName, values[0].metricValueFloat, values[0].metricValue) == (
        "inflight",
        6.0,
        6,
    )
    assert (await direct.stub.IsActive(direct.ref(**INSTANT), timeout=3)).result is True
    router.inflight.set(0)
    await poll(lambda: _equals(direct.value(**INSTANT), 0.0), what="value 0")
    assert (await direct.stub.IsActive(direct.ref(**INSTANT), timeout=3)).result is False


async def test_scaler_metrics_are_exported(router: FakeRouter, direct: Harness) -> None:
    router.inflight.set(9)
    await poll(lambda: _equals(direct.value(**INSTANT), 9.0), what="value 9")
    reg = direct.registry
    labels = {"metric_name": "inflight"}
    assert reg.get_sample_value(names.SCALER_METRIC_VALUE, labels) == 9.0
    assert reg.get_sample_value(names.SCALER_METRIC_TARGET, labels) == 4.0
    assert reg.get_sample_value(names.SCALER_DESIRED_REPLICAS, labels) == 3.0
    assert reg.get_sample_value(names.SCALER_SATURATION, labels) == 9.0 / 4
    assert reg.get_sample_value(names.SCALER_ACTIVE, labels) == 1.0
    assert reg.get_sample_value(names.SCALER_SCALE_UP_HELD, labels) == 0.0  # nothing held
    assert (reg.get_sample_value(names.SCALER_DECISIONS, {**labels, "direction": "up"}) or 0) >= 1
    ok = {"method": "GetMetrics", "code": "OK"}
    assert (reg.get_sample_value(names.SCALER_GRPC_REQUESTS, ok) or 0) >= 1
    url = f"http://127.0.0.1:{direct.app.metrics_port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    assert f'{names.SCALER_METRIC_VALUE}{{metric_name="inflight"}} 9.0' in text


@pytest.mark.parametrize(
    ("metadata", "key", "spec_too"),
    [
        ({"slotsPerReplica": "zero"}, "slotsPerReplica", True),
        ({"selector": 'x"} or vector(1)'}, "selector", True),
        ({"unknownKey": "1"}, "unknownKey", True),
        # settings tried and not adopted: the simulator's experimental option only
        ({"floorDecay": "linear"}, "floorDecay", True),
        ({"floorStatistic": "quantile"}, "refused by the scaler", True),
        # valid metadata the direct source cannot serve: refused when a window is needed
        ({"selector": 'job="router"'}, "selector", False),
        ({"source": "vllm"}, "source", False),
    ],
)
async def test_bad_metadata_is_invalid_argument(
    router: FakeRouter, direct: Harness, metadata: dict[str, str], key: str, spec_too: bool
) -> None:
    ref = direct.ref(**metadata)
    request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inflight")
    calls = [direct.stub.GetMetrics(request, timeout=3), direct.stub.IsActive(ref, timeout=3)]
    if spec_too:
        calls.append(direct.stub.GetMetricSpec(ref, timeout=3))
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert key in (err.value.details() or "")


async def test_stream_with_bad_metadata_is_refused(direct: Harness) -> None:
    stream = direct.stub.StreamIsActive(direct.ref(timeScale="-1"), timeout=5)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stream.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "timeScale" in (err.value.details() or "")


async def test_wrong_metric_name_is_invalid_argument(direct: Harness) -> None:
    request = pb.GetMetricsRequest(scaledObjectRef=direct.ref(), metricName="other")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await direct.stub.GetMetrics(request, timeout=3)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "metricName" in (err.value.details() or "")


@pytest.mark.parametrize("asked", ["llm-inflight-Prod", "llm-inflight-prod", "LLM-INFLIGHT-PROD"])
async def test_metric_name_matches_whatever_its_case(
    router: FakeRouter, direct: Harness, asked: str
) -> None:
    """Older KEDA lowercases the metric name it asks for; the name is the same name."""
    router.inflight.set(2)
    ref = direct.ref(metricName="llm-inflight-Prod", **INSTANT)
    request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=asked)

    async def answered() -> pb.GetMetricsResponse | None:
        try:
            response = await direct.stub.GetMetrics(request, timeout=3)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:  # no poll of the router yet
                return None
            raise  # INVALID_ARGUMENT: the name was not recognised
        return response if response.metricValues[0].metricValueFloat == 2.0 else None

    response = await poll(answered, what="value 2")
    assert [v.metricName for v in response.metricValues] == [asked]  # KEDA's own spelling
    other = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="llm-inflight-other")
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await direct.stub.GetMetrics(other, timeout=3)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_router_gone_is_unavailable_never_zero(router: FakeRouter, direct: Harness) -> None:
    router.inflight.set(5)
    await poll(lambda: _equals(direct.value(**INSTANT), 5.0), what="value 5")
    router.close()

    async def unavailable() -> str | None:
        try:
            await direct.metrics(**INSTANT)
        except grpc.aio.AioRpcError as exc:
            return exc.details() if exc.code() == grpc.StatusCode.UNAVAILABLE else None
        return None

    details = await poll(unavailable, what="UNAVAILABLE after the router went away")
    assert "router" in details
    errors = direct.registry.get_sample_value
    assert (errors(names.SCALER_ERRORS, {"kind": names.SCALER_ERROR_ROUTER_POLL}) or 0) >= 1
    # The source still holds older polls (the qps window, 10 s), none in the policy's
    # zero-length windows: the policy finds no sample (before, the source refused first).
    assert (errors(names.SCALER_ERRORS, {"kind": names.SCALER_ERROR_NO_SAMPLES}) or 0) + (
        errors(names.SCALER_ERRORS, {"kind": names.SCALER_ERROR_SOURCE_EMPTY}) or 0
    ) >= 1


async def test_a_router_missing_from_the_polls_is_answered_up_or_held(
    router: FakeRouter,
) -> None:
    """Two routers in front of the same 3 replicas, 6 in flight at each (12: 3 x 4).
    Router b stops answering: a's 6 alone would lower 3 replicas to 2, so the answer holds
    them (12, active); a surge at a (20) is answered as it is (5 replicas). Each partial
    answer is counted as ``source_partial``. (Before: no poll counted unless every router
    answered, and every call was UNAVAILABLE: KEDA's fallback, no scale-up.)"""
    other = FakeRouter()
    for r in (router, other):
        r.ready.set(3)
        r.inflight.set(6)
    async with aiohttp.ClientSession() as session:
        holder: list[DirectSource] = []

        def make(metrics: ScalerMetrics) -> DirectSource:
            src = DirectSource([router.url, other.url], session, metrics, poll_interval_s=0.05)
            src.start()
            holder.append(src)
            return src

        try:
            async for h in _harness(make, CollectorRegistry()):
                await _one_router_goes_missing(h, router, other)
        finally:
            other.close()


async def _one_router_goes_missing(h: Harness, router: FakeRouter, other: FakeRouter) -> None:
    await poll(lambda: _equals(h.value(**INSTANT), 12.0), what="value 12")
    other.close()
    labels = {"kind": names.SCALER_ERROR_SOURCE_PARTIAL}

    async def partial_answers() -> bool:
        await h.metrics(**INSTANT)  # answered: never UNAVAILABLE
        return (h.registry.get_sample_value(names.SCALER_ERRORS, labels) or 0) > 0

    await poll(partial_answers, what="an answer on partial data")
    desired = {"metric_name": "inflight"}
    for _ in range(3):
        assert await h.value(**INSTANT) == 12.0  # held at 3 x 4, not a's 6
        assert (await h.stub.IsActive(h.ref(**INSTANT), timeout=3)).result is True
        assert h.registry.get_sample_value(names.SCALER_DESIRED_REPLICAS, desired) == 3
    router.inflight.set(20)
    await poll(lambda: _equals(h.value(**INSTANT), 20.0), what="the surge: 20")
    assert h.registry.get_sample_value(names.SCALER_DESIRED_REPLICAS, desired) == 5


async def test_stream_pushes_true_once_per_activation(router: FakeRouter, direct: Harness) -> None:
    router.inflight.set(0)
    await poll(lambda: _equals(direct.value(**INSTANT), 0.0), what="idle")
    # Count the source's reads: while the test makes no call, each is the stream's decision.
    source = direct.app.servicer.source
    reads = [0]
    observe = source.observe

    async def counted(*args: Any, **kwargs: Any) -> Observed:
        reads[0] += 1
        return await observe(*args, **kwargs)

    source.observe = counted  # type: ignore[method-assign]

    async def stream_decided_since(count: int) -> bool:
        return reads[0] >= count + 2  # one whole decision began after ``count``

    stream = direct.stub.StreamIsActive(direct.ref(**INSTANT))
    try:
        router.inflight.set(3)
        first = await asyncio.wait_for(stream.read(), timeout=15)
        assert first.result is True
        # Still active: the stream stays silent (a pushed "true" is not repeated). It
        # checks every 0.05 s, so about 40 checks pass while we wait for a second message.
        following = asyncio.ensure_future(stream.read())
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(following), 2)
        router.inflight.set(0)
        await poll(lambda: _equals(direct.value(**INSTANT), 0.0), what="idle again")
        # The stream must see the idle state too before L rises (it decides every 0.05 s,
        # on its own schedule): wait for one of its decisions to begin after ours.
        seen = reads[0]
        await poll(lambda: stream_decided_since(seen), what="the stream to decide while idle")
        assert not following.done()  # going idle pushes nothing (KEDA ignores a pushed false)
        router.inflight.set(2)
        second = await asyncio.wait_for(following, timeout=15)
        assert second.result is True
    finally:
        stream.cancel()


async def test_health_and_reflection(direct: Harness) -> None:
    health = health_pb2_grpc.HealthStub(direct.channel)
    for service in ("", SERVICE_NAME):
        reply = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=3)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(direct.channel)
    responses = refl.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")])
    )
    listed = [s.name async for r in responses for s in r.list_services_response.service]
    assert SERVICE_NAME in listed
    assert "grpc.health.v1.Health" in listed


class FailingSource:
    """A WindowSource that raises ``failure``, or (None) delivers a window without any L."""

    def __init__(self, failure: Exception | None) -> None:
        self.failure = failure

    async def observe(self, spec: ScalerSpec, now_s: float, timeout_s: float) -> Observed:
        if self.failure is not None:
            raise self.failure
        return Observed(Window(inflight=(), arrivals_total=(), ready_replicas=()), now_s)

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("failure", "code", "kind"),
    [
        (SourceError("down"), grpc.StatusCode.UNAVAILABLE, names.SCALER_ERROR_SOURCE),
        (SourceTimeout("slow"), grpc.StatusCode.UNAVAILABLE, names.SCALER_ERROR_SOURCE_TIMEOUT),
        (SourceEmpty("none"), grpc.StatusCode.UNAVAILABLE, names.SCALER_ERROR_SOURCE_EMPTY),
        (None, grpc.StatusCode.UNAVAILABLE, names.SCALER_ERROR_NO_SAMPLES),
        (
            SourceRejected("bad_data"),
            grpc.StatusCode.INVALID_ARGUMENT,
            names.SCALER_ERROR_SOURCE_REJECTED,
        ),
        (
            MetadataError("selector", '""'),
            grpc.StatusCode.INVALID_ARGUMENT,
            names.SCALER_ERROR_INVALID_ARGUMENT,
        ),
        (ScalerError("odd"), grpc.StatusCode.INTERNAL, names.SCALER_ERROR_INTERNAL),
        (RuntimeError("bug"), grpc.StatusCode.INTERNAL, names.SCALER_ERROR_INTERNAL),
    ],
)
async def test_each_failure_is_one_status_code_and_one_error_kind(
    failure: Exception | None, code: grpc.StatusCode, kind: str
) -> None:
    """The servicer's one mapping: the code KEDA sees and the ``kind`` the alert reads."""
    async for h in _harness(lambda _metrics: FailingSource(failure), CollectorRegistry()):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await h.metrics()
        assert err.value.code() == code
        assert h.registry.get_sample_value(names.SCALER_ERRORS, {"kind": kind}) == 1.0
        assert kind in names.SCALER_ERROR_KINDS


async def test_hung_prometheus_answers_unavailable_within_the_budget() -> None:
    hung = FakeRouter(hang=True)  # accepts, never answers
    try:
        async with aiohttp.ClientSession() as session:

            def make(metrics: ScalerMetrics) -> PrometheusSource:
                return PrometheusSource(hung.url, session, metrics)

            async for h in _harness(make, CollectorRegistry()):  # default budget, 2.5 s
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await h.metrics()  # KEDA's 3 s deadline
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # not DEADLINE_EXCEEDED
                assert "did not answer" in (err.value.details() or "")
                # A caller with a shorter deadline gets its answer inside that deadline too.
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await h.stub.IsActive(h.ref(), timeout=1)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        hung.close()


async def test_unreachable_prometheus_is_unavailable(refused_port: Callable[[], int]) -> None:
    async with aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{refused_port()}"

        def make(metrics: ScalerMetrics) -> PrometheusSource:
            return PrometheusSource(url, session, metrics)

        async for h in _harness(make, CollectorRegistry()):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await h.metrics()
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "unreachable" in (err.value.details() or "")
            kind = {"kind": names.SCALER_ERROR_SOURCE}
            assert h.registry.get_sample_value(names.SCALER_ERRORS, kind) == 1.0


async def _equals(value_coro, expected: float) -> bool:
    return (await value_coro) == expected


class ScriptedSource:
    """A WindowSource replaying ``windows`` of L (seconds from a start, shifted to end at
    the time it is asked for) one per call, 3 replicas ready throughout: the late
    scale-up's hold needs 15 minutes of history, which a live router would take 15 minutes
    to make (the policy's own tests step it; this one checks what the servicer does with a
    hold: the gauge, the log, the value KEDA gets)."""

    def __init__(self, windows: list[list[tuple[float, float]]]) -> None:
        self.windows = windows
        self.calls = 0

    async def observe(self, spec: ScalerSpec, now_s: float, timeout_s: float) -> Observed:
        samples = self.windows[min(self.calls, len(self.windows) - 1)]
        self.calls += 1
        shift = now_s - samples[-1][0]
        inflight = tuple(Sample(t + shift, v) for t, v in samples)
        ready = (Sample(samples[0][0] + shift, 3.0),)
        return Observed(Window(inflight=inflight, arrivals_total=(), ready_replicas=ready), now_s)

    async def close(self) -> None:
        pass


def _bursts(end_s: float, bursts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """L every 5 s from 0 to ``end_s``: 20 inside each [start, end) burst, 2 elsewhere."""
    times = (5.0 * i for i in range(int(end_s / 5) + 1))
    return [(t, 20.0 if any(a <= t < b for a, b in bursts) else 2.0) for t in times]


async def test_a_held_scale_up_is_in_the_gauge_and_the_log_while_it_lasts(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Bursts of L 20 (above 3 ready x 4) lasting 55 s, under a 100 s start-up: the second,
    25 s in, is held at the ready 12 (gauge 1, a "held" line); 100 s after it ended the
    value is L again (gauge 0, a "no longer held" line). Trigger metadata as KEDA sends it."""
    bursts = [(100.0, 160.0), (400.0, 460.0)]
    source = ScriptedSource([_bursts(430.0, bursts), _bursts(560.0, bursts)])
    meta = {
        "startupSeconds": "100",
        "floorWindowSeconds": "0",
        "minReplicaCount": "1",
        "queueHeadroom": "0",  # the hold's figures: L itself
        "scaleDownWindowSeconds": "60",
    }
    labels = {"metric_name": "inflight"}
    caplog.set_level(logging.INFO, logger="external_scaler.servicer")
    async for h in _harness(lambda _metrics: source, CollectorRegistry()):
        assert await h.value(**meta) == 12.0  # held at the ready 3 x 4, not L's 20
        assert h.registry.get_sample_value(names.SCALER_SCALE_UP_HELD, labels) == 1.0
        assert await h.value(**meta) == 2.0
        assert h.registry.get_sample_value(names.SCALER_SCALE_UP_HELD, labels) == 0.0
    lines = [r.getMessage() for r in caplog.records if r.name == "external_scaler.servicer"]
    held = [i for i, line in enumerate(lines) if line.startswith("inflight: scale-up held at 3")]
    ended = [i for i, line in enumerate(lines) if "scale-up no longer held" in line]
    assert len(held) == 1 and "late scale-up held" in lines[held[0]], lines
    assert len(ended) == 1 and ended[0] > held[0], lines


class OneWindowSource:
    """A WindowSource answering every call with the one window it holds, the same object,
    as the Prometheus source answers from its cache until it fetches again (``fetch``)."""

    def __init__(self, level: float) -> None:
        self.observed: Observed | None = None
        self.fetch(level)

    def fetch(self, level: float) -> None:
        now_s = 1_000.0
        inflight = tuple(Sample(now_s - 5.0 * i, level) for i in range(20, -1, -1))
        ready = (Sample(now_s - 100.0, 1.0),)
        self.observed = Observed(Window(inflight, (), ready), now_s)

    async def observe(self, spec: ScalerSpec, now_s: float, timeout_s: float) -> Observed:
        assert self.observed is not None
        return self.observed

    async def close(self) -> None:
        pass


async def test_a_decision_on_the_same_window_is_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision is a pure function of (spec, window): a call the source answers with
    the window it answered before (its cache) reuses the decision; a new window, another
    trigger spec, or the window dropped by the source decides again, and the reused answer
    is the one deciding again would give."""
    import external_scaler.servicer as servicer_module

    decided: list[float] = []
    real = servicer_module.costed_decision

    def counting(spec: ScalerSpec, observed: Observed):  # the real decision, counted
        decided.append(observed.end_s)
        return real(spec, observed)

    monkeypatch.setattr(servicer_module, "costed_decision", counting)
    source = OneWindowSource(6.0)
    async for h in _harness(lambda _metrics: source, CollectorRegistry()):
        assert await h.value(**INSTANT) == 6.0
        assert await h.value(**INSTANT) == 6.0
        assert len(decided) == 1  # the second call reused the first's decision
        other = {**INSTANT, "slotsPerReplica": "8"}
        assert await h.value(**other) == 6.0
        assert len(decided) == 2  # another trigger spec decides on its own
        source.fetch(10.0)  # a new window: the memo's weak reference to the old one dies
        assert await h.value(**INSTANT) == 10.0
        assert len(decided) == 3
        memo = h.app.servicer._decided
        assert all(ref() is source.observed for ref, _ in memo.values() if ref() is not None)
        assert await h.value(**INSTANT) == 10.0
        assert len(decided) == 3


def test_log_change_logs_a_change_once_per_metric_and_nothing_when_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``_log_change`` itself (``change_message``'s wording: tests/unit/test_scaler_change_log.py):
    a line at INFO for the first decision of each metric name and for each change of its
    desired count or of a late scale-up's hold; none while neither changes, whatever else
    in the decision moves (the value, the reason)."""
    servicer = ExternalScalerServicer(OneWindowSource(6.0), ScalerMetrics(CollectorRegistry()))
    base = Decision(
        policy="saturation", value=12.0, target=4.0, desired_replicas=3, active=True,
        inflight=12.0, ready_replicas=3, saturation=1.0, direction="hold", reason="L 12",
    )  # fmt: skip
    same_count = replace(base, value=11.0, inflight=11.0, reason="L 11")
    up = replace(base, value=20.0, desired_replicas=5, reason="L 20")
    held = replace(up, held_scale_up=True, reason="held")
    caplog.set_level(logging.INFO, logger="external_scaler.servicer")
    logged: list[list[str]] = []
    for metric, decision in [
        ("a", base), ("a", base), ("a", same_count), ("b", base), ("a", up), ("a", held),
        ("a", held), ("a", up), ("a", up),
    ]:  # fmt: skip
        caplog.clear()
        servicer._log_change(metric, decision)
        assert all(r.levelno == logging.INFO for r in caplog.records)
        logged.append([r.getMessage() for r in caplog.records])
    tail = "(saturation policy, value {v}, target 4): {why}"
    assert logged == [
        ["a: desired ? -> 3 " + tail.format(v=12, why="L 12")],
        [],  # nothing changed
        [],  # the value and the reason moved, not the count
        ["b: desired ? -> 3 " + tail.format(v=12, why="L 12")],  # each metric its own
        ["a: desired 3 -> 5 " + tail.format(v=20, why="L 20")],
        ["a: scale-up held at 5 " + tail.format(v=20, why="held")],
        [],
        ["a: scale-up no longer held, desired 5 -> 5 " + tail.format(v=20, why="L 20")],
        [],
    ]
