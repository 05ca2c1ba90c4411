"""The external scaler in virtual time: KEDA's three calls answered by the scaler's own code.

Live, KEDA (``inflight.planes.scaler_client``) calls the scaler over gRPC; its servicer parses
the trigger metadata (``external_scaler.metadata.parse_metadata``), asks Prometheus for the
range query (``external_scaler.sources.promql.range_query``, bounds aligned to the step by
``RangeQuery.bounds``), builds the window and vLLM's KV series from its answer
(``external_scaler.sources.prometheus.observed_from_matrix``) and decides
(``external_scaler.decision.costed_decision``: saturation as the maximum over request slots and KV
tokens under ``capacity`` ``auto``, then ``inflight.control.policy.evaluate``) at the
aligned end. :class:`SimScaler` does exactly that on the simulated scrapes
(``inflight.sim.scrapes``, whose replicas expose their engines' KV state and whose router
its token demand), and maps a refusal (SourceError, NoSamples: gRPC UNAVAILABLE live) to
``ScalerUnavailable``, as the gRPC client does, so ``inflight.planes.autoscaler.Autoscaler``
sees the same answers it sees live.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from external_scaler.decision import costed_decision
from external_scaler.errors import SourceError
from external_scaler.metadata import ScalerSpec, parse_metadata
from external_scaler.sources.prometheus import observed_from_matrix
from external_scaler.sources.promql import range_query
from inflight.control.capacity import Dimension
from inflight.control.policy import Decision, NoSamples
from inflight.planes.scaler_client import MetricSpec, ScalerUnavailable
from inflight.sim.scrapes import Scrapes


@dataclass(frozen=True)
class ScalerAnswer:
    """One fresh decision as the scaler's log states it live: at the range query's aligned
    end ``t``, the ``value`` KEDA reads, the count the HPA would derive and the policy's
    ``reason`` (the floor, the anticipation, a held late scale-up, ...), which the
    autoscaler's ``decisions.jsonl`` does not carry (it records the HPA's)."""

    t: float
    value: float
    desired_replicas: int
    ready_replicas: int | None
    reason: str


class SimScaler:
    """``inflight.planes.autoscaler.Scaler`` over the simulated Prometheus, one trigger."""

    def __init__(
        self, metadata: Mapping[str, str], scrapes: Scrapes, clock: Callable[[], float]
    ) -> None:
        # The simulator takes the settings tried and not adopted (the scaler refuses them).
        self.spec: ScalerSpec = parse_metadata(metadata, experimental=True)
        self.query = range_query(self.spec)
        self.scrapes = scrapes
        self.clock = clock
        # Same aligned end, same samples (scrapes only add samples after now): same answer,
        # as the live source's cache and step alignment make it.
        self._cached: tuple[float, Decision | str] | None = None
        self.decisions: list[Decision] = []
        self.bindings: list[Dimension] = []  # the dimension that bound, per decision
        self.answers: list[ScalerAnswer] = []  # per decision, for scaler.jsonl

    def answer(self) -> Decision:
        start_s, end_s = self.query.bounds(self.clock())
        if self._cached is not None and self._cached[0] == end_s:
            answer = self._cached[1]
        else:
            try:
                data = self.scrapes.matrix(self.query, start_s, end_s)
                decided = costed_decision(
                    self.spec, observed_from_matrix(data, self.query, start_s, end_s)
                )
                answer = decided.decision
                self.decisions.append(answer)
                self.bindings.append(decided.dimension)
                self.answers.append(
                    ScalerAnswer(
                        end_s,
                        answer.value,
                        answer.desired_replicas,
                        answer.ready_replicas,
                        answer.reason,
                    )
                )
            except (SourceError, NoSamples) as exc:
                answer = f"StatusCode.UNAVAILABLE: {exc}"
            self._cached = (end_s, answer)
        if isinstance(answer, str):
            raise ScalerUnavailable(answer)
        return answer

    def metric_spec(self) -> MetricSpec:
        return MetricSpec(self.spec.metric_name, self.spec.policy.target)

    def metric_value(self, metric_name: str) -> float:
        return self.answer().value

    def is_active(self) -> bool:
        return self.answer().active
