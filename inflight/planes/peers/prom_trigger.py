"""KEDA's Prometheus scaler, as a :class:`inflight.planes.autoscaler.Scaler`.

From kedacore/keda ``pkg/scalers/prometheus_scaler.go`` (commit 8b4f083c, v2.20.1-117):

* ``GetMetricSpecForScaling``: one external metric whose target is ``threshold``, of
  ``metricType`` AverageValue by default (the HPA divides the value by the replicas);
* ``ExecutePromQuery``: an instant query; an empty result (or an empty value list, NaN,
  ±Inf) is **0** while ``ignoreNullValues`` is true (its default), an error otherwise;
  more than one series is an error; a failed request is an error (KEDA then gives the HPA
  no metric, and nothing scales);
* ``GetMetricsAndActivity``: the value, handed over in milli-units
  (``GenerateMetricInMili``: truncated to 0.001), and ``active = value >
  activationThreshold`` (``activationThreshold`` defaults to 0).

The query itself is the injected ``read(Signal)``: it raises
:class:`~inflight.planes.peers.signals.NoData` for an empty result and
:class:`~inflight.planes.scaler_client.ScalerUnavailable` for a failure. The KEDA polling
and HPA arithmetic around it are the existing :mod:`inflight.planes.autoscaler`,
:mod:`inflight.control.keda` and :mod:`inflight.control.hpa`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inflight.planes.peers.signals import NoData, Reader, Signal
from inflight.planes.scaler_client import MetricSpec, ScalerUnavailable


@dataclass(frozen=True)
class PromTriggerSpec:
    """One ``type: prometheus`` trigger of a ScaledObject (``threshold`` in the signal's
    own units; the live stack's rates are wall requests/s, so a rate threshold is given
    here already divided by the time-scale)."""

    metric_name: str
    signal: Signal
    threshold: float
    activation_threshold: float = 0.0
    ignore_null_values: bool = True

    def __post_init__(self) -> None:
        if not self.threshold > 0:
            raise ValueError(f"prometheus trigger threshold must be > 0, got {self.threshold}")
        if self.activation_threshold < 0:
            raise ValueError(
                f"prometheus trigger activationThreshold must be >= 0, "
                f"got {self.activation_threshold}"
            )


def in_milli(value: float) -> float:
    """KEDA's ``GenerateMetricInMili``: ``int64(value × 1000)`` milli-units.

    >>> in_milli(2.71828)
    2.718
    >>> in_milli(-0.0004)
    0.0
    """
    return math.trunc(value * 1000) / 1000 + 0.0


class PromTrigger:
    """A KEDA Prometheus trigger over ``read``; the HPA loop calls it as it calls the
    external scaler (metric_spec → metric_value, is_active)."""

    def __init__(self, spec: PromTriggerSpec, read: Reader) -> None:
        self.spec = spec
        self.read = read

    def query(self) -> float:
        """``ExecutePromQuery``: the value, or ScalerUnavailable."""
        try:
            value = self.read(self.spec.signal)
        except NoData as exc:
            if self.spec.ignore_null_values:
                return 0.0
            raise ScalerUnavailable(
                f"prometheus trigger {self.spec.metric_name}: the result is empty ({exc})"
            ) from exc
        if math.isnan(value) or math.isinf(value):
            if self.spec.ignore_null_values:
                return 0.0
            raise ScalerUnavailable(
                f"prometheus trigger {self.spec.metric_name}: query returns {value}"
            )
        return value

    def metric_spec(self) -> MetricSpec:
        return MetricSpec(self.spec.metric_name, self.spec.threshold)

    def metric_value(self, metric_name: str) -> float:
        if metric_name != self.spec.metric_name:
            raise ScalerUnavailable(
                f"no metric {metric_name!r} on this trigger ({self.spec.metric_name!r})"
            )
        return in_milli(self.query())

    def is_active(self) -> bool:
        return self.query() > self.spec.activation_threshold
