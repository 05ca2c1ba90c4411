"""The scaler process against a real Prometheus, called through the stubs as KEDA calls it.

Prometheus (Debian's binary) scrapes a small loopback endpoint whose L the test sets
(the router's metric names, from a prometheus_client registry), every 0.5 s. Windows
run at time-scale 0.1: scale-up 1 s, scale-down 6 s. Conditions are polled with
generous deadlines. Following L, holding it for the window and falling are tested end to
end, with the real router, in test_scaler_router.py.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator

import aiohttp
import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from external_scaler.metadata import ScalerSpec, parse_metadata
from external_scaler.metrics import ScalerMetrics
from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from external_scaler.sources import Observed
from external_scaler.sources.prometheus import PrometheusSource, observed_from_matrix
from external_scaler.sources.promql import QUERY_REQUESTS, range_query, step_for
from inflight import names
from inflight.control.policy import Sample
from inflight.prom import PrometheusServer
from tests.component.test_scaler_servicer import FakeRouter
from tests.conftest import PrometheusFactory
from tests.support import ProcessTracker, Server, wait_for

SCRAPE_S = 0.5
META = {"timeScale": "0.1"}  # scale-up 1 s, scale-down 6 s


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    r = FakeRouter()
    yield r
    r.close()


@pytest.fixture
def prometheus(prometheus_factory: PrometheusFactory, router: FakeRouter) -> PrometheusServer:
    target = router.url.removeprefix("http://")
    return prometheus_factory(jobs={"router": [target]}, scrape_interval_s=SCRAPE_S)


class Scaler:
    """A scaler process and a KEDA-like client of it."""

    def __init__(self, server: Server, grpc_port: int) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        self.stub = pb_grpc.ExternalScalerStub(self.channel)

    def keda_poll(self, metadata: dict[str, str]) -> tuple[float, float, bool]:
        """GetMetricSpec → GetMetrics → IsActive, as KEDA does each polling interval."""
        ref = pb.ScaledObjectRef(name="llm", namespace="default", scalerMetadata=metadata)
        spec = self.stub.GetMetricSpec(ref, timeout=3).metricSpecs[0]
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName=spec.metricName)
        values = self.stub.GetMetrics(request, timeout=3).metricValues
        assert len(values) == 1
        assert values[0].metricValue == int(-(-values[0].metricValueFloat // 1))  # ceil
        active = self.stub.IsActive(ref, timeout=3).result
        return spec.targetSizeFloat, values[0].metricValueFloat, active

    def value(self, metadata: dict[str, str] = META) -> float | None:
        """The metric value, or None while the scaler answers UNAVAILABLE."""
        try:
            return self.keda_poll(metadata)[1]
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                return None
            raise

    def code(self, metadata: dict[str, str] = META) -> grpc.StatusCode:
        return self.status(metadata)[0]

    def status(self, metadata: dict[str, str] = META) -> tuple[grpc.StatusCode, str]:
        """The status code and details of a KEDA poll."""
        try:
            self.keda_poll(metadata)
        except grpc.RpcError as exc:
            return exc.code(), exc.details() or ""
        return grpc.StatusCode.OK, ""

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"{self.server.url}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name + " ") or line.startswith(name + "{")
        )

    def close(self) -> None:
        self.channel.close()


@pytest.fixture
def start_scaler(procs: ProcessTracker, prometheus: PrometheusServer):
    opened: list[Scaler] = []

    def start(*extra: str) -> Scaler:
        server = procs.start_inflight(
            ["scaler", "--grpc-port", "0", "--metrics-port", "{port}",
             "--prometheus-url", prometheus.url, *extra],
            name=f"scaler{len(opened)}", ready_path="/health",
        )  # fmt: skip
        opened.append(Scaler(server, server.ports["grpc"]))
        return opened[-1]

    yield start
    for s in opened:
        s.close()


def prometheus_l(prometheus: PrometheusServer) -> float | None:
    """L as Prometheus has it now (instant query), None when it has no sample."""
    query = urllib.parse.urlencode({"query": names.promql(names.PROMQL_L)})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_prometheus_down_is_unavailable_then_recovers(
    router: FakeRouter, prometheus: PrometheusServer, start_scaler
) -> None:
    scaler = start_scaler()
    router.inflight.set(3)
    wait_for(lambda: scaler.value() == 3.0, timeout_s=30, what="value 3")
    prometheus.stop()
    wait_for(
        lambda: scaler.code() == grpc.StatusCode.UNAVAILABLE,
        timeout_s=30,
        what="UNAVAILABLE while Prometheus is down",
    )
    try:
        scaler.keda_poll(META)
    except grpc.RpcError as exc:
        assert "Prometheus" in (exc.details() or "")
    assert scaler.metric(names.SCALER_ERRORS) >= 1
    prometheus.start()  # same port, same storage
    wait_for(lambda: scaler.value() == 3.0, timeout_s=60, what="answers again after restart")


def test_two_scalers_and_a_restarted_one_answer_alike(
    router: FakeRouter, prometheus: PrometheusServer, start_scaler
) -> None:
    # hold for 60 s; the headroom and the SLO stage's discount off: the figures are L's
    meta = {
        "timeScale": "0.1",
        "scaleDownWindowSeconds": "600",
        "queueHeadroom": "0",
        "sloTtftSeconds": "0",
    }
    first = start_scaler()
    router.inflight.set(7)
    wait_for(lambda: first.value(meta) == 7.0, timeout_s=30, what="value 7")
    router.inflight.set(1)
    wait_for(lambda: prometheus_l(prometheus) == 1.0, timeout_s=30, what="Prometheus to see 1")
    # A scaler started now never saw L=7; the window lives in Prometheus, so it holds 7 too.
    second = start_scaler()
    assert wait_for(lambda: second.value(meta), timeout_s=30, what="second answers") == 7.0
    answers = [(first.keda_poll(meta), second.keda_poll(meta)) for _ in range(5)]
    for a, b in answers:
        assert a == b == (4.0, 7.0, True)


def test_keda_poll_costs_one_query_when_cached(
    router: FakeRouter, prometheus: PrometheusServer, start_scaler
) -> None:
    meta = {"timeScale": "0.1", "scaleUpWindowSeconds": "0"}  # no smoothing: max is 2 at once
    router.inflight.set(2)  # before the first answer, which the cached scaler keeps 30 s
    wait_for(lambda: prometheus_l(prometheus) == 2.0, timeout_s=30, what="Prometheus to see 2")
    cached = start_scaler("--cache-ttl-s", "30")
    uncached = start_scaler("--cache-ttl-s", "0")
    wait_for(lambda: cached.value(meta) == 2.0, timeout_s=30, what="cached scaler: value 2")
    wait_for(lambda: uncached.value(meta) == 2.0, timeout_s=30, what="uncached scaler: value 2")
    queries = names.SCALER_QUERY_DURATION + "_count"
    before = cached.metric(queries), uncached.metric(queries)
    for _ in range(3):
        cached.keda_poll(meta)
        uncached.keda_poll(meta)
    assert cached.metric(queries) == before[0]  # all from the cache
    assert uncached.metric(queries) == before[1] + 6  # GetMetrics + IsActive, each poll


# --- metadata fuzzed against the live process ----------------------------------------------

_number = st.one_of(
    st.sampled_from(["0", "1", "4", "0.5", "10", "60", "1000", "86400", "0.001", ".5"]),
    st.sampled_from(["-1", "nan", "inf", "1e3", "", " ", "four", "0x10", "1_000"]),
    st.text(max_size=8),
)
_values = {
    names.META_METRIC_NAME: st.one_of(st.just("inflight"), st.text(max_size=12)),
    names.META_SELECTOR: st.one_of(
        st.sampled_from(["", 'job="router"', 'job=~"rou.*"', 'job!="x"', 'nope="x"']),
        st.text(max_size=30),
    ),
    names.META_SLOTS_PER_REPLICA: _number,
    names.META_TARGET_SATURATION: _number,
    names.META_SCALE_UP_WINDOW_S: _number,
    names.META_SCALE_DOWN_WINDOW_S: _number,
    names.META_ACTIVATION_INFLIGHT: _number,
    names.META_SOURCE: st.one_of(st.sampled_from(["router", "vllm"]), st.text(max_size=6)),
    names.META_POLICY: st.one_of(st.sampled_from(["saturation", "qps"]), st.text(max_size=6)),
    names.META_TIME_SCALE: _number,
    "scalerAddress": st.text(max_size=10),
    "someUnknownKey": st.text(max_size=5),
}
# any subset of the keys, each with a good or a bad value
_metadata = st.fixed_dictionaries({}, optional=_values)


_MATCHING = ("", 'job="router"', 'job=~"rou.*"', 'job!="x"')


def unavailable_is_expected(metadata: dict[str, str], details: str) -> bool:
    """UNAVAILABLE is right only when the metadata asks for data Prometheus does not have.

    Prometheus here is seconds old: a selector that matches nothing, a query step coarser
    than the one-second history (windows of hours), or a qps window reaching back before
    the first scrape has no samples. With data, every valid trigger answers OK.
    """
    spec = parse_metadata(metadata)  # it parsed in the scaler, so it parses here
    if spec.policy.policy == "qps" and "reach back" in details:
        # Its arrivals window (10 s × timeScale) reaches before the first scrape, whatever
        # the step: found by this test in fresh clone fc11 ({policy: qps, timeScale: 60}).
        return True
    if spec.selector not in _MATCHING or step_for(spec) > 1.0:
        return "no sample of L" in details
    return False


def test_fuzzed_metadata_answers_ok_or_invalid_argument(
    router: FakeRouter, prometheus: PrometheusServer, start_scaler
) -> None:
    scaler = start_scaler()
    router.inflight.set(4)
    router.running.set(3)
    router.waiting.set(1)
    wait_for(lambda: scaler.value() == 4.0, timeout_s=30, what="value 4")
    # Default windows evaluate on a 1 s grid: wait until that grid has a sample too.
    wait_for(lambda: scaler.value({}) == 4.0, timeout_s=30, what="value 4, default metadata")
    seen: set[str] = set()

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(metadata=_metadata)
    def call(metadata: dict[str, str]) -> None:
        code, details = scaler.status(metadata)
        seen.add(code.name)
        if code == grpc.StatusCode.UNAVAILABLE:
            assert unavailable_is_expected(metadata, details), (metadata, details)
        else:
            assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), (code, metadata)

    call()
    assert {"OK", "INVALID_ARGUMENT"} <= seen
    assert scaler.server.process.poll() is None  # the process never died
    assert scaler.value() == 4.0  # and still answers


# --- L is trusted only when fresh; arrivals survive a router restart -----------------------


def test_a_frozen_l_may_raise_the_count_never_lower_it(
    router: FakeRouter, prometheus: PrometheusServer, start_scaler
) -> None:
    """Prometheus restarts while the router has left its targets: it writes no staleness
    marker for the series it had, so every step of the next 5 minutes is filled from the
    last sample of L. The scaler looks at that sample's age (1.5 s allowed here): past
    it, the filled steps are dropped and the window is stale (``source_stale``), so it may
    raise or keep the count, never lower it. L was 12 on 1 ready replica: 12 is still
    answered (3 replicas); had it been 0, the count would be kept. (Before: UNAVAILABLE,
    KEDA's fallback, from 1.5 s on; before that fix, 3 for the 5 minutes.)"""
    meta = {**META, "scrapeIntervalSeconds": str(SCRAPE_S), "scaleDownWindowSeconds": "600"}
    scaler = start_scaler("--cache-ttl-s", "0")
    router.inflight.set(12)
    wait_for(lambda: scaler.value(meta) == 12.0, timeout_s=30, what="value 12")
    prometheus.stop()
    router.close()
    prometheus.jobs = {"router": []}  # start() writes the targets from jobs
    prometheus.start()
    assert prometheus_l(prometheus) == 12.0  # Prometheus itself still answers the frozen L

    def frozen_for_s() -> float:
        """How old the sample Prometheus fills L's steps from is now (seconds)."""
        query = urllib.parse.urlencode(
            {"query": f"time() - max(timestamp({names.ROUTER_INFLIGHT}))"}
        )
        with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as r:
            return float(json.loads(r.read())["data"]["result"][0]["value"][1])

    # Twice the 1.5 s allowed: every step the scaler reads from now on is a filled one.
    wait_for(lambda: frozen_for_s() > 3.0, timeout_s=30, what="L frozen for 3 s")
    stale = names.SCALER_ERRORS + '{kind="source_stale"}'
    before = scaler.metric(stale)
    for _ in range(5):
        assert scaler.keda_poll(meta) == (4.0, 12.0, True)  # answered, never UNAVAILABLE
    assert scaler.metric(stale) >= before + 5
    # What the source saw (in-process, the same query): L's series counted frozen at the
    # latest step, and the steps filled past the allowed 1.5 s gone from the window (the
    # newest sample is over 3 s old: no step of the last 1.5 s is left).
    now_s = time.time()
    window = asyncio.run(observe_at(prometheus.url, parse_metadata(meta), now_s)).window
    assert any("of L's series had no new sample" in p.detail for p in window.partial), window
    assert window.inflight[-1].t_s < now_s - 1.5, window.inflight[-3:]


def test_arrivals_count_across_a_router_restart(prometheus_factory: PrometheusFactory) -> None:
    """The received-requests counter reads 100, then 130, then the router restarts and has
    taken 20 since: 50 arrivals, as Prometheus' increase() counts them (not 20 - 100)."""
    router = FakeRouter()
    try:
        router.received.inc(100)  # before the first scrape: 100 is the window's baseline
        prometheus = prometheus_factory(
            jobs={"router": [router.url.removeprefix("http://")]}, scrape_interval_s=SCRAPE_S
        )

        def reads(value: float) -> None:
            wait_for(lambda: prometheus_counter(prometheus) == value, timeout_s=30,
                     what=f"Prometheus to read {value}")  # fmt: skip

        reads(100.0)
        router.received.inc(30)
        reads(130.0)
        router.received.reset()  # the restart, and 20 requests since
        router.received.inc(20)
        router.inflight.set(20)  # a marker: a step with L = 20 is after the restart
        reads(20.0)
        spec = parse_metadata(
            {"policy": "qps", "timeScale": "0.1", "scaleDownWindowSeconds": "600"}
        )

        def arrivals() -> tuple[Sample, ...] | None:
            """The window's arrivals once its newest step (aligned down) is past the restart."""
            window = asyncio.run(observe_once(prometheus.url, spec)).window
            return window.arrivals_total if window.inflight[-1].value == 20.0 else None

        got = wait_for(arrivals, timeout_s=30, what="a window that ends after the restart")
    finally:
        router.close()
    assert got[-1].value - got[0].value == 50.0  # 30 before the restart, 20 after


def prometheus_counter(prometheus: PrometheusServer) -> float | None:
    query = urllib.parse.urlencode({"query": names.ROUTER_REQUESTS_RECEIVED})
    with urllib.request.urlopen(f"{prometheus.url}/api/v1/query?{query}", timeout=5) as resp:
        result = json.loads(resp.read())["data"]["result"]
    return float(result[0]["value"][1]) if result else None


async def observe_once(url: str, spec: ScalerSpec) -> Observed:
    """The Prometheus source in-process, as the scaler would call it for ``spec``."""
    async with aiohttp.ClientSession() as session:
        source = PrometheusSource(url, session, ScalerMetrics(CollectorRegistry()))
        try:
            return await source.observe(spec, time.time(), timeout_s=5.0)
        finally:
            await source.close()


def test_the_split_requests_answer_what_the_one_query_answers(
    router: FakeRouter, prometheus: PrometheusServer
) -> None:
    """The source asks for the range query as ``QUERY_REQUESTS`` concurrent requests
    (``RangeQuery.requests``); what it observes is what the whole ``or`` query's answer
    gives, step for step, on the same bounds (asked until the whole query answers alike
    before and after the split requests: no scrape landed in the window meanwhile)."""
    router.inflight.set(3)
    router.received.inc(7)
    wait_for(lambda: prometheus_l(prometheus) == 3.0, timeout_s=30, what="Prometheus to see 3")
    router.inflight.set(5)
    wait_for(lambda: prometheus_l(prometheus) == 5.0, timeout_s=30, what="Prometheus to see 5")
    spec = parse_metadata(dict(META))
    query = range_query(spec)
    assert len(query.requests) == QUERY_REQUESTS and " or ".join(query.requests) == query.expr

    def whole(now_s: float) -> Observed:
        start_s, end_s = query.bounds(now_s)
        params = {"query": query.expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}",
                  "step": f"{query.step_s:g}"}  # fmt: skip
        url = f"{prometheus.url}/api/v1/query_range?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as resp:
            return observed_from_matrix(json.loads(resp.read())["data"], query, start_s, end_s)

    def settled() -> tuple[Observed, Observed] | None:
        now_s = time.time()
        before = whole(now_s)
        if not {3.0, 5.0} <= {s.value for s in before.window.inflight}:
            return None  # the 5 is not in a step yet
        split = asyncio.run(observe_at(prometheus.url, spec, now_s))
        return (split, before) if whole(now_s) == before else None

    split, one = wait_for(settled, timeout_s=30, what="both levels, unchanged across the asks")
    assert split == one


async def observe_at(url: str, spec: ScalerSpec, now_s: float) -> Observed:
    async with aiohttp.ClientSession() as session:
        source = PrometheusSource(url, session, ScalerMetrics(CollectorRegistry()))
        try:
            return await source.observe(spec, now_s, timeout_s=5.0)
        finally:
            await source.close()
