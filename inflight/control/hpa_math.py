"""The HPA's replica arithmetic for one AverageValue external metric, defined once.

The scaler (its ``desired`` gauge), the local HPA loop (:mod:`inflight.control.hpa`) and
the dashboards' tests all derive the replica count the HPA will pick from this one
function, so none of them can forget the tolerance. Pure: no I/O, no clock.

The HPA controller (``pkg/controller/podautoscaler/replica_calculator.go``,
``GetExternalPerPodMetricReplicas``) compares ``usage ÷ (target × current)`` with 1 and
keeps ``current`` while the ratio is inside ``[1 − down, 1 + up]`` (both 10 % unless
the HPA's ``behavior.scaleUp/scaleDown.tolerance`` says otherwise, Kubernetes ≥ 1.33
with the HPAConfigurableTolerance gate); outside it proposes ``ceil(usage ÷ target)``.
``current`` is the scale target's ``status.replicas`` (pods, ready or not).

Worked example of the hold, target 4 (4 slots × saturation 1.0): 10 replicas and
L = 44 (four requests queued) → ratio 44 ÷ 40 = 1.1, inside 10 % → the HPA stays at
10, although ceil(44 ÷ 4) = 11. L = 45 → ratio 1.125 → 12 (ceil 11.25). On 1 replica
the band is narrower than one request: L = 5 → ratio 1.25 → 2.
"""

from __future__ import annotations

import math

#: kube-controller-manager's --horizontal-pod-autoscaler-tolerance default: no change
#: while |usage ÷ (target × current) − 1| ≤ this. Defined in ``inflight.names``, where it
#: is also the default of the trigger's ``hpaScale{Up,Down}Tolerance`` keys.
from inflight.names import HPA_TOLERANCE as HPA_TOLERANCE


def replicas_for_average_value(
    value: float,
    target: float,
    current: int,
    tolerance: float,
    *,
    scale_down_tolerance: float | None = None,
) -> int:
    """Replicas an AverageValue external metric asks for (the HPA's replica calculator).

    ``tolerance`` bounds the ratio above 1 (scale-up), ``scale_down_tolerance`` below 1
    (the same as ``tolerance`` when None). KEDA passes values as milli-quantities, so
    ``value`` and ``target`` are truncated to thousandths first, as on the wire.

    >>> replicas_for_average_value(9.0, 4.0, current=1, tolerance=0.1)
    3
    >>> replicas_for_average_value(4.3, 4.0, current=1, tolerance=0.1)  # within 10 %
    1
    >>> replicas_for_average_value(44.0, 4.0, current=10, tolerance=0.1)  # ratio 1.1
    10
    >>> replicas_for_average_value(44.0, 4.0, current=10, tolerance=0.0)
    11
    >>> replicas_for_average_value(0.0, 4.0, current=2, tolerance=0.1)
    0
    """
    down = tolerance if scale_down_tolerance is None else scale_down_tolerance
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"metric value must be a finite number >= 0, got {value}")
    if not math.isfinite(target) or target <= 0:
        raise ValueError(f"metric target must be a finite number > 0, got {target}")
    if current < 0:
        raise ValueError(f"current replicas must be >= 0, got {current}")
    for name, tol in (("tolerance", tolerance), ("scale_down_tolerance", down)):
        if not math.isfinite(tol) or tol < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {tol}")
    usage_m = int(value * 1000)
    target_m = int(target * 1000)
    if target_m <= 0:
        raise ValueError(f"metric target {target} rounds to 0 milli-units")
    if current > 0:
        ratio = usage_m / (target_m * current)
        if 1.0 - down <= ratio <= 1.0 + tolerance:
            return current
    return math.ceil(usage_m / target_m)


def raw_replicas(value: float, target: float) -> int:
    """``ceil(value ÷ target)`` on the wire's milli-quantities: the count without the hold."""
    return math.ceil(int(value * 1000) / int(target * 1000))
