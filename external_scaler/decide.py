"""One trigger's decision from what its source observed: capacity, then the policy.

Pure (no I/O, no clock). The live servicer (``external_scaler.servicer``) and the
simulated scaler (``inflight.sim.scaler``) both call :func:`decide`, so the simulator
decides exactly as the scaler does: the window of L, vLLM's KV series and the router's
token demand (``Observed.kv``) become the window the policy sees (the maximum over
request slots and KV tokens, ``inflight.control.capacity.effective_window``;
docs/capacity.md), the policy decides on it at the source's aligned end, and the
decision's reason names the dimension that binds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from external_scaler.metadata import ScalerSpec
from external_scaler.sources import Observed
from inflight.control.capacity import Capacity, Dimension, effective_window
from inflight.control.policy import Decision, evaluate


@dataclass(frozen=True)
class Decided:
    """The policy's decision (its reason ends with the capacity note) and the dimension
    that binds at the latest step (``requests`` or ``kv_tokens``)."""

    decision: Decision
    dimension: Dimension
    capacity: Capacity


def decide(spec: ScalerSpec, observed: Observed) -> Decided:
    """``evaluate`` on ``observed``'s window with L replaced by ``max(L, L_kv)`` per step.

    Raises what ``evaluate`` raises (``NoSamples``); ``spec.capacity`` ``requests`` or a
    window without KV series leaves L as it is. ``L_kv`` is the router's exact token demand
    where ``observed.kv`` has it with a known capacity, else vLLM's usage estimate; the
    reason's note says which (``from router demand`` / ``from vLLM usage``).
    """
    capacity = effective_window(
        observed.window, observed.kv, spec.capacity, spec.policy.slots_per_replica
    )
    decision = evaluate(capacity.window, spec.policy, observed.end_s)
    return Decided(
        dataclasses.replace(decision, reason=f"{decision.reason}; {capacity.note}"),
        capacity.dimension,
        capacity,
    )
