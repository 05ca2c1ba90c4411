"""KEDA's own replica rules: activation from zero and scale to zero after the cooldown.

KEDA leaves 1..N to the HPA and handles only the edges (its ``scaleExecutor``):

* active (IsActive true, or a ``true`` pushed on StreamIsActive) and at 0 replicas →
  scale to ``max(1, minReplicaCount)`` at once; every active check refreshes
  ``lastActiveTime``;
* not active, ``minReplicaCount`` 0, replicas > 0, and ``lastActiveTime + cooldownPeriod``
  in the past → scale to 0;
* below ``minReplicaCount`` → scale to it.

One departure, on purpose: KEDA scales in at once when ``lastActiveTime`` was never set;
the local stack starts its clock at start-up instead (the caller passes that time as the
first ``last_active_s``), so a fresh ``inflight up --min-replicas 0`` does not kill the
replica it just started before anyone could use it.

Pure: the caller passes ``now_s`` and threads ``last_active_s`` through.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KedaSpec:
    """``minReplicaCount`` (0 allows scale to zero) and ``cooldownPeriod`` in seconds."""

    min_replicas: int
    cooldown_s: float

    def __post_init__(self) -> None:
        if self.min_replicas < 0:
            raise ValueError(f"min_replicas must be >= 0, got {self.min_replicas}")
        if self.cooldown_s < 0:
            raise ValueError(f"cooldown_s must be >= 0, got {self.cooldown_s}")

    @property
    def hpa_min_replicas(self) -> int:
        """KEDA creates its HPA with ``minReplicas = max(1, minReplicaCount)``."""
        return max(1, self.min_replicas)


@dataclass(frozen=True)
class KedaDecision:
    """``desired`` is None when KEDA leaves the count to the HPA."""

    desired: int | None
    last_active_s: float
    reason: str


def keda_step(
    spec: KedaSpec, current: int, active: bool, last_active_s: float, now_s: float
) -> KedaDecision:
    """KEDA's rule for one activation check.

    >>> keda_step(KedaSpec(0, 300.0), current=0, active=True, last_active_s=0.0, now_s=10.0)
    KedaDecision(desired=1, last_active_s=10.0, reason='activated from zero')
    >>> keda_step(KedaSpec(0, 300.0), current=1, active=False, last_active_s=0.0, now_s=301.0)
    KedaDecision(desired=0, last_active_s=0.0, reason='idle for the cooldown (300.0 s)')
    """
    if active:
        if current == 0:
            return KedaDecision(spec.hpa_min_replicas, now_s, "activated from zero")
        return KedaDecision(None, now_s, "active")
    if current < spec.min_replicas:
        return KedaDecision(spec.min_replicas, last_active_s, "below min replicas")
    if spec.min_replicas == 0 and current > 0 and now_s - last_active_s > spec.cooldown_s:
        return KedaDecision(0, last_active_s, f"idle for the cooldown ({spec.cooldown_s} s)")
    return KedaDecision(None, last_active_s, "idle" if current == 0 else "inactive, cooling down")


def replicas_settled(desired: int, active: bool, min_replicas: int, max_replicas: int) -> int:
    """The count KEDA and its HPA settle on for an answer the HPA turns into ``desired``.

    The HPA clamps to ``[max(1, minReplicaCount), maxReplicaCount]``; an inactive trigger
    with ``minReplicaCount`` 0 goes to 0 (after the cooldown). The scaler's policy uses it
    to tell an answer that lowers the count from one that meets a bound anyway.

    >>> replicas_settled(0, False, 1, 5)  # at the minimum already: nothing to lower
    1
    >>> replicas_settled(0, False, 0, 5)  # scale to zero
    0
    >>> replicas_settled(9, True, 1, 5)  # at most the maximum
    5
    """
    if not active and min_replicas == 0:
        return 0
    return min(max(desired, 1, min_replicas), max_replicas)
