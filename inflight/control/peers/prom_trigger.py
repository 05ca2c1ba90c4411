"""KEDA's Prometheus scaler, pure: what it makes of a query's answer.

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

The scaler keeps no state: :func:`metric_and_activity` is ``GetMetricsAndActivity`` on one answer
(``None``: the result was empty). The state and the replica arithmetic are the HPA's and
KEDA's (:mod:`inflight.control.hpa`, :mod:`inflight.control.keda`), driven by
:mod:`inflight.planes.autoscaler`; the query and the failed requests are the loop's
(:class:`inflight.planes.peers.prom_trigger.PromTrigger`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from inflight.control.peers.base import Signal


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


@dataclass(frozen=True)
class TriggerResult:
    """``GetMetricsAndActivity``'s answer: the query's value as KEDA uses it, the metric
    handed to the HPA (milli-units) and whether the trigger is active."""

    value: float
    metric_value: float
    active: bool


@dataclass(frozen=True)
class TriggerError:
    """The answer is unusable (``ignoreNullValues`` false): KEDA hands the HPA no metric."""

    message: str


def metric_and_activity(
    spec: PromTriggerSpec, answer: float | None, detail: str = ""
) -> TriggerResult | TriggerError:
    """What the scaler makes of the query's ``answer`` (``None``: an empty result, with
    the reader's ``detail``).

    >>> spec = PromTriggerSpec("vllm-waiting", Signal.VLLM_WAITING, threshold=5.0)
    >>> metric_and_activity(spec, 7.0001)
    TriggerResult(value=7.0001, metric_value=7.0, active=True)
    >>> metric_and_activity(spec, None), metric_and_activity(spec, float("nan"))
    (TriggerResult(value=0.0, metric_value=0.0, active=False), \
TriggerResult(value=0.0, metric_value=0.0, active=False))
    """
    name = spec.metric_name
    if answer is None:
        if not spec.ignore_null_values:
            return TriggerError(f"prometheus trigger {name}: the result is empty ({detail})")
        answer = 0.0
    elif math.isnan(answer) or math.isinf(answer):
        if not spec.ignore_null_values:
            return TriggerError(f"prometheus trigger {name}: query returns {answer}")
        answer = 0.0
    return TriggerResult(answer, in_milli(answer), answer > spec.activation_threshold)
