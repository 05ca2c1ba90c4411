"""The router's hot-path counters and histograms, read back from the /metrics text, and
per-endpoint counter series: kept while the endpoint is known, then for a grace period.
"""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from router.dispatch import Dispatcher
from router.metrics import NO_ENDPOINT, RETIRED_SERIES_KEEP_S, RouterMetrics, finite
from router.pool import Pool

A, B = "http://127.0.0.1:9001", "http://127.0.0.1:9002"
LA, LB = "127.0.0.1:9001", "127.0.0.1:9002"


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def two_endpoints() -> tuple[Pool, RouterMetrics, CollectorRegistry, Clock]:
    pool = Pool(4)
    pool.set_endpoints([A, B])
    registry = CollectorRegistry()
    clock = Clock()
    return pool, RouterMetrics(registry, Dispatcher(pool), clock=clock), registry, clock


def requests(registry: CollectorRegistry, label: str, code: str = "200") -> float | None:
    return registry.get_sample_value(names.ROUTER_REQUESTS, {"endpoint": label, "code": code})


def errors(registry: CollectorRegistry, label: str) -> float | None:
    return registry.get_sample_value(
        names.ROUTER_UPSTREAM_ERRORS, {"endpoint": label, "reason": "reset"}
    )


def test_a_removed_endpoints_series_go_after_the_grace_period() -> None:
    """With pods coming and going, series for every address ever seen would grow for as
    long as the router runs; a drained endpoint's final counts stay visible for
    RETIRED_SERIES_KEEP_S (every scraper sees them), then its series are removed.
    """
    pool, metrics, registry, clock = two_endpoints()
    for label in (LA, LB, NO_ENDPOINT):
        metrics.finished(label, 200)
    metrics.upstream_error(LA, "reset")
    metrics.prune()
    pool.set_endpoints([B])  # A is idle: forgotten at once
    clock.now_s = 100.0
    metrics.prune()  # first seen gone at t = 100
    clock.now_s = 100.0 + RETIRED_SERIES_KEEP_S - 1
    metrics.prune()
    assert requests(registry, LA) == 1.0 and errors(registry, LA) == 1.0
    clock.now_s = 100.0 + RETIRED_SERIES_KEEP_S
    metrics.prune()
    assert requests(registry, LA) is None and errors(registry, LA) is None
    assert requests(registry, LB) == 1.0  # known: kept
    assert requests(registry, NO_ENDPOINT) == 1.0  # not an endpoint: kept
    pool.set_endpoints([A, B])  # the address is reused: counted afresh
    metrics.finished(LA, 200)
    assert requests(registry, LA) == 1.0


def test_an_endpoint_back_within_the_grace_period_keeps_its_series() -> None:
    pool, metrics, registry, clock = two_endpoints()
    metrics.finished(LA, 200)
    pool.set_endpoints([B])
    metrics.prune()
    pool.set_endpoints([A, B])
    clock.now_s = 10 * RETIRED_SERIES_KEEP_S
    metrics.prune()
    pool.set_endpoints([B])
    metrics.prune()  # gone again: the grace period starts over
    assert requests(registry, LA) == 1.0


# What /metrics served when these were prometheus_client Counters and Histograms: the
# text must not change (dashboards, recording rules and the scaler read it).
LE = [
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1.0", "2.5",
    "5.0", "10.0", "20.0", "30.0", "60.0", "120.0", "300.0", "600.0", "+Inf",
]  # fmt: skip
HELP = {
    "router_requests_received": "Requests that arrived at the router (rate() of it is λ).",
    "router_requests": "Finished requests by endpoint and HTTP status code.",
    "router_request_duration_seconds": (
        "Arrival at the router to last byte sent, router queueing included (W)."
    ),
    "router_time_to_first_byte_seconds": "Arrival at the router to first response byte sent.",
    "router_upstream_errors": (
        "Upstream failures: connect (refused), reset, timeout, broken (after bytes)."
    ),
    "router_retries": "Requests re-dispatched because the first endpoint refused or reset them.",
}


def scrape(registry: CollectorRegistry) -> dict[str, Metric]:
    """The families of the /metrics text, by the name the text parser gives them."""
    text = generate_latest(registry).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def samples(family: Metric, suffix: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for s in family.samples
        if s.name == family.name + suffix
    }


def buckets(family: Metric) -> dict[str, float]:
    return {s.labels["le"]: s.value for s in family.samples if s.name == family.name + "_bucket"}


