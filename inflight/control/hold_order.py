"""How the router orders the requests it holds, per control plane: one rule for
``inflight up`` (``inflight.up.stack``) and ``inflight sim`` (``inflight.sim.core``).

The router's ``--hold-deadline-s`` (``router.dispatch``) serves held requests that can
still meet their time-to-first-token target before those already past it. inflight's own
policies (saturation, qps, fixed replicas) run with it. A peer's run models that system
as deployed, and each of those holds or queues first come, first served: Knative's
activator and queue-proxy, Ray Serve's router, llm-d's flow control (FCFS within a
priority band) and vLLM's own scheduler (``--scheduling-policy fcfs`` by default). So a
peer's run keeps the router's FIFO.
"""

from __future__ import annotations

from typing import Final

#: ``inflight up --hold-deadline-s``'s default, seed seconds: the open-loop benchmark's
#: time-to-first-token target (2 s, ``inflight.measure.slo.DEFAULT_SLO``) less 0.5 s for the
#: prefill and the first token. Chosen with ``inflight sim``: SLO attainment is flat from
#: 1.25 to 1.9 s on the ramp, spike and diurnal scenarios (docs/benchmark-openloop.md).
HOLD_DEADLINE_S: Final = 1.5


def router_hold_deadline_s(
    deadline_s: float, *, peer: bool, peers_too: bool = False
) -> float | None:
    """The router's ``--hold-deadline-s`` (in ``deadline_s``'s unit) for a run, or None
    (FIFO): None when ``deadline_s`` is 0 or the run is a peer's control plane, unless
    ``peers_too`` (``inflight sim --hold-deadline-peers``: what the order alone is worth,
    each peer's autoscaler behind inflight's router instead of its own system's queue)."""
    if deadline_s < 0:
        raise ValueError(f"--hold-deadline-s must be ≥ 0, got {deadline_s:g}")
    if deadline_s == 0 or (peer and not peers_too):
        return None
    return deadline_s


def hold_order_note(deadline_s: float, peers_too: bool = False) -> str:
    """A comparison's note on how the router ordered held requests (seed seconds)."""
    if deadline_s == 0:
        return "The router held requests first come, first served under every policy."
    if peers_too:
        return (
            f"Under every policy, the peers' too (--hold-deadline-peers), the router served "
            f"held requests still within --hold-deadline-s {deadline_s:g} s before those "
            "past it: the peers' autoscalers behind inflight's router, not their own systems."
        )
    return (
        f"Under inflight's own policies the router served held requests still within "
        f"--hold-deadline-s {deadline_s:g} s before those past it; under the peers' it held "
        "them first come, first served, as their own systems do (inflight/control/hold_order.py)."
    )
