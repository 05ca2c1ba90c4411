"""Knative's KPA (Knative Pod Autoscaler), concurrency mode.

Implemented from knative/serving at commit 98e5ef90 (knative-v1.23.0-5):

* ``pkg/autoscaler/scaling/autoscaler.go`` ``(*autoscaler).Scale`` — the decision
  (:meth:`KpaDecider.scale`);
* ``pkg/autoscaler/aggregation/bucketing.go`` ``TimedFloat64Buckets`` — the stable and
  panic windows' averages (:class:`TimedBuckets`);
* ``pkg/autoscaler/metrics/collector.go`` — a scrape every ``scrapeTickInterval`` (1 s)
  records the revision's concurrency into both windows; ``ErrNoData`` when the stable
  window holds nothing;
* ``pkg/autoscaler/scaling/multiscaler.go`` — ``tickInterval`` = 2 s between decisions;
* ``pkg/autoscaler/config/config.go`` — the defaults: target utilization 0.7, max
  scale-up rate 1000, max scale-down rate 2, panic window 10 % of the 60 s stable window,
  panic threshold 200 %, bucket 1 s, scale-down delay 0;
* ``pkg/reconciler/autoscaling/resources/target.go`` ``ResolveMetricTarget`` — target =
  containerConcurrency × utilization (4 slots → 2.8 requests per pod), total = 4;
* ``pkg/reconciler/autoscaling/kpa/scaler.go`` ``applyBounds`` — min/max scale.

The decision, per tick: ``dspc = ceil(stable / target)``, ``dppc = ceil(panic / target)``,
each kept within ``[floor(ready / maxScaleDownRate), ceil(maxScaleUpRate × ready)]``
(ready counted as at least 1). Panic begins when ``dppc / ready ≥ panicThreshold`` and is
extended every tick that stays over it; it ends a stable window after the last such tick.
While panicking the count is the larger of the two and never goes down (``maxPanicPods``).
An autoscaler created with more than one ready pod starts in panic mode (it has no
history). Worked examples (Knative's ``autoscaler_test.go``) are in
``tests/unit/test_peers_kpa.py``.

What the collector scrapes is the revision's total concurrency: requests in the pods plus
those the activator holds. Here that is the router's L (:attr:`Signal.INFLIGHT`), which
counts held requests too; the router runs in hold mode, as Knative's activator and
queue-proxy hold requests beyond containerConcurrency.

Departures, each because the local stack has no such part: no activator/burst-capacity
(``ExcessBurstCapacity`` is not computed; it decides only whether the activator is in the
path); no ``ScaleDownDelay`` window (0 by default); scale to zero (only with
``min_replicas`` 0) waits ``scale-to-zero-grace-period`` (30 s) of wanting zero, in place
of the activator-probing dance of ``handleScaleToZero``.

Every duration is multiplied by the time-scale (:meth:`KpaSpec.scaled`); the bucket index
is ``floor(t / bucket_s)`` as Knative's ``t.Unix() / granularity``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from inflight.control.periodic import next_due
from inflight.planes.peers.base import PeerIO, apply
from inflight.planes.peers.signals import Signal
from inflight.planes.scaler_client import ScalerUnavailable

log = logging.getLogger("inflight.up.peers.kpa")

_EPS = 1e-9
#: ``roundToNDigits(precision, …)`` in bucketing.go.
_PRECISION = 6


def _round(value: float) -> float:
    p = 10.0**_PRECISION
    return round(value * p) / p


class TimedBuckets:
    """``TimedFloat64Buckets``: values summed per bucket, averaged over the window.

    ``window_average`` divides by the buckets written since the first write (at most the
    window), not by the window, and a hole after the last write shortens the count (see
    the worked example in the tests); nothing for a whole window reads 0.
    """

    def __init__(self, window_s: float, bucket_s: float) -> None:
        if window_s <= 0 or bucket_s <= 0:
            raise ValueError(f"window ({window_s}) and bucket ({bucket_s}) must be > 0 s")
        self.window_s = window_s
        self.bucket_s = bucket_s
        self.window_buckets = round(window_s / bucket_s, 9)  # Knative compares durations
        self.size = math.ceil(self.window_buckets - _EPS)  # len(t.buckets)
        self._buckets: dict[int, float] = {}
        self._first: int | None = None
        self._last: int | None = None

    def _index(self, t_s: float) -> int:
        return math.floor(t_s / self.bucket_s + _EPS)

    def record(self, now_s: float, value: float) -> None:
        b = self._index(now_s)
        if self._last is None or b != self._last:
            if self._last is not None and not b + self.window_buckets > self._last:
                return  # older than a window before the last write: dropped
            if self._first is None or self._first > b:
                self._first = b
            if self._last is None or b > self._last:
                if self._last is None or b - self._last >= self.window_buckets:
                    self._buckets.clear()
                    self._first = b
                self._last = b
        self._buckets[b] = self._buckets.get(b, 0.0) + value
        cutoff = self._last - self.size
        for i in [i for i in self._buckets if i <= cutoff]:
            del self._buckets[i]

    def is_empty(self, now_s: float) -> bool:
        if self._last is None:
            return True
        return self._index(now_s) - self._last > self.window_buckets

    def window_average(self, now_s: float) -> float:
        if self._last is None or self._first is None:
            return 0.0
        d = self._index(now_s) - self._last
        written = self._last - self._first + 1
        if d <= 0:
            total = sum(self._buckets.values())
            return _round(total / min(written, self.size))
        if d < self.window_buckets:
            now_b = self._last + d
            total = sum(v for i, v in self._buckets.items() if i > now_b - self.size)
            return _round(total / min(written, self.size - d))
        return 0.0


@dataclass(frozen=True)
class KpaSpec:
    """A ``DeciderSpec`` plus the collector's and multiscaler's periods (seconds)."""

    target_value: float
    total_value: float
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    panic_threshold: float = 2.0
    stable_window_s: float = 60.0
    panic_window_pct: float = 10.0
    reachable: bool = True
    tick_s: float = 2.0
    scrape_s: float = 1.0
    bucket_s: float = 1.0
    scale_to_zero_grace_s: float = 30.0

    def __post_init__(self) -> None:
        if not self.target_value > 0:
            raise ValueError(f"KPA target must be > 0, got {self.target_value}")
        if self.max_scale_up_rate <= 1 or self.max_scale_down_rate <= 1:
            raise ValueError("KPA max scale-up and scale-down rates must be > 1")
        if not 0 < self.panic_window_pct <= 100:
            raise ValueError(f"panic window must be 0..100 %, got {self.panic_window_pct}")
        for name in ("stable_window_s", "tick_s", "scrape_s", "bucket_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"KPA {name} must be > 0, got {getattr(self, name)}")

    @classmethod
    def concurrency(cls, container_concurrency: int, utilization: float = 0.7) -> KpaSpec:
        """``ResolveMetricTarget`` for the concurrency metric: target = cc × utilization.

        >>> KpaSpec.concurrency(4).target_value
        2.8
        """
        if container_concurrency < 1:
            raise ValueError(f"containerConcurrency must be >= 1, got {container_concurrency}")
        target = max(0.01, round(container_concurrency * utilization, 9))  # TargetMin
        return cls(target_value=target, total_value=float(container_concurrency))

    @property
    def panic_window_s(self) -> float:
        return self.stable_window_s * self.panic_window_pct / 100.0

    def scaled(self, time_scale: float) -> KpaSpec:
        """Every period × ``time_scale`` (the rates and targets are unit-free)."""
        return replace(
            self,
            stable_window_s=self.stable_window_s * time_scale,
            tick_s=self.tick_s * time_scale,
            scrape_s=self.scrape_s * time_scale,
            bucket_s=self.bucket_s * time_scale,
            scale_to_zero_grace_s=self.scale_to_zero_grace_s * time_scale,
        )


@dataclass(frozen=True)
class KpaResult:
    """One ``Scale``: the pods wanted, and what led there."""

    desired: int
    stable_pods: int
    panic_pods: int
    panicking: bool
    reason: str


class KpaDecider:
    """``autoscaler``'s panic state and ``Scale`` (no I/O: values and ``now_s`` in)."""

    def __init__(self, spec: KpaSpec, ready: int, now_s: float) -> None:
        self.spec = spec
        # newAutoscaler: "We always start in the panic mode, if the deployment is scaled
        # up over 1 pod", keeping at least the current scale until there is history.
        self.panic_time_s: float | None = now_s if ready > 1 else None
        self.max_panic_pods = ready

    def scale(self, ready: int, stable: float, panic: float, now_s: float) -> KpaResult:
        spec = self.spec
        ready_f = max(1.0, float(ready))
        max_up = math.ceil(spec.max_scale_up_rate * ready_f)
        max_down = math.floor(ready_f / spec.max_scale_down_rate) if spec.reachable else 0
        dspc = math.ceil(stable / spec.target_value - _EPS)
        dppc = math.ceil(panic / spec.target_value - _EPS)
        stable_pods = int(min(max(dspc, max_down), max_up))
        panic_pods = int(min(max(dppc, max_down), max_up))
        over = dppc / ready_f >= spec.panic_threshold
        if over:
            self.panic_time_s = now_s  # begin, or extend, panicking
        elif self.panic_time_s is not None and self.panic_time_s + spec.stable_window_s < now_s:
            self.panic_time_s = None  # the surge has made its way into the stable metric
            self.max_panic_pods = 0
        desired = stable_pods
        if self.panic_time_s is not None:
            desired = max(desired, panic_pods)
            if desired > self.max_panic_pods:
                self.max_panic_pods = desired
            desired = self.max_panic_pods  # no scale-down while panicking
            reason = f"panic mode: stable {stable_pods}, panic {panic_pods}, held at {desired}"
        else:
            reason = f"stable mode: ceil({stable:g} / {spec.target_value:g}) = {dspc}"
        return KpaResult(desired, stable_pods, panic_pods, self.panic_time_s is not None, reason)


