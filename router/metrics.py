"""The router's Prometheus metrics, on a registry passed in (never the global one).

Gauges are read from the pool and dispatcher at scrape time by a Collector, so they can
never drift from the counts that drive dispatch, and a drained endpoint's series
disappears when the pool forgets it. Counters and histograms are updated on the hot path;
a forgotten endpoint's counter series go ``RETIRED_SERIES_KEEP_S`` later (``prune``).
Names come from :mod:`inflight.names`; types and labels follow DESIGN.md's table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from inflight import names
from router.dispatch import Dispatcher
from router.pool import DRAINING, READY, UNHEALTHY

# Seconds. LLM requests run from milliseconds (cached, short) to minutes (long outputs
# behind a queue); the low buckets let the benchmark see the proxy's own overhead.
DURATION_BUCKETS_S = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip

# The ``endpoint`` label for requests that never reached an endpoint (413, 503, 504 at
# the router): a fixed value, never one taken from a request.
NO_ENDPOINT = "none"

# Seconds a removed, drained endpoint's counter series (requests, upstream errors) stay
# exported, so every scraper sees their final values; then they are removed. Without this,
# with pods coming and going, the series of every address ever seen would pile up for as
# long as the router runs.
RETIRED_SERIES_KEEP_S = 600.0


class _StateCollector(Collector):
    def __init__(self, dispatcher: Dispatcher) -> None:
        self._d = dispatcher

    def collect(self) -> Iterator[Metric]:
        d = self._d
        yield GaugeMetricFamily(
            names.ROUTER_INFLIGHT,
            "Requests accepted and not finished (L), router-held ones included.",
            value=d.inflight,
        )
        yield GaugeMetricFamily(
            names.ROUTER_QUEUED,
            "Requests held in the router's queue, not yet dispatched.",
            value=d.queued,
        )
        per = GaugeMetricFamily(
            names.ROUTER_ENDPOINT_INFLIGHT,
            "Requests dispatched to this endpoint and not finished.",
            labels=["endpoint"],
        )
        for view in d.pool.snapshot():
            per.add_metric([view.label], view.inflight)
        yield per
        states = GaugeMetricFamily(
            names.ROUTER_ENDPOINTS, "Endpoints the router knows, by state.", labels=["state"]
        )
        counts = d.pool.count_by_state()
        for state in (READY, DRAINING, UNHEALTHY):
            states.add_metric([state], counts[state])
        yield states
        yield GaugeMetricFamily(
            names.ROUTER_SLOTS_PER_ENDPOINT,
            "Configured slots per replica (vLLM's --max-num-seqs).",
            value=d.pool.slots,
        )


class RouterMetrics:
    """Every router metric, registered on ``registry``."""

    def __init__(
        self,
        registry: CollectorRegistry,
        dispatcher: Dispatcher,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self._pool = dispatcher.pool
        self._clock = clock
        registry.register(_StateCollector(dispatcher))
        # prometheus_client appends _total to counter names itself.
        self.received = Counter(
            names.ROUTER_REQUESTS_RECEIVED.removesuffix("_total"),
            "Requests that arrived at the router (rate() of it is λ).",
            registry=registry,
        )
        self.requests = Counter(
            names.ROUTER_REQUESTS.removesuffix("_total"),
            "Finished requests by endpoint and HTTP status code.",
            ["endpoint", "code"],
            registry=registry,
        )
        self.duration = Histogram(
            names.ROUTER_REQUEST_DURATION,
            "Arrival at the router to last byte sent, router queueing included (W).",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.ttfb = Histogram(
            names.ROUTER_TTFB,
            "Arrival at the router to first response byte sent.",
            buckets=DURATION_BUCKETS_S,
            registry=registry,
        )
        self.upstream_errors = Counter(
            names.ROUTER_UPSTREAM_ERRORS.removesuffix("_total"),
            "Upstream failures: connect (refused), reset, timeout, broken (after bytes).",
            ["endpoint", "reason"],
            registry=registry,
        )
        self.retries = Counter(
            names.ROUTER_RETRIES.removesuffix("_total"),
            "Requests re-dispatched because the first endpoint refused or reset them.",
            registry=registry,
        )
        # Labelled children by endpoint label, then by (counter, other label value):
        # cached, so there is no label lookup per request, and prunable per endpoint.
        self._children: dict[str, dict[tuple[Counter, str], Counter]] = {}
        self._gone_since_s: dict[str, float] = {}

    def finished(self, endpoint: str, code: int) -> None:
        """Count a finished request."""
        self._child(self.requests, endpoint, str(code)).inc()

    def upstream_error(self, endpoint: str, reason: str) -> None:
        self._child(self.upstream_errors, endpoint, reason).inc()

    def _child(self, counter: Counter, endpoint: str, other: str) -> Counter:
        children = self._children.get(endpoint)
        if children is None:
            children = self._children[endpoint] = {}
        child = children.get((counter, other))
        if child is None:
            child = children[(counter, other)] = counter.labels(endpoint, other)
        return child

    def prune(self) -> None:
        """Remove the series of endpoints gone for ``RETIRED_SERIES_KEEP_S`` (call it at
        each scrape: an endpoint is first seen gone then).
        """
        known = {view.label for view in self._pool.snapshot()}
        known.add(NO_ENDPOINT)
        now_s = self._clock()
        for endpoint in list(self._children):
            if endpoint in known:
                self._gone_since_s.pop(endpoint, None)
                continue
            since_s = self._gone_since_s.setdefault(endpoint, now_s)
            if now_s - since_s >= RETIRED_SERIES_KEEP_S:
                for counter, other in self._children.pop(endpoint):
                    counter.remove(endpoint, other)
                del self._gone_since_s[endpoint]
