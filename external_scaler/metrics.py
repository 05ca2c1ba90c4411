"""The scaler's own Prometheus metrics, on a registry passed in (a fresh one per app).

Names and label sets come from ``inflight.names`` (SCALER_*). ``metric_name`` is the
trigger's metric name (bounded by configuration); ``kind`` and ``direction`` are fixed sets.
The gauges labelled by ``metric_name`` lose that name's series when its trigger is gone
(:meth:`ScalerMetrics.forget`, called by the servicer at each scrape), so a deleted
ScaledObject leaves no frozen series behind; the counters keep their counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from inflight import names
from inflight.control.capacity import DIMENSIONS, Dimension
from inflight.control.policy import Decision

# Query latency buckets (seconds): Prometheus on loopback answers in milliseconds; KEDA's
# deadline is 3 s.
_QUERY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0)


# prometheus_client appends _total to counter names itself.
class ScalerMetrics:
    """Gauges of the last decision, counters of decisions, errors and calls, query latency."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._declare_decisions(registry)
        self._declare_health(registry)

    def _declare_decisions(self, registry: CollectorRegistry) -> None:
        """What each decision returned: value, target, count, saturation, holds."""
        label = ["metric_name"]
        self.value = Gauge(
            names.SCALER_METRIC_VALUE,
            "Metric value last returned to KEDA (requests in flight)",
            label,
            registry=registry,
        )
        self.target = Gauge(
            names.SCALER_METRIC_TARGET,
            "Per-replica target returned to KEDA (requests in flight)",
            label,
            registry=registry,
        )
        self.desired = Gauge(
            names.SCALER_DESIRED_REPLICAS,
            "Replicas the HPA derives: ceil(value / target), or the ready count while "
            "value / (target x ready) is within the HPA's tolerance",
            label,
            registry=registry,
        )
        self.saturation = Gauge(
            names.SCALER_SATURATION,
            "Latest L (the maximum over capacity dimensions: slots, KV tokens) / (slots x "
            "ready replicas); NaN when unknown",
            label,
            registry=registry,
        )
        self.active = Gauge(
            names.SCALER_ACTIVE,
            "1 when the trigger is active, 0 when idle",
            label,
            registry=registry,
        )
        self.scale_up_held = Gauge(
            names.SCALER_SCALE_UP_HELD,
            "1 while the latest decision held a scale-up that could not arrive in time "
            "(startupSeconds), 0 otherwise",
            label,
            registry=registry,
        )
        self.held_decisions = Counter(
            names.SCALER_HELD_DECISIONS.removesuffix("_total"),
            "GetMetrics decisions that held a scale-up that could not arrive in time",
            label,
            registry=registry,
        )
        self.decisions = Counter(
            names.SCALER_DECISIONS.removesuffix("_total"),
            "Decisions returned by GetMetrics, by direction against the ready replicas",
            ["metric_name", "direction"],
            registry=registry,
        )

    def _declare_health(self, registry: CollectorRegistry) -> None:
        """How the scaler fares: its source's query time, errors, dimensions and calls."""
        self.query_duration = Histogram(
            names.SCALER_QUERY_DURATION,
            "Time to fetch one window from the source (seconds)",
            buckets=_QUERY_BUCKETS_S,
            registry=registry,
        )
        self.errors = Counter(
            names.SCALER_ERRORS.removesuffix("_total"),
            "Errors by kind",
            ["kind"],
            registry=registry,
        )
        # Every kind exists at 0 from the start, so rate() and increase() see the first
        # error (a counter born at 1 reads as no increase) and dashboards list every kind.
        for kind in names.SCALER_ERROR_KINDS:
            self.errors.labels(kind)
        self.capacity_binding = Gauge(
            names.SCALER_CAPACITY_BINDING,
            "1 for the capacity dimension (requests, kv_tokens) that binds saturation over "
            "the scale-up window, 0 for the others",
            ["metric_name", "dimension"],
            registry=registry,
        )
        self.dimension_inflight = Gauge(
            names.SCALER_DIMENSION_INFLIGHT,
            "Mean L in each capacity dimension over the scale-up window: requests, L "
            "itself; kv_tokens, the L that fills the KV caches (the router's token demand, "
            "else vLLM's usage; the steps where it was measured); no series for a dimension "
            "not measured",
            ["metric_name", "dimension"],
            registry=registry,
        )
        self.grpc_requests = Counter(
            names.SCALER_GRPC_REQUESTS.removesuffix("_total"),
            "gRPC calls by method and status code",
            ["method", "code"],
            registry=registry,
        )

    def record_binding(self, metric_name: str, dimension: Dimension | None) -> None:
        """1 for the capacity dimension that binds, 0 for the others (none known: all 0)."""
        for each in DIMENSIONS:
            self.capacity_binding.labels(metric_name, each).set(1 if each == dimension else 0)

    def record_dimensions(self, metric_name: str, inflight: Mapping[Dimension, float]) -> None:
        """L in each measured dimension; a dimension not measured loses its series (absent,
        never 0: 0 would read as an idle dimension)."""
        for each in DIMENSIONS:
            if each in inflight:
                self.dimension_inflight.labels(metric_name, each).set(inflight[each])
            else:
                self.dimension_inflight.remove(metric_name, each)

    def forget(self, metric_name: str) -> None:
        """Remove every gauge series of ``metric_name`` (its trigger is gone)."""
        for gauge in (
            self.value,
            self.target,
            self.desired,
            self.saturation,
            self.active,
            self.scale_up_held,
        ):
            gauge.remove(metric_name)
        for each in DIMENSIONS:
            self.capacity_binding.remove(metric_name, each)
            self.dimension_inflight.remove(metric_name, each)

    def record(self, metric_name: str, decision: Decision, *, count: bool) -> None:
        """Set the gauges from ``decision``; count it when ``count`` (GetMetrics only)."""
        self.value.labels(metric_name).set(decision.value)
        self.target.labels(metric_name).set(decision.target)
        self.desired.labels(metric_name).set(decision.desired_replicas)
        self.saturation.labels(metric_name).set(
            float("nan") if decision.saturation is None else decision.saturation
        )
        self.active.labels(metric_name).set(1 if decision.active else 0)
        self.scale_up_held.labels(metric_name).set(1 if decision.held_scale_up else 0)
        if count:
            self.decisions.labels(metric_name, decision.direction).inc()
            held = self.held_decisions.labels(metric_name)  # exists at 0 from the first
            if decision.held_scale_up:
                held.inc()
            # Answered, but on a window that may understate L (it raises or keeps the
            # count, never lowers it): counted by the kind of fault the source found.
            for kind in sorted({p.kind for p in decision.partial}):
                self.errors.labels(kind).inc()
