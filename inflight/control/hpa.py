"""The Horizontal Pod Autoscaler's arithmetic, as a pure function of time.

This reproduces what the Kubernetes HPA controller (``pkg/controller/podautoscaler``)
does with one external metric of type AverageValue, which is what KEDA gives it:

1. **Metric → replicas.** ``usage`` is the value the scaler returns (KEDA hands the HPA
   the sum of its values; our scaler returns exactly one). The HPA compares
   ``usage / (target × current)`` with 1; if it is within the tolerance (10 %) it keeps
   ``current``, else it proposes ``ceil(usage / target)``. That step is
   :func:`inflight.control.hpa_math.replicas_for_average_value`, shared with the scaler's
   ``desired`` gauge.
   Worked example: target 4 (slots per replica × target saturation 1.0), current 1,
   usage 9 → ratio 2.25, outside 10 % → ceil(9 / 4) = 3. Usage 4.3 on 1 replica →
   ratio 1.075, within 10 % → stays 1.
2. **Stabilization.** Every proposal is remembered with its time. The scale-up
   recommendation is the *minimum* of the proposals inside the scale-up window, the
   scale-down one the *maximum* inside the scale-down window; the result is ``current``
   pushed up to the first and down to the second.
3. **Rate policies.** A change may not exceed what the behaviour's policies allow per
   period, counted from the replica changes already made inside that period
   (``selectPolicy: Max`` takes the most permissive policy). Then min/max clamp.

Scale to and from zero is KEDA's job, not the HPA's (see :mod:`inflight.control.keda`); the
HPA's ``min_replicas`` is therefore at least 1.

No I/O and no clock: the caller passes ``now_s`` (seconds, any monotonic origin) and
threads :class:`HpaState` from one call to the next.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Final, Literal

# The metric → replicas step is shared with the scaler's ``desired`` gauge: one
# implementation, in inflight.control.hpa_math (re-exported here for the local loop's callers).
from inflight.control.hpa_math import HPA_TOLERANCE as HPA_TOLERANCE
from inflight.control.hpa_math import raw_replicas
from inflight.control.hpa_math import replicas_for_average_value as replicas_for_average_value

PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]


@dataclass(frozen=True)
class ScalingPolicy:
    """At most ``value`` pods (or ``value`` percent of the replicas) per ``period_s``."""

    type: PolicyType
    value: int
    period_s: float

    def __post_init__(self) -> None:
        if self.type not in ("Pods", "Percent"):
            raise ValueError(f"scaling policy type must be Pods or Percent, got {self.type!r}")
        if self.value <= 0:
            raise ValueError(f"scaling policy value must be > 0, got {self.value}")
        if self.period_s <= 0:
            raise ValueError(f"scaling policy period_s must be > 0, got {self.period_s}")


@dataclass(frozen=True)
class ScalingRules:
    """One direction of an HPA ``behavior`` (``scaleUp`` or ``scaleDown``)."""

    stabilization_window_s: float
    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = "Max"

    def __post_init__(self) -> None:
        if self.stabilization_window_s < 0:
            raise ValueError(
                f"stabilization_window_s must be >= 0, got {self.stabilization_window_s}"
            )
        if self.select_policy not in ("Max", "Min", "Disabled"):
            raise ValueError(f"select_policy must be Max, Min or Disabled: {self.select_policy!r}")
        if not self.policies and self.select_policy != "Disabled":
            raise ValueError("scaling rules need at least one policy unless Disabled")

    def scaled(self, time_scale: float) -> ScalingRules:
        """The same rules with every duration multiplied by ``time_scale``."""
        return ScalingRules(
            stabilization_window_s=self.stabilization_window_s * time_scale,
            policies=tuple(replace(p, period_s=p.period_s * time_scale) for p in self.policies),
            select_policy=self.select_policy,
        )


@dataclass(frozen=True)
class Behavior:
    """An HPA ``spec.behavior``: rules for scaling up and for scaling down."""

    scale_up: ScalingRules
    scale_down: ScalingRules

    def scaled(self, time_scale: float) -> Behavior:
        return Behavior(self.scale_up.scaled(time_scale), self.scale_down.scaled(time_scale))


# --- Kubernetes' defaults and the numbers our shipped ScaledObject sets ------------------
# (seconds of real time; ``inflight up`` multiplies them by --time-scale).

#: The HPA controller's --horizontal-pod-autoscaler-sync-period: it reads metrics this often.
HPA_SYNC_PERIOD_S: Final = 15.0
#: KEDA's ScaledObject ``pollingInterval`` default: how often it checks activation (IsActive).
KEDA_POLLING_INTERVAL_S: Final = 30.0
#: KEDA's ScaledObject ``cooldownPeriod`` default: idle time before scaling to zero.
KEDA_COOLDOWN_PERIOD_S: Final = 300.0

#: Kubernetes' default scale-up behaviour: no stabilization; per 15 s, double or add 4
#: pods, whichever is more.
KUBERNETES_DEFAULT_SCALE_UP: Final = ScalingRules(
    stabilization_window_s=0.0,
    policies=(
        ScalingPolicy("Percent", 100, 15.0),
        ScalingPolicy("Pods", 4, 15.0),
    ),
    select_policy="Max",
)

#: Our scale-down behaviour. The stabilization window is 0 on purpose: the scaler already
#: returns the *maximum* of L over its own scale-down window (scaleDownWindowSeconds, 60 s),
#: so a replica goes only when N−1 replicas would have carried the whole window. An HPA
#: window on top would stack a second delay (Kubernetes' default is 300 s) and keep idle
#: replicas for minutes. Once the scaler says so, the HPA may remove all excess at once.
SHIPPED_SCALE_DOWN: Final = ScalingRules(
    stabilization_window_s=0.0,
    policies=(ScalingPolicy("Percent", 100, 15.0),),
    select_policy="Max",
)

#: The ``behavior`` our shipped ScaledObject sets (manifests copy these numbers).
SHIPPED_BEHAVIOR: Final = Behavior(
    scale_up=KUBERNETES_DEFAULT_SCALE_UP, scale_down=SHIPPED_SCALE_DOWN
)

#: Kubernetes' default scale-down behaviour: the highest recommendation of the last 300 s,
#: then any number of pods per 15 s (``pkg/apis/autoscaling/v2/defaults.go``).
KUBERNETES_DEFAULT_SCALE_DOWN: Final = ScalingRules(
    stabilization_window_s=300.0,
    policies=(ScalingPolicy("Percent", 100, 15.0),),
    select_policy="Max",
)

#: An HPA with no ``behavior`` set: what the peers' ScaledObjects get by default.
KUBERNETES_DEFAULT_BEHAVIOR: Final = Behavior(
    scale_up=KUBERNETES_DEFAULT_SCALE_UP, scale_down=KUBERNETES_DEFAULT_SCALE_DOWN
)


@dataclass(frozen=True)
class HpaSpec:
    """The HPA's own settings. ``min_replicas`` ≥ 1: zero is KEDA's business."""

    min_replicas: int
    max_replicas: int
    behavior: Behavior = SHIPPED_BEHAVIOR
    tolerance: float = HPA_TOLERANCE

    def __post_init__(self) -> None:
        if self.min_replicas < 1:
            raise ValueError(f"HPA min_replicas must be >= 1, got {self.min_replicas}")
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"max_replicas ({self.max_replicas}) must be >= min_replicas ({self.min_replicas})"
            )
        if self.tolerance < 0:
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance}")


@dataclass(frozen=True)
class Recommendation:
    """A metric proposal (replicas) made at ``t_s``."""

    t_s: float
    replicas: int


@dataclass(frozen=True)
class ScaleEvent:
    """A change actually made at ``t_s``: ``change`` replicas added (or removed)."""

    t_s: float
    change: int


@dataclass(frozen=True)
class HpaState:
    """What the HPA controller remembers between syncs (per scale target)."""

    recommendations: tuple[Recommendation, ...] = ()
    scale_up_events: tuple[ScaleEvent, ...] = ()
    scale_down_events: tuple[ScaleEvent, ...] = ()


@dataclass(frozen=True)
class HpaDecision:
    """The outcome of one sync.

    ``metric_replicas``: what the metric alone asks for; ``stabilized``: after the
    stabilization windows; ``desired``: after rate policies and min/max — the count to
    apply. ``reason`` is a short human-readable cause.
    """

    current: int
    metric_replicas: int
    stabilized: int
    desired: int
    reason: str

    @property
    def changed(self) -> bool:
        return self.desired != self.current


def _change_in_period(events: tuple[ScaleEvent, ...], period_s: float, now_s: float) -> int:
    cutoff = now_s - period_s
    return sum(e.change for e in events if e.t_s > cutoff)


def _rate_limit(
    current: int, state: HpaState, rules: ScalingRules, now_s: float, direction: Literal[1, -1]
) -> int:
    """The furthest the policies of ``rules`` let ``current`` move up (``direction`` 1) or
    down (-1) at ``now_s``.

    Each policy counts from the replicas at the start of its period: ``current`` less the
    changes already made inside it. Worked example, scale-up policies Percent 100 and Pods
    4 per 15 s, current 3 after adding 1 within the last 15 s: period start 2, so Percent
    allows ceil(2 × 2) = 4 and Pods 2 + 4 = 6; ``selectPolicy: Max`` takes the biggest
    change (6), ``Min`` the smallest (4), ``Disabled`` none.
    """
    if rules.select_policy == "Disabled":
        return current
    limits = []
    for policy in rules.policies:
        added = _change_in_period(state.scale_up_events, policy.period_s, now_s)
        removed = _change_in_period(state.scale_down_events, policy.period_s, now_s)
        period_start = current - added + removed
        if policy.type == "Pods":
            limits.append(period_start + direction * policy.value)
        elif direction > 0:
            # Rounded up, or a Percent policy could never add the first replica.
            limits.append(math.ceil(period_start * (1 + policy.value / 100)))
        else:
            limits.append(int(period_start * (1 - policy.value / 100)))
    # Up, the biggest change is the highest ceiling; down, it is the lowest floor.
    highest = (rules.select_policy == "Max") == (direction > 0)
    return max(limits) if highest else min(limits)


def _stabilize(
    state: HpaState, behavior: Behavior, current: int, proposal: int, now_s: float
) -> tuple[int, tuple[Recommendation, ...]]:
    up_cutoff = now_s - behavior.scale_up.stabilization_window_s
    down_cutoff = now_s - behavior.scale_down.stabilization_window_s
    up_rec = proposal
    down_rec = proposal
    for rec in state.recommendations:
        if rec.t_s > up_cutoff:
            up_rec = min(up_rec, rec.replicas)
        if rec.t_s > down_cutoff:
            down_rec = max(down_rec, rec.replicas)
    stabilized = min(max(current, up_rec), down_rec)
    oldest_kept = min(up_cutoff, down_cutoff)
    kept = tuple(r for r in state.recommendations if r.t_s > oldest_kept)
    return stabilized, (*kept, Recommendation(now_s, proposal))


def _prune_events(
    events: tuple[ScaleEvent, ...], rules: ScalingRules, now_s: float
) -> tuple[ScaleEvent, ...]:
    longest = max((p.period_s for p in rules.policies), default=0.0)
    return tuple(e for e in events if e.t_s > now_s - longest)


def record_scale(state: HpaState, spec: HpaSpec, old: int, new: int, now_s: float) -> HpaState:
    """Remember a change made at ``now_s`` so rate policies count it."""
    ups = _prune_events(state.scale_up_events, spec.behavior.scale_up, now_s)
    downs = _prune_events(state.scale_down_events, spec.behavior.scale_down, now_s)
    if new > old:
        ups = (*ups, ScaleEvent(now_s, new - old))
    elif new < old:
        downs = (*downs, ScaleEvent(now_s, old - new))
    return replace(state, scale_up_events=ups, scale_down_events=downs)


def hpa_step(
    state: HpaState,
    spec: HpaSpec,
    current: int,
    value: float,
    target: float,
    now_s: float,
) -> tuple[HpaDecision, HpaState]:
    """One HPA sync: the replicas to run, and the state to pass to the next sync.

    ``current`` is the scale target's replica count (spec, not ready count); ``value`` the
    metric the scaler returned and ``target`` its AverageValue target. When the decision
    changes the count, the returned state already records the change.
    """
    if current == 0:
        # Kubernetes: spec.replicas == 0 with minReplicas != 0 disables the HPA; KEDA
        # owns 0 -> 1.
        return HpaDecision(0, 0, 0, 0, "scaled to zero: KEDA activates"), state
    if current > spec.max_replicas:
        return _apply(state, spec, current, current, current, spec.max_replicas, "above max", now_s)
    if current < spec.min_replicas:
        return _apply(state, spec, current, current, current, spec.min_replicas, "below min", now_s)

    metric_replicas = replicas_for_average_value(value, target, current, spec.tolerance)
    if not state.recommendations:
        # maybeInitScaleDownStabilizationWindow: the first sync remembers the current count.
        state = replace(state, recommendations=(Recommendation(now_s, current),))
    stabilized, recommendations = _stabilize(state, spec.behavior, current, metric_replicas, now_s)
    state = replace(state, recommendations=recommendations)

    desired = stabilized
    if stabilized > current:
        limit = max(_rate_limit(current, state, spec.behavior.scale_up, now_s, 1), current)
        desired = min(stabilized, spec.max_replicas, limit)
        reason = "scale up"
        if desired < stabilized:
            reason = "scale-up rate limit" if limit < spec.max_replicas else "at max replicas"
    elif stabilized < current:
        limit = min(_rate_limit(current, state, spec.behavior.scale_down, now_s, -1), current)
        desired = max(stabilized, spec.min_replicas, limit)
        reason = "scale down"
        if desired > stabilized:
            reason = "scale-down rate limit" if limit > spec.min_replicas else "at min replicas"
    elif metric_replicas != current:
        reason = "held by stabilization window"
    elif raw_replicas(value, target) != current:
        reason = "within tolerance"
    else:
        reason = "steady"
    return _apply(state, spec, current, metric_replicas, stabilized, desired, reason, now_s)


def _apply(
    state: HpaState,
    spec: HpaSpec,
    current: int,
    metric_replicas: int,
    stabilized: int,
    desired: int,
    reason: str,
    now_s: float,
) -> tuple[HpaDecision, HpaState]:
    if desired != current:
        state = record_scale(state, spec, current, desired, now_s)
    return HpaDecision(current, metric_replicas, stabilized, desired, reason), state
