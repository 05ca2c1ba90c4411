"""Per-endpoint counter series: kept while the endpoint is known, then for a grace period."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from inflight import names
from router.dispatch import Dispatcher
from router.metrics import NO_ENDPOINT, RETIRED_SERIES_KEEP_S, RouterMetrics
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
