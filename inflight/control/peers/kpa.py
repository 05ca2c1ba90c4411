"""Knative's KPA (Knative Pod Autoscaler), concurrency mode, as a pure decider.

Implemented from knative/serving at commit 98e5ef90 (knative-v1.23.0-5):

* ``pkg/autoscaler/scaling/autoscaler.go`` ``(*autoscaler).Scale`` — the decision
  (:func:`scale`, :func:`tick`);
* ``pkg/autoscaler/aggregation/bucketing.go`` ``TimedFloat64Buckets`` — the stable and
  panic windows' averages (:class:`TimedBuckets`);
* ``pkg/autoscaler/metrics/collector.go`` — a scrape every ``scrapeTickInterval`` (1 s)
  records the revision's concurrency into both windows (:func:`record`); ``ErrNoData``
  when the stable window holds nothing;
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
those the activator holds. Here that is the router's L (``Signal.INFLIGHT``), which
counts held requests too; the router runs in hold mode, as Knative's activator and
queue-proxy hold requests beyond containerConcurrency.

Departures, each because the local stack has no such part: no activator/burst-capacity
(``ExcessBurstCapacity`` is not computed; it decides only whether the activator is in the
path); no ``ScaleDownDelay`` window (0 by default); scale to zero (only with
``min_scale`` 0) waits ``scale-to-zero-grace-period`` (30 s) of wanting zero, in place
of the activator-probing dance of ``handleScaleToZero``.

Every duration is multiplied by the time-scale (:meth:`KpaSpec.scaled`); the bucket index
is ``floor(t / bucket_s)`` as Knative's ``t.Unix() / granularity``. The collector's and the
multiscaler's tickers are the loop's (:class:`inflight.planes.peers.kpa.KpaLoop`); here
every function takes ``now_s`` and returns new values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from inflight.control.peers.base import Decision, Replicas

_EPS = 1e-9
#: ``roundToNDigits(precision, …)`` in bucketing.go.
_PRECISION = 6


def _round(value: float) -> float:
    p = 10.0**_PRECISION
    return round(value * p) / p


@dataclass(frozen=True)
class TimedBuckets:
    """``TimedFloat64Buckets``: values summed per bucket, averaged over the window.

    ``window_average`` divides by the buckets written since the first write (at most the
    window), not by the window, and a hole after the last write shortens the count (see
    the worked example in the tests); nothing for a whole window reads 0. A value:
    :meth:`record` returns the windows with the stat added.

    >>> b = TimedBuckets(window_s=5.0, bucket_s=1.0).record(100.0, 2.0).record(101.0, 4.0)
    >>> b.window_average(101.0)  # (2 + 4) / 2 buckets written
    3.0
    """

    window_s: float
    bucket_s: float
    #: (bucket index, sum) in the order first written (the order Knative sums in).
    buckets: tuple[tuple[int, float], ...] = ()
    first: int | None = None
    last: int | None = None
    window_buckets: float = field(init=False, repr=False)  # Knative compares durations
    size: int = field(init=False, repr=False)  # len(t.buckets)

    def __post_init__(self) -> None:
        if self.window_s <= 0 or self.bucket_s <= 0:
            raise ValueError(f"window ({self.window_s}) and bucket ({self.bucket_s}) must be > 0 s")
        window_buckets = round(self.window_s / self.bucket_s, 9)
        object.__setattr__(self, "window_buckets", window_buckets)
        object.__setattr__(self, "size", math.ceil(window_buckets - _EPS))

    def _index(self, t_s: float) -> int:
        return math.floor(t_s / self.bucket_s + _EPS)

    def record(self, now_s: float, value: float) -> TimedBuckets:
        """The windows with ``value`` added at ``now_s`` (``Record``)."""
        b = self._index(now_s)
        first, last = self.first, self.last
        buckets = dict(self.buckets)
        if last is None or b != last:
            if last is not None and not b + self.window_buckets > last:
                return self  # older than a window before the last write: dropped
            if first is None or first > b:
                first = b
            if last is None or b > last:
                if last is None or b - last >= self.window_buckets:
                    buckets.clear()
                    first = b
                last = b
        buckets[b] = buckets.get(b, 0.0) + value
        cutoff = last - self.size
        for i in [i for i in buckets if i <= cutoff]:
            del buckets[i]
        return replace(self, buckets=tuple(buckets.items()), first=first, last=last)

    def is_empty(self, now_s: float) -> bool:
        if self.last is None:
            return True
        return self._index(now_s) - self.last > self.window_buckets

    def window_average(self, now_s: float) -> float:
        if self.last is None or self.first is None:
            return 0.0
        d = self._index(now_s) - self.last
        written = self.last - self.first + 1
        if d <= 0:
            total = sum(v for _, v in self.buckets)
            return _round(total / min(written, self.size))
        if d < self.window_buckets:
            now_b = self.last + d
            total = sum(v for i, v in self.buckets if i > now_b - self.size)
            return _round(total / min(written, self.size - d))
        return 0.0


@dataclass(frozen=True)
class KpaSpec:
    """A ``DeciderSpec``, the collector's and multiscaler's periods (seconds) and the
    revision's min/max scale (``applyBounds``; ``max_scale`` 0: no upper bound, Knative's
    default)."""

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
    min_scale: int = 0
    max_scale: int = 0

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
        if self.min_scale < 0 or self.max_scale < 0:
            raise ValueError(
                f"KPA min/max scale must be >= 0, got {self.min_scale}..{self.max_scale}"
            )
        if self.max_scale and self.min_scale > self.max_scale:
            raise ValueError(f"KPA min scale {self.min_scale} > max scale {self.max_scale}")

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
        """Every period × ``time_scale`` (the rates, targets and bounds are unit-free)."""
        return replace(
            self,
            stable_window_s=self.stable_window_s * time_scale,
            tick_s=self.tick_s * time_scale,
            scrape_s=self.scrape_s * time_scale,
            bucket_s=self.bucket_s * time_scale,
            scale_to_zero_grace_s=self.scale_to_zero_grace_s * time_scale,
        )


@dataclass(frozen=True)
class PanicState:
    """``autoscaler``'s panic state: since when it panics (``None``: stable mode) and the
    most pods asked for while panicking."""

    panic_time_s: float | None = None
    max_panic_pods: int = 0

    @classmethod
    def start(cls, ready: int, now_s: float) -> PanicState:
        """``newAutoscaler``: "We always start in the panic mode, if the deployment is
        scaled up over 1 pod", keeping at least the current scale until there is history.

        >>> PanicState.start(ready=3, now_s=5.0)
        PanicState(panic_time_s=5.0, max_panic_pods=3)
        """
        return cls(now_s if ready > 1 else None, ready)


@dataclass(frozen=True)
class KpaResult:
    """One ``Scale``: the pods wanted, and what led there."""

    desired: int
    stable_pods: int
    panic_pods: int
    panicking: bool
    reason: str


def scale(
    spec: KpaSpec, state: PanicState, ready: int, stable: float, panic: float, now_s: float
) -> tuple[KpaResult, PanicState]:
    """``Scale`` on the windows' averages: the pods wanted and the panic state after.

    Worked example (target 2.8, 1 ready pod, stable 2, panic 12): dspc = ceil(2 / 2.8) =
    1, dppc = ceil(12 / 2.8) = 5; 5 / 1 ≥ 2 begins panic, so max(1, 5) = 5 pods, and no
    fewer until a stable window (60 s) after the last tick over the threshold.
    """
    ready_f = max(1.0, float(ready))
    max_up = math.ceil(spec.max_scale_up_rate * ready_f)
    max_down = math.floor(ready_f / spec.max_scale_down_rate) if spec.reachable else 0
    dspc = math.ceil(stable / spec.target_value - _EPS)
    dppc = math.ceil(panic / spec.target_value - _EPS)
    stable_pods = int(min(max(dspc, max_down), max_up))
    panic_pods = int(min(max(dppc, max_down), max_up))
    panic_time_s, max_panic_pods = state.panic_time_s, state.max_panic_pods
    if dppc / ready_f >= spec.panic_threshold:
        panic_time_s = now_s  # begin, or extend, panicking
    elif panic_time_s is not None and panic_time_s + spec.stable_window_s < now_s:
        panic_time_s = None  # the surge has made its way into the stable metric
        max_panic_pods = 0
    desired = stable_pods
    if panic_time_s is not None:
        desired = max(desired, panic_pods)
        if desired > max_panic_pods:
            max_panic_pods = desired
        desired = max_panic_pods  # no scale-down while panicking
        reason = f"panic mode: stable {stable_pods}, panic {panic_pods}, held at {desired}"
    else:
        reason = f"stable mode: ceil({stable:g} / {spec.target_value:g}) = {dspc}"
    result = KpaResult(desired, stable_pods, panic_pods, panic_time_s is not None, reason)
    return result, PanicState(panic_time_s, max_panic_pods)


@dataclass(frozen=True)
class KpaState:
    """What the KPA keeps for one revision between calls: the collector's two windows,
    the panic state, and since when it has wanted zero pods (``None``: it has not)."""

    stable_window: TimedBuckets
    panic_window: TimedBuckets
    panic: PanicState = PanicState()
    zero_since_s: float | None = None

    @classmethod
    def start(cls, spec: KpaSpec, ready: int, now_s: float) -> KpaState:
        """Empty windows, and :meth:`PanicState.start` for ``ready`` pods at ``now_s``."""
        return cls(
            stable_window=TimedBuckets(spec.stable_window_s, spec.bucket_s),
            panic_window=TimedBuckets(spec.panic_window_s, spec.bucket_s),
            panic=PanicState.start(ready, now_s),
        )


def record(state: KpaState, value: float, now_s: float) -> KpaState:
    """The collector's scrape: one concurrency stat into both windows."""
    return replace(
        state,
        stable_window=state.stable_window.record(now_s, value),
        panic_window=state.panic_window.record(now_s, value),
    )


