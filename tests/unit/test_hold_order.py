"""The router's hold order and its lateness bound (inflight.control.hold_order): pure, with
stepped time; and the sustained-overload experiment of issue 25 through the real
Dispatcher (inflight.bench.components.lateness, virtual time)."""

from __future__ import annotations

import pytest

from inflight.bench.components import lateness
from inflight.control.hold_order import (
    LATE,
    MAX_LATE_S,
    SERVE,
    SHED,
    HoldClass,
    HoldClassError,
    HoldPlan,
    Step,
    next_step,
    parse_class,
    plan_from_classes,
    single_plan,
)

NEVER = float("-inf")  # the pool always had a ready endpoint
TWO = HoldPlan((HoldClass("high", 0, 1.5), HoldClass("low", 10, 5.0)), max_late_s=30.0)


@pytest.mark.parametrize(
    ("heads", "now_s", "step"),
    [
        ([99.0, None, None, None], 100.0, Step(SERVE, 0)),  # on time
        ([98.5, None, None, None], 100.0, Step(LATE, 0)),  # waited exactly the deadline
        ([None, 90.0, 99.0, None], 100.0, Step(SERVE, 1)),  # high's late before low
        ([None, None, 60.0, None], 100.0, Step(LATE, 2)),
        ([99.0, None, None, 60.0], 100.0, Step(SHED, 3)),  # overtaken 40 s ≥ 5 + 30
        ([99.0, None, None, 70.0], 100.0, Step(SERVE, 0)),  # overtaken 30 s < 35
        ([None, None, None, 10.0], 100.0, Step(SERVE, 3)),  # at the head: served, not shed
        ([None, 95.0, None, 96.0], 100.0, Step(SERVE, 1)),  # late lanes: the first served
        ([None, 95.0, None, 60.0], 100.0, Step(SHED, 3)),  # ... the other overtaken
    ],
)
def test_next_step(heads: list[float | None], now_s: float, step: Step) -> None:
    assert next_step(TWO, heads, now_s, NEVER) == step


def test_the_bound_counts_from_when_a_replica_was_ready() -> None:
    """Held through a cold start (no ready endpoint): not refused when replicas arrive."""
    heads: list[float | None] = [99.0, None, None, 10.0]
    assert next_step(TWO, heads, 100.0, ready_since_s=99.5) == Step(SERVE, 0)
    heads[0] = 134.0
    assert next_step(TWO, heads, 135.0, ready_since_s=99.5) == Step(SHED, 3)


def test_without_a_bound_the_late_are_never_refused() -> None:
    plan = HoldPlan(TWO.classes, max_late_s=None)
    assert next_step(plan, [99.0, None, None, -900.0], 100.0, NEVER) == Step(SERVE, 0)


def test_a_fifo_plan_needs_no_clock_and_a_fifo_class_is_bounded_from_its_hold() -> None:
    assert not single_plan(None, None).timed and not single_plan(None, 30.0).timed
    assert single_plan(1.5, 30.0).timed
    plan = HoldPlan((HoldClass("a", 0, 1.0), HoldClass("b", 5, None)), max_late_s=10.0)
    assert next_step(plan, [99.5, None, 95.0, None], 100.0, NEVER) == Step(SERVE, 0)
    assert next_step(plan, [99.5, None, 90.0, None], 100.0, NEVER) == Step(SHED, 2)


def test_classes_by_priority_and_their_specs() -> None:
    plan = plan_from_classes(["batch:100:shed", "chat:0:1.5", "bulk:10:fifo"], 30.0)
    assert [c.name for c in plan.classes] == ["chat", "bulk", "batch"]
    assert plan.classes[2].sheddable and plan.classes[1].deadline_s is None
    assert [plan.class_of(p) for p in (-5, 0, 1, 10, 11, 100, 1000)] == [0, 0, 1, 1, 2, 2, 2]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("chat:0", "expected NAME:MAX_PRIORITY:DEADLINE_S"),
        ("chat:0:1:2", "expected NAME:MAX_PRIORITY:DEADLINE_S"),
        (":0:1", "NAME must be"),
        ("c h:0:1", "NAME must be"),
        ("chat:high:1", "MAX_PRIORITY must be an integer, got 'high'"),
        ("chat:0:soon", "DEADLINE_S must be seconds, 'fifo' or 'shed', got 'soon'"),
        ("chat:0:0", "DEADLINE_S must be > 0"),
        ("chat:0:-1", "DEADLINE_S must be > 0"),
        ("chat:0:inf", "DEADLINE_S must be > 0 and finite"),
    ],
)
def test_bad_class_specs_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(HoldClassError, match=message):
        parse_class(spec)


@pytest.mark.parametrize(
    ("specs", "max_late_s", "message"),
    [
        (["a:0:1", "a:5:1"], 30.0, "class 'a' given twice"),
        (["a:0:1", "b:0:1"], 30.0, r"max priority 0 must be above 0 \(class 'a'\)"),
        (["a:0:1"], 0.0, "--max-late-s must be > 0"),
        ([], 30.0, "at least one class"),
    ],
)
def test_bad_plans_say_what_is_wrong(specs: list[str], max_late_s: float, message: str) -> None:
    with pytest.raises(HoldClassError, match=message):
        plan_from_classes(specs, max_late_s)


def test_sustained_overload_without_the_bound_the_late_wait_to_the_queue_timeout() -> None:
    """Issue 25's experiment as it was: the late are served only when no on-time request
    is held, which under sustained overload is almost never; --queue-timeout-s ends them."""
    summary, _ = lateness.run(None)
    assert summary.arrived == 751 and summary.still_held == 0
    assert summary.timed_out_504 > 50 and summary.refused_503 == 0
    assert summary.first_late_wait_s == pytest.approx(300.0)


def test_sustained_overload_with_the_bound_nobody_waits_past_it() -> None:
    """The bound: deadline 1.5 s + --max-late-s + one service (the gap between freed
    slots, when the check runs). Everyone is served or refused with 503; no 504."""
    summary, outcomes = lateness.run(MAX_LATE_S)
    bound_s = 1.5 + MAX_LATE_S + 1.0
    assert len(outcomes) == summary.arrived == 751 and summary.still_held == 0
    assert max(o.wait_s for o in outcomes) <= bound_s
    assert summary.timed_out_504 == 0 and summary.refused_503 > 0
    # The on-time requests are served as before: the bound refuses only the late.
    unbounded, _ = lateness.run(None)
    assert summary.served_on_time == unbounded.served_on_time
    assert all(o.wait_s >= 1.5 + MAX_LATE_S for o in outcomes if o.status == 503)