class KpaLoop:
    """The KPA for one revision: scrapes L into both windows every ``scrape_s`` and
    decides every ``tick_s``, applying min/max scale. All I/O is in ``io``."""

    def __init__(
        self, spec: KpaSpec, min_replicas: int, max_replicas: int, io: PeerIO, name: str = "kpa"
    ) -> None:
        if not 0 <= min_replicas <= max_replicas or max_replicas < 1:
            raise ValueError(f"bad replica bounds {min_replicas}..{max_replicas}")
        self.spec = spec
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.io = io
        self.name = name
        self.stable = TimedBuckets(spec.stable_window_s, spec.bucket_s)
        self.panic = TimedBuckets(spec.panic_window_s, spec.bucket_s)
        self.decider: KpaDecider | None = None
        self.next_scrape_s = 0.0
        self.next_tick_s = 0.0
        self.zero_since_s: float | None = None

    def start(self, now_s: float) -> None:
        self.decider = KpaDecider(self.spec, self.io.ready_replicas(), now_s)
        self.next_scrape_s = now_s
        self.next_tick_s = now_s + self.spec.tick_s

    def scrape(self, now_s: float) -> None:
        """The collector's scrape: one stat into both windows (none if the read fails)."""
        try:
            value = self.io.read(Signal.INFLIGHT)
        except ScalerUnavailable as exc:
            log.warning("%s: scrape failed: %s", self.name, exc)
            return
        self.stable.record(now_s, value)
        self.panic.record(now_s, value)

    def tick(self, now_s: float) -> bool:
        if self.decider is None:
            self.start(now_s)
        # Both on Go tickers in Knative (the collector's scrape ticker, the multiscaler's
        # tickInterval ticker): due on their own phase, one run for any number of missed
        # ticks (inflight.control.periodic).
        if now_s >= self.next_scrape_s:
            self.next_scrape_s = next_due(self.next_scrape_s, self.spec.scrape_s, now_s)
            self.scrape(now_s)
        if now_s < self.next_tick_s:
            return False
        self.next_tick_s = next_due(self.next_tick_s, self.spec.tick_s, now_s)
        self.decide(now_s)
        return True

    def decide(self, now_s: float) -> None:
        assert self.decider is not None
        if self.stable.is_empty(now_s):
            apply(self.io, None, None, self.io.get_replicas(), f"{self.name}: no data to scale on")
            return
        stable = self.stable.window_average(now_s)
        panic = self.panic.window_average(now_s)
        result = self.decider.scale(self.io.ready_replicas(), stable, panic, now_s)
        desired = min(max(result.desired, self.min_replicas), self.max_replicas)
        reason = result.reason
        if desired == 0:
            if self.zero_since_s is None:
                self.zero_since_s = now_s
            if now_s - self.zero_since_s < self.spec.scale_to_zero_grace_s:
                desired, reason = 1, reason + "; scale to zero after the grace period"
        else:
            self.zero_since_s = None
        if desired != result.desired:
            reason += f"; bounds {self.min_replicas}..{self.max_replicas} -> {desired}"
        value = max(stable, panic) if result.panicking else stable
        apply(self.io, value, self.spec.target_value, desired, f"{self.name}: {reason}")
