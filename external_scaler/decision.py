"""One trigger's decision from what its source observed: capacity, then the policy.

Pure (no I/O, no clock). The live servicer (``external_scaler.servicer``) and the
simulated scaler (``inflight.sim.scaler``) both call :func:`decide`, so the simulator
decides exactly as the scaler does: the window of L, vLLM's KV series and the router's
token demand (``Observed.kv``) become the window the policy sees (the maximum over
request slots and KV tokens, ``inflight.control.capacity.effective_window``;
docs/capacity.md), the policy decides on it at the source's aligned end, and the
decision's reason names the dimension that binds over the policy's scale-up window (the
span whose mean a scale-up decides on); each measured dimension's mean L over that span
comes with it (``Decided.inflight``, the scaler's ``inflight_scaler_dimension_inflight``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from external_scaler.metadata import ScalerSpec
from external_scaler.sources import Observed
from inflight.control.capacity import (
    DIMENSION_KV,
    DIMENSION_REQUESTS,
    Capacity,
    Dimension,
    effective_window,
)
from inflight.control.policy import Decision, evaluate


@dataclass(frozen=True)
class Decided:
    """The policy's decision (its reason ends with the capacity note), the dimension
    that binds over the scale-up window (``requests`` or ``kv_tokens``), and the mean L in
    each dimension measured there (``inflight``: ``requests`` → L, ``kv_tokens`` → the
    KV-equivalent L; a dimension not measured, ``capacity: requests``, no KV series or
    nothing running, has no entry)."""

    decision: Decision
    dimension: Dimension
    capacity: Capacity
    inflight: Mapping[Dimension, float] = field(default_factory=dict)


def costed_decision(spec: ScalerSpec, observed: Observed) -> Decided:
    """``evaluate`` on ``observed``'s window with L replaced by ``max(L, L_kv)`` per step.

    Raises what ``evaluate`` raises (``NoSamples``); ``spec.capacity`` ``requests`` or a
    window without KV series leaves L as it is. ``L_kv`` is the router's exact token demand
    where ``observed.kv`` has it with a known capacity, else vLLM's usage estimate; the
    reason's note says which (``from router demand`` / ``from vLLM usage``).
    """
    capacity = effective_window(
        observed.window,
        observed.kv,
        spec.capacity,
        spec.policy.slots_per_replica,
        spec.policy.scale_up_window_s,
    )
    decision = evaluate(capacity.window, spec.policy, observed.end_s)
    inflight: dict[Dimension, float] = {}
    if capacity.inflight is not None:
        inflight[DIMENSION_REQUESTS] = capacity.inflight
    if capacity.kv_inflight is not None:
        inflight[DIMENSION_KV] = capacity.kv_inflight
    return Decided(
        dataclasses.replace(decision, reason=f"{decision.reason}; {capacity.note}"),
        capacity.dimension,
        capacity,
        inflight,
    )
