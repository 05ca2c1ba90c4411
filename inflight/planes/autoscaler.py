"""The local KEDA + HPA loop: the imperative shell around :mod:`inflight.control.hpa` and
:mod:`inflight.control.keda`.

Two clocks, as on a cluster:

* every ``hpa_sync_s`` (the HPA's 15 s sync period × time-scale) the HPA reads the
  metric through KEDA — GetMetricSpec → GetMetrics — and applies its arithmetic;
* every ``polling_interval_s`` (KEDA's pollingInterval, 30 s × time-scale) KEDA calls
  GetMetricSpec → GetMetrics → IsActive and applies its zero rules (scale to zero after
  the cooldown, from zero when active);
* a ``true`` pushed on StreamIsActive (:meth:`Autoscaler.activate`, from any thread)
  scales from zero at the next tick.

Both clocks keep their phase from :meth:`Autoscaler.start`: a sync that ran a tick late
does not push the next one back, and a stall longer than a period runs one sync, not a
burst (:func:`inflight.control.periodic.next_due`, which cites what the HPA and KEDA do).

A failed call changes nothing (no metric, no scaling: KEDA without a fallback behaves so),
and says why in the log and in decisions.jsonl.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from inflight.control.hpa import HpaSpec, HpaState, hpa_step
from inflight.control.keda import KedaSpec, keda_step
from inflight.control.periodic import next_due
from inflight.planes.scaler_client import MetricSpec, ScalerUnavailable
from inflight.statedir import DecisionRecord

log = logging.getLogger("inflight.up.autoscaler")


class Scaler(Protocol):
    def metric_spec(self) -> MetricSpec: ...
    def metric_value(self, metric_name: str) -> float: ...
    def is_active(self) -> bool: ...


@dataclass(frozen=True)
class Observation:
    """What the router says now: L (None if unknown) and its ready endpoints."""

    inflight: float | None
    ready: int
    slots_per_endpoint: int


@dataclass(frozen=True)
class AutoscaleConfig:
    hpa: HpaSpec
    keda: KedaSpec
    hpa_sync_s: float
    polling_interval_s: float

    def __post_init__(self) -> None:
        if self.hpa_sync_s <= 0:
            raise ValueError(f"HPA sync period must be > 0 s, got {self.hpa_sync_s}")
        if self.polling_interval_s <= 0:
            raise ValueError(f"--polling-interval-s must be > 0, got {self.polling_interval_s}")


class Autoscaler:
    """Drives ``set_replicas`` from the scaler's answers. Call :meth:`tick` in a loop."""

    def __init__(
        self,
        scaler: Scaler,
        config: AutoscaleConfig,
        get_replicas: Callable[[], int],
        set_replicas: Callable[[int], None],
        observe: Callable[[], Observation],
        record: Callable[[DecisionRecord], None],
        wall_clock: Callable[[], float],
    ) -> None:
        self.scaler = scaler
        self.config = config
        self.get_replicas = get_replicas
        self.set_replicas = set_replicas
        self.observe = observe
        self.record = record
        self.wall_clock = wall_clock
        self.hpa_state = HpaState()
        self.last_active_s = 0.0
        self.next_hpa_s = 0.0
        self.next_keda_s = 0.0
        self._pushed = threading.Event()

    def start(self, now_s: float) -> None:
        """Begin at ``now_s``: the cooldown counts from here (see inflight.control.keda)."""
        self.last_active_s = now_s
        self.next_hpa_s = now_s + self.config.hpa_sync_s
        self.next_keda_s = now_s + self.config.polling_interval_s

    def activate(self) -> None:
        """StreamIsActive pushed ``true`` (thread-safe)."""
        self._pushed.set()

    def tick(self, now_s: float) -> bool:
        """Run what is due at ``now_s``; True when a poll or sync happened."""
        polled = False
        if self._pushed.is_set():
            self._pushed.clear()
            self._keda(now_s, active=True, why="StreamIsActive pushed true")
            polled = True
        # Each clock is scheduled from its due time, not from this tick (which may come up to
        # a tick late): the HPA's per-key requeue and KEDA's polling timer fire on time.
        if now_s >= self.next_keda_s:
            self.next_keda_s = next_due(self.next_keda_s, self.config.polling_interval_s, now_s)
            self._keda_poll(now_s)
            polled = True
        if now_s >= self.next_hpa_s:
            self.next_hpa_s = next_due(self.next_hpa_s, self.config.hpa_sync_s, now_s)
            self._hpa_sync(now_s)
            polled = True
        return polled

    def _read_metric(self) -> tuple[MetricSpec, float]:
        spec = self.scaler.metric_spec()
        return spec, self.scaler.metric_value(spec.metric_name)

    def _keda_poll(self, now_s: float) -> None:
        try:
            self._read_metric()
            active = self.scaler.is_active()
        except ScalerUnavailable as exc:
            log.warning("KEDA poll: %s; replicas unchanged", exc)
            return
        self._keda(now_s, active, why="IsActive" if active else "IsActive false")

    def _keda(self, now_s: float, active: bool, why: str) -> None:
        current = self.get_replicas()
        decision = keda_step(self.config.keda, current, active, self.last_active_s, now_s)
        self.last_active_s = decision.last_active_s
        if decision.desired is not None and decision.desired != current:
            self._apply(None, None, decision.desired, f"KEDA: {decision.reason} ({why})")

    def _hpa_sync(self, now_s: float) -> None:
        current = self.get_replicas()
        if current == 0:
            return  # the HPA is disabled at zero; KEDA activates
        try:
            spec, value = self._read_metric()
            decision, self.hpa_state = hpa_step(
                self.hpa_state, self.config.hpa, current, value, spec.target, now_s
            )
        except (ScalerUnavailable, ValueError) as exc:
            self._apply(None, None, current, f"HPA: metric unavailable: {exc}")
            return
        self._apply(value, spec.target, decision.desired, f"HPA: {decision.reason}")

    def _apply(self, value: float | None, target: float | None, desired: int, reason: str) -> None:
        current = self.get_replicas()
        obs = self.observe()
        capacity = obs.slots_per_endpoint * obs.ready
        saturation = (
            None if obs.inflight is None or capacity == 0 else round(obs.inflight / capacity, 4)
        )
        record = DecisionRecord(
            t=self.wall_clock(),
            L=obs.inflight,
            capacity=capacity,
            saturation=saturation,
            value=value,
            target=target,
            desired=desired,
            reason=reason,
        )
        log.info(
            "scaling decision: L=%s capacity=%d saturation=%s value=%s target=%s "
            "replicas %d -> %d (%s)",
            obs.inflight,
            capacity,
            saturation,
            value,
            target,
            current,
            desired,
            reason,
        )
        self.record(record)
        if desired != current:
            self.set_replicas(desired)
