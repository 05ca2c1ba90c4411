"""KEDA's Prometheus scaler, as a :class:`inflight.planes.autoscaler.Scaler`: the query
through the injected reader, around the pure :mod:`inflight.control.peers.prom_trigger`
(where the citations are).

The query itself is the injected ``read(Signal)``: it raises
:class:`~inflight.planes.peers.signals.NoData` for an empty result (handed to the decider
as ``None``) and :class:`~inflight.planes.scaler_client.ScalerUnavailable` for a failure
(passed on: KEDA gives the HPA no metric). The KEDA polling and HPA arithmetic around it
are the existing :mod:`inflight.planes.autoscaler`, :mod:`inflight.control.keda` and
:mod:`inflight.control.hpa`.
"""

from __future__ import annotations

from inflight.control.peers import prom_trigger
from inflight.control.peers.prom_trigger import PromTriggerSpec, TriggerError, TriggerResult
from inflight.planes.peers.signals import NoData, Reader
from inflight.planes.scaler_client import MetricSpec, ScalerUnavailable


class PromTrigger:
    """A KEDA Prometheus trigger over ``read``; the HPA loop calls it as it calls the
    external scaler (metric_spec → metric_value, is_active)."""

    def __init__(self, spec: PromTriggerSpec, read: Reader) -> None:
        self.spec = spec
        self.read = read

    def query(self) -> TriggerResult:
        """``ExecutePromQuery`` then ``GetMetricsAndActivity``; ScalerUnavailable when the
        read failed or the decider found the answer unusable."""
        try:
            answer: float | None = self.read(self.spec.signal)
            detail = ""
        except NoData as exc:
            answer, detail = None, str(exc)
        result = prom_trigger.metric_and_activity(self.spec, answer, detail)
        if isinstance(result, TriggerError):
            raise ScalerUnavailable(result.message)
        return result

    def metric_spec(self) -> MetricSpec:
        return MetricSpec(self.spec.metric_name, self.spec.threshold)

    def metric_value(self, metric_name: str) -> float:
        if metric_name != self.spec.metric_name:
            raise ScalerUnavailable(
                f"no metric {metric_name!r} on this trigger ({self.spec.metric_name!r})"
            )
        return self.query().metric_value

    def is_active(self) -> bool:
        return self.query().active