def tick(
    spec: KpaSpec, state: KpaState, replicas: Replicas, now_s: float
) -> tuple[Decision, KpaState]:
    """One multiscaler tick: :func:`scale` on the windows, then min/max scale and the
    scale-to-zero grace period. With nothing in the stable window (``ErrNoData``) the
    decision keeps ``replicas.desired`` and the state is unchanged.

    >>> spec = KpaSpec.concurrency(4)
    >>> state = record(KpaState.start(spec, ready=1, now_s=0.0), 12.0, 0.0)
    >>> decision, state = tick(spec, state, Replicas(desired=1, ready=1), 0.0)
    >>> decision.desired, decision.value, state.panic.panic_time_s
    (5, 12.0, 0.0)
    """
    if state.stable_window.is_empty(now_s):
        return Decision(replicas.desired, None, None, "no data to scale on"), state
    stable = state.stable_window.window_average(now_s)
    panic = state.panic_window.window_average(now_s)
    result, panic_state = scale(spec, state.panic, replicas.ready, stable, panic, now_s)
    desired = max(result.desired, spec.min_scale)
    if spec.max_scale:
        desired = min(desired, spec.max_scale)
    reason = result.reason
    zero_since_s = state.zero_since_s
    if desired == 0:
        if zero_since_s is None:
            zero_since_s = now_s
        if now_s - zero_since_s < spec.scale_to_zero_grace_s:
            desired, reason = 1, reason + "; scale to zero after the grace period"
    else:
        zero_since_s = None
    if desired != result.desired:
        reason += f"; bounds {spec.min_scale}..{spec.max_scale or 'inf'} -> {desired}"
    value = max(stable, panic) if result.panicking else stable
    new_state = replace(state, panic=panic_state, zero_since_s=zero_since_s)
    return Decision(desired, value, spec.target_value, reason), new_state
