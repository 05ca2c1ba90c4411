"""The router's hold order and its lateness bound (inflight.control.hold_order): pure, with
stepped time (the sustained-overload experiment through the real Dispatcher:
test_experiments_lateness.py)."""

from __future__ import annotations

import pytest

from inflight.control.hold_order import (
    LATE,
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