class Reference:
    """The hot-path metrics as the router had them: prometheus_client Counters and
    Histograms (names without _total, which prometheus_client appends).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, HELP[name], labels, registry=registry)

        def histogram(name: str) -> Histogram:
            bounds = [float(le) for le in LE[:-1]]
            return Histogram(name, HELP[name], buckets=bounds, registry=registry)

        self.received = counter("router_requests_received")
        self._requests = counter("router_requests", ("endpoint", "code"))
        self.duration = histogram("router_request_duration_seconds")
        self.ttfb = histogram("router_time_to_first_byte_seconds")
        self._errors = counter("router_upstream_errors", ("endpoint", "reason"))
        self.retries = counter("router_retries")

    def finished(self, endpoint: str, code: int) -> None:
        self._requests.labels(endpoint, str(code)).inc()

    def upstream_error(self, endpoint: str, reason: str) -> None:
        self._errors.labels(endpoint, reason).inc()


def some_traffic(m: RouterMetrics | Reference) -> None:
    for _ in range(3):
        m.received.inc()
    m.retries.inc()
    for v in (0.0, 0.001, 0.0011, 0.5, 1.0, 7.0, 600.0, 601.0):
        m.duration.observe(v)
    for v in (0.004, 0.005, 0.3):
        m.ttfb.observe(v)
    m.finished(LA, 200)
    m.finished(LA, 200)
    m.finished(LA, 502)
    m.finished(NO_ENDPOINT, 503)
    m.upstream_error(LB, "reset")
    m.upstream_error(LB, "timeout")
    m.upstream_error(LB, "timeout")


def test_the_text_is_what_prometheus_clients_counters_and_histograms_wrote() -> None:
    """The same calls on prometheus_client's own Counter/Histogram serve the same
    families, HELP, samples (in order), labels and values, ``_created`` series included;
    only the ``_created`` timestamps differ.
    """
    _, metrics, registry, _ = two_endpoints()
    ref_registry = CollectorRegistry()
    some_traffic(metrics)
    some_traffic(Reference(ref_registry))

    def comparable(families: dict[str, Metric]) -> list[tuple[object, ...]]:
        out: list[tuple[object, ...]] = []
        for f in families.values():
            rows = [
                (s.name, s.labels, None if s.name.endswith("_created") else s.value)
                for s in f.samples
            ]
            out.append((f.name, f.type, f.documentation, rows))
        return out

    ours = {k: v for k, v in scrape(registry).items() if k.removesuffix("_created") in HELP}
    assert len(ours) == 2 * len(HELP)  # each family, and its _created
    assert comparable(ours) == comparable(scrape(ref_registry))


def test_every_router_metric_is_served_with_its_type_help_and_labels() -> None:
    _, metrics, registry, _ = two_endpoints()
    some_traffic(metrics)
    families = scrape(registry)
    for name, kind in names.ROUTER_METRICS.items():
        family = families[name.removesuffix("_total")]
        assert family.type == kind, name
        assert family.samples, name
    label_names = {
        name: {tuple(sorted(s.labels)) for s in families[name].samples}
        for name in HELP
    }  # fmt: skip
    assert label_names == {
        "router_requests_received": {()},
        "router_requests": {("code", "endpoint")},
        "router_request_duration_seconds": {("le",), ()},
        "router_time_to_first_byte_seconds": {("le",), ()},
        "router_upstream_errors": {("endpoint", "reason")},
        "router_retries": {()},
    }
    for name, text in HELP.items():
        assert families[name].documentation == text, name
    # Counters are served as <name>_total; histograms as _bucket, _count and _sum.
    assert {s.name for s in families["router_retries"].samples} == {"router_retries_total"}
    assert {s.name for s in families["router_time_to_first_byte_seconds"].samples} == {
        "router_time_to_first_byte_seconds" + sfx for sfx in ("_bucket", "_count", "_sum")
    }


def test_counts_by_counter_and_by_label() -> None:
    _, metrics, registry, _ = two_endpoints()
    some_traffic(metrics)
    families = scrape(registry)
    assert samples(families["router_requests_received"], "_total") == {(): 3.0}
    assert samples(families["router_retries"], "_total") == {(): 1.0}
    assert samples(families["router_requests"], "_total") == {
        (("code", "200"), ("endpoint", LA)): 2.0,
        (("code", "502"), ("endpoint", LA)): 1.0,
        (("code", "503"), ("endpoint", NO_ENDPOINT)): 1.0,
    }
    assert samples(families["router_upstream_errors"], "_total") == {
        (("endpoint", LB), ("reason", "reset")): 1.0,
        (("endpoint", LB), ("reason", "timeout")): 2.0,
    }
    # The hot path's readers see the same numbers.
    assert requests(registry, LA, "502") == 1.0 and errors(registry, LB) == 1.0


def test_histogram_buckets_are_cumulative_and_a_bound_counts_in_its_own_bucket() -> None:
    _, metrics, registry, _ = two_endpoints()
    some_traffic(metrics)
    families = scrape(registry)
    duration = families[names.ROUTER_REQUEST_DURATION]
    # 0.0 and 0.001 (equal to the first bound) are in le="0.001"; 0.0011 is not; 1.0 is
    # in le="1.0"; 600.0 in le="600.0"; 601.0 only in +Inf.
    cumulative = [2, 3, 3, 3, 3, 3, 3, 3, 4, 5, 5, 5, 6, 6, 6, 6, 6, 6, 7, 8]
    expected = {le: float(n) for le, n in zip(LE, cumulative, strict=True)}
    assert list(buckets(duration)) == LE  # every bound, in order, +Inf last
    assert buckets(duration) == expected
    assert samples(duration, "_count") == {(): 8.0}
    assert samples(duration, "_sum")[()] == pytest.approx(0.001 + 0.0011 + 0.5 + 1 + 7 + 1201)
    ttfb = families[names.ROUTER_TTFB]
    assert buckets(ttfb) == {
        le: 0.0 if i < 2 else 2.0 if i < 8 else 3.0 for i, le in enumerate(LE)
    }  # 0.004 and 0.005 (a bound) by le="0.005", 0.3 by le="0.5"
    assert samples(ttfb, "_count") == {(): 3.0}
    assert samples(ttfb, "_sum")[()] == pytest.approx(0.309)


def test_before_any_request() -> None:
    _, _, registry, _ = two_endpoints()
    families = scrape(registry)
    assert samples(families["router_requests_received"], "_total") == {(): 0.0}
    assert samples(families["router_retries"], "_total") == {(): 0.0}
    for name in ("router_requests", "router_upstream_errors"):
        assert families[name].type == "counter" and not families[name].samples
    for name in (names.ROUTER_REQUEST_DURATION, names.ROUTER_TTFB):
        assert buckets(families[name]) == dict.fromkeys(LE, 0.0)
        assert samples(families[name], "_count") == {(): 0.0}
        assert samples(families[name], "_sum") == {(): 0.0}


def test_created_timestamps_per_series() -> None:
    before = time.time()
    _, metrics, registry, _ = two_endpoints()
    some_traffic(metrics)
    after = time.time()
    families = scrape(registry)
    for name in HELP:
        total = "_total" if families[name].type == "counter" else "_count"
        created = samples(families[name + "_created"], "")
        assert set(created) == set(samples(families[name], total)), name
        assert all(before <= t <= after for t in created.values()), name


def test_counters_only_go_up_and_one_registry_holds_one_router() -> None:
    _, metrics, registry, _ = two_endpoints()
    with pytest.raises(ValueError):
        metrics.received.inc(-1)
    metrics.received.inc(2.5)
    assert registry.get_sample_value(names.ROUTER_REQUESTS_RECEIVED) == 2.5
    with pytest.raises(ValueError):
        RouterMetrics(registry, Dispatcher(Pool(4)))


def test_a_retired_endpoints_series_leave_the_text() -> None:
    pool, metrics, registry, clock = two_endpoints()
    some_traffic(metrics)
    metrics.finished(LB, 200)
    metrics.upstream_error(LA, "connect")
    pool.set_endpoints([A])  # B goes
    metrics.prune()
    clock.now_s = RETIRED_SERIES_KEEP_S
    metrics.prune()
    families = scrape(registry)
    for name in ("router_requests", "router_upstream_errors"):
        for suffix, family in (("_total", families[name]), ("", families[name + "_created"])):
            served = {dict(k)["endpoint"] for k in samples(family, suffix)}
            assert LB not in served and LA in served, (name, suffix)
    assert samples(families["router_upstream_errors"], "_total") == {
        (("endpoint", LA), ("reason", "connect")): 1.0
    }
    # Unlabelled counters and histograms are untouched.
    assert samples(families["router_requests_received"], "_total") == {(): 3.0}
    assert samples(families[names.ROUTER_REQUEST_DURATION], "_count") == {(): 8.0}


def test_no_demand_a_client_sends_makes_a_gauge_non_finite_or_the_scrape_fail() -> None:
    assert finite(10**400) == 2.0**53 and finite(float("inf")) == 2.0**53
    assert finite(float("nan")) == 0.0
    d = Dispatcher(Pool(4), hold_when_full=True, kv_tokens=100)
    d.queued_tokens = 10**400  # as a held 400-digit max_tokens would make it, unclamped
    registry = CollectorRegistry()
    RouterMetrics(registry, d)
    families = scrape(registry)
    (sample,) = families[names.ROUTER_QUEUED_TOKENS].samples
    assert sample.value == 2.0**53
