"""Partial data is judged over the decision's span, not the floor's memory (issue #24).

With the floor learned from recent peaks on (``floorWindowSeconds`` 900), the range query
looks back 910 s; a router target down at any step of *that* kept the window partial, so
the guard forbade every scale-down for 15 minutes after a blip. The sources now judge a
target down over ``PolicySpec.decision_span_s`` (scale-down + scale-up windows, 70 s):
stepped here through the scaler's own window builder (``window_from_matrix``) and policy
(``evaluate``) on Prometheus' matrix of the simulated scrapes, no clock, no sleep.
"""

from __future__ import annotations

import dataclasses
import math

from external_scaler.metadata import parse_metadata
from external_scaler.sources.prometheus import window_from_matrix
from external_scaler.sources.promql import range_query
from inflight.control.policy import PolicySpec, evaluate
from inflight.control.trigger import scaler_metadata
from inflight.sim import scrapes as S
from tests.unit.policy_pins import PRE_HEADROOM

FLOOR = {"floorWindowSeconds": "900", "floorFraction": "0.6"}


def _scrapes() -> S.Scrapes:
    """Two router targets; L = 20 (5 replicas at target 4) until 200 s, then 4; 5 ready
    throughout; target 0 fails its scrapes from 300 to 310 s (a blip). Every 5 s to 1500 s."""
    s = S.Scrapes(2, (S.RouterDown(300.0, 310.0),))
    for t in range(0, 1501, 5):
        level = 20.0 if t < 200 else 4.0
        values = dict.fromkeys(S.SERIES, 0.0)
        values.update({S.INFLIGHT: level, S.RECEIVED: 10.0 * t, S.READY: 5.0,
                       S.VLLM_RUNNING: level})  # fmt: skip
        s.scrape(float(t), values)
    return s


# Every 5 s around the blip and its span, then two instants inside and past the floor.
TIMES = (*range(300, 401, 5), 1000, 1400)


def _step(overrides: dict[str, str], whole_lookback: bool = False) -> dict[int, tuple[bool, int]]:
    """now → (window partial, replicas desired) at each of :data:`TIMES`."""
    s = _scrapes()
    spec = parse_metadata(
        scaler_metadata(4, 1.0, "saturation", {**PRE_HEADROOM, **overrides}, max_replicas=8)
    )
    query = range_query(spec)
    if whole_lookback:  # as before: a target down anywhere in the lookback
        query = dataclasses.replace(query, partial_span_s=math.inf)
    out = {}
    for now in TIMES:
        start, end = query.bounds(float(now))
        window = window_from_matrix(s.matrix(query, start, end), query, start, end)
        d = evaluate(window, spec.policy, end)
        out[now] = (bool(window.partial), d.desired_replicas)
    return out


def test_the_decision_span_leaves_out_the_floors_memory() -> None:
    assert PolicySpec(queue_headroom=0.0, scale_down_window_s=60.0).decision_span_s == 70.0
    floor = PolicySpec(
        queue_headroom=0.0, scale_down_window_s=60.0, floor_window_s=900.0, floor_fraction=0.6
    )
    # the floor's memory, twice with the bursts' recurrence (anticipateSeconds, on by default)
    assert (floor.decision_span_s, floor.lookback_s) == (70.0, 1810.0)
    assert dataclasses.replace(floor, anticipate_s=0.0).lookback_s == 910.0
    growth = PolicySpec(
        queue_headroom=0.0,
        scale_down_window_s=60.0,
        growth_horizon_s=120.0,
        growth_window_s=60.0,
        floor_window_s=900.0,
    )
    assert growth.decision_span_s == 120.0  # the growth's two windows are decided on
    q = range_query(parse_metadata({**PRE_HEADROOM, **FLOOR}))
    assert (q.lookback_s, q.partial_span_s) == (1810.0, 70.0)


def test_a_blip_holds_the_count_for_the_decision_span_not_the_floors_memory() -> None:
    steps = _step(FLOOR)
    partial_at = [t for t, (partial, _) in steps.items() if partial]
    # Down 300-310 s: partial while a down step is within the last 70 s, not after.
    assert partial_at and min(partial_at) == 300 and max(partial_at) <= 310 + 70 + 5
    # Held at 5 while partial (the window reads 4; the floor of a lone peak, the default's
    # 0.3 x 20 = 6: 2 replicas) ...
    assert all(steps[t][1] == 5 for t in partial_at)
    # ... then the floor's 2, until the peak at 195 s leaves its 900 s memory; then 1.
    assert steps[400] == (False, 2) and steps[1000] == (False, 2)
    assert steps[1400] == (False, 1)


def test_judged_over_the_whole_lookback_the_blip_held_the_count_for_fifteen_minutes() -> None:
    """What the sources did before: a 900 s floor kept the window partial (no scale-down)
    until the blip left the 910 s lookback."""
    steps = _step(FLOOR, whole_lookback=True)
    assert steps[1000] == (True, 5)  # 690 s after the blip: still held at 5
    assert not _step(FLOOR)[1000][0]


def test_without_the_floor_only_the_step_before_the_span_changes() -> None:
    # Without the floor the lookback is the decision's span (70 s) plus the one step the
    # range query reads before it: only a blip whose last down step (309 s) is that step
    # (at 380 s: 71 s ago, older than every mean the maximum takes) no longer holds.
    off = {"floorWindowSeconds": "0", "startupSeconds": "0"}  # no 900 s memory of any kind
    whole, span = _step(off, whole_lookback=True), _step(off)
    assert [t for t in span if span[t] != whole[t]] == [380]
    assert whole[380] == (True, 5) and span[380] == (False, 1)
