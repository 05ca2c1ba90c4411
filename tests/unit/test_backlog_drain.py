"""The backlog drain (``backlogDrainSeconds``, experimental, the simulator's only): a
backlog that grows because the arrivals outrun the fleet asks for the arrivals' offered
load plus what drains it, not its whole size; a closed loop's flat L, or no queue, is
left to L."""

from __future__ import annotations

from dataclasses import replace

import pytest

from inflight.control.policy import Sample, decide, drain_level
from tests.unit.policy_pins import STAGE_ALONE_SPEC

pytestmark = pytest.mark.unit

# The drain alone (no floor, no late hold, the SLO stage off: L counted in full).
OFF = replace(STAGE_ALONE_SPEC, floor_window_s=0.0, startup_s=0.0)
SPEC = replace(OFF, backlog_drain_s=60.0)


def _ramp(values: list[tuple[float, float]]) -> list[Sample]:
    return [Sample(t, v) for t, v in values]


def cold_burst() -> tuple[list[Sample], list[Sample], list[Sample]]:
    """One ready replica (4 slots); a burst at once, then arrivals at 2.6/s that outrun it:
    L rises from 20 to 40 over the last 10 s; 4 slots busy throughout, 1 completion every
    1.25 s (S = 5 s)."""
    times = [float(t) for t in range(0, 61, 5)]
    inflight = _ramp([(t, 4 + 36 * t / 60) for t in times])
    inflight[-3] = Sample(50.0, 20.0)  # 10 s before now
    arrivals = _ramp([(t, 4 + 36 * t / 60 + t / 1.25) for t in times])
    ready = _ramp([(t, 1.0) for t in times])
    return inflight, arrivals, ready


def test_a_growing_backlog_asks_for_its_arrivals_and_a_drain_not_its_size() -> None:
    inflight, arrivals, ready = cold_burst()
    got = drain_level(inflight, arrivals, ready, 1, SPEC, 60.0)
    assert got is not None
    need, why = got
    # λ = (36 + 48) / 60 = 1.4/s; S = 5 s: a = 7; + √7 + 36 queued × 5 ÷ 60 = 12.65.
    assert need == pytest.approx(7 + 7**0.5 + 36 * 5 / 60, rel=0.02)
    assert "backlog drain" in why
    decision = decide(inflight, SPEC, 60.0, 1, arrivals, ready_series=ready)
    assert decision.value == pytest.approx(need) and decision.desired_replicas == 4
    assert decision.reason.startswith("backlog drain")
    # Off (the scaler's only setting): L stands (its mean over the scale-up window).
    off = decide(inflight, OFF, 60.0, 1, arrivals, ready_series=ready)
    assert off.value == 38.5 and off.desired_replicas == 10


def test_a_closed_loops_flat_backlog_and_no_queue_are_left_to_l() -> None:
    inflight, arrivals, ready = cold_burst()
    flat = [Sample(s.t_s, 16.0) for s in inflight]  # 16 clients on 4 slots: L steps, stays
    assert drain_level(flat, arrivals, ready, 1, SPEC, 60.0) is None
    assert decide(flat, SPEC, 60.0, 1, arrivals, ready_series=ready).value == 16
    # Enough ready slots for L: no queue, nothing to drain.
    assert drain_level(inflight, arrivals, ready, 10, SPEC, 60.0) is None
