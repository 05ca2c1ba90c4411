"""The HPA arithmetic and KEDA's zero rules, stepped through time (no clock, no sockets)."""

from __future__ import annotations

import pytest

from inflight.control.hpa import (
    KUBERNETES_DEFAULT_SCALE_UP,
    SHIPPED_BEHAVIOR,
    Behavior,
    HpaSpec,
    HpaState,
    ScalingPolicy,
    ScalingRules,
    hpa_step,
    replicas_for_average_value,
)
from inflight.control.keda import KedaSpec, keda_step


@pytest.mark.parametrize(
    ("value", "target", "current", "expected"),
    [
        (9.0, 4.0, 1, 3),  # ceil(9/4)
        (8.0, 4.0, 1, 2),
        (16.0, 4.0, 1, 4),
        (4.0, 4.0, 1, 1),
        (4.3, 4.0, 1, 1),  # ratio 1.075: inside the 10 % tolerance
        (4.5, 4.0, 1, 2),  # ratio 1.125: outside
        (7.5, 4.0, 2, 2),  # ratio 0.9375: inside
        (7.0, 4.0, 2, 2),  # ratio 0.875: outside -> ceil(7/4) = 2 anyway
        (3.9, 4.0, 2, 1),
        (0.0, 4.0, 2, 0),
        (0.001, 4.0, 1, 1),
        (5.0, 4.0, 0, 2),  # no current replicas: no tolerance check
        (4.0009, 4.0, 1, 1),  # milli-quantity truncation: 4000/4000
    ],
)
def test_average_value_replicas(value, target, current, expected):
    assert replicas_for_average_value(value, target, current, tolerance=0.1) == expected


@pytest.mark.parametrize(
    ("value", "target", "field"),
    [
        (-1.0, 4.0, "value"),
        (float("nan"), 4.0, "value"),
        (1.0, 0.0, "target"),
        (1.0, 0.0001, "target"),
    ],
)
def test_average_value_rejects_bad_input(value, target, field):
    with pytest.raises(ValueError, match=field):
        replicas_for_average_value(value, target, 1, 0.1)


def run_syncs(spec, steps, current=1, target=4.0):
    """Feed (t_s, value) pairs through hpa_step, applying each decision; return counts."""
    state = HpaState()
    counts = []
    for t_s, value in steps:
        decision, state = hpa_step(state, spec, current, value, target, t_s)
        current = decision.desired
        counts.append(current)
    return counts


@pytest.mark.parametrize(
    ("name", "min_r", "max_r", "steps", "expected"),
    [
        ("scale up at once", 1, 2, [(0, 16.0)], [2]),
        ("max clamps", 1, 3, [(0, 40.0)], [3]),
        ("no scale-up at concurrency 4 on 4 slots", 1, 2, [(0, 4.0), (15, 4.0)], [1, 1]),
        (
            "down as soon as the scaler's value drops (HPA window 0)",
            1,
            2,
            [(0, 8.0), (15, 8.0), (30, 4.0)],
            [2, 2, 1],
        ),
        ("min holds", 2, 4, [(0, 0.0)], [2]),
        ("tolerance holds 2 at 7.5", 1, 4, [(0, 8.0), (15, 7.5)], [2, 2]),
    ],
)
def test_shipped_behaviour_scenarios(name, min_r, max_r, steps, expected):
    spec = HpaSpec(min_replicas=min_r, max_replicas=max_r, behavior=SHIPPED_BEHAVIOR)
    assert run_syncs(spec, steps) == expected, name


def test_scale_up_rate_limit_max_of_percent_and_pods():
    # From 1 replica: Percent 100 allows 2, Pods 4 allows 5 -> Max picks 5.
    spec = HpaSpec(min_replicas=1, max_replicas=20)
    decision, _ = hpa_step(HpaState(), spec, 1, 80.0, 4.0, 0.0)
    assert (decision.metric_replicas, decision.desired) == (20, 5)
    assert decision.reason == "scale-up rate limit"


def test_scale_up_rate_limit_counts_changes_inside_the_period():
    spec = HpaSpec(min_replicas=1, max_replicas=40)
    # 1 -> 5 at t=0; at t=10 (inside 15 s) the period started at 1: limit still 5.
    assert run_syncs(spec, [(0, 160.0), (10, 160.0)]) == [5, 5]
    # At t=16 the period starting at 5: max(10, 9) = 10.
    assert run_syncs(spec, [(0, 160.0), (16, 160.0)]) == [5, 10]


def test_percent_only_policy_doubles():
    rules = ScalingRules(0.0, (ScalingPolicy("Percent", 100, 15.0),))
    spec = HpaSpec(1, 10, Behavior(scale_up=rules, scale_down=SHIPPED_BEHAVIOR.scale_down))
    assert run_syncs(spec, [(0, 40.0), (15.5, 40.0), (31, 40.0), (46.5, 40.0)]) == [2, 4, 8, 10]


def test_scale_down_stabilization_window_takes_the_max():
    down = ScalingRules(60.0, (ScalingPolicy("Percent", 100, 15.0),))
    spec = HpaSpec(1, 4, Behavior(KUBERNETES_DEFAULT_SCALE_UP, down))
    counts = run_syncs(spec, [(0, 16.0), (15, 0.0), (45, 0.0), (59.9, 0.0), (60, 0.0)], current=1)
    # The proposal of 4 at t=0 holds while it is inside the 60 s window (t > now - 60).
    assert counts == [4, 4, 4, 4, 1]


def test_scale_up_stabilization_window_takes_the_min():
    up = ScalingRules(30.0, KUBERNETES_DEFAULT_SCALE_UP.policies)
    spec = HpaSpec(1, 4, Behavior(up, SHIPPED_BEHAVIOR.scale_down))
    # First sync seeds the window with the current count (1): no scale-up until 1 leaves it.
    assert run_syncs(spec, [(0, 16.0), (15, 16.0), (31, 16.0)]) == [1, 1, 4]


def test_scale_down_rate_limit_pods_policy():
    down = ScalingRules(0.0, (ScalingPolicy("Pods", 1, 15.0),))
    spec = HpaSpec(1, 8, Behavior(KUBERNETES_DEFAULT_SCALE_UP, down))
    assert run_syncs(spec, [(0, 0.0), (5, 0.0), (16, 0.0), (32, 0.0)], current=4) == [3, 3, 2, 1]


TWO_UP = (ScalingPolicy("Percent", 100, 15.0), ScalingPolicy("Pods", 4, 15.0))
TWO_DOWN = (ScalingPolicy("Percent", 50, 15.0), ScalingPolicy("Pods", 1, 15.0))


@pytest.mark.parametrize(
    ("select", "up", "down"),
    [
        # Up from 2 (metric 80 on target 4 asks for 20): Percent 100 allows 4, Pods 4 allows 6.
        # Down from 8 (metric 0 asks for 1): Percent 50 allows 4, Pods 1 allows 7.
        ("Max", 6, 4),  # the biggest change: highest ceiling, lowest floor
        ("Min", 4, 7),  # the smallest change
        ("Disabled", 2, 8),  # no change at all
    ],
)
def test_select_policy_in_both_directions(select, up, down):
    """Kubernetes' selectPolicy: Max picks the policy allowing the biggest change, in
    either direction; Min the smallest; Disabled keeps the count."""
    rules_up = ScalingRules(0.0, TWO_UP, select_policy=select)
    rules_down = ScalingRules(0.0, TWO_DOWN, select_policy=select)
    spec = HpaSpec(1, 20, Behavior(scale_up=rules_up, scale_down=rules_down))
    assert hpa_step(HpaState(), spec, 2, 80.0, 4.0, 0.0)[0].desired == up
    assert hpa_step(HpaState(), spec, 8, 0.0, 4.0, 0.0)[0].desired == down


def test_out_of_range_current_is_clamped_without_metric():
    spec = HpaSpec(2, 3)
    decision, _ = hpa_step(HpaState(), spec, 5, 0.0, 4.0, 0.0)
    assert (decision.desired, decision.reason) == (3, "above max")
    decision, _ = hpa_step(HpaState(), spec, 1, 100.0, 4.0, 0.0)
    assert (decision.desired, decision.reason) == (2, "below min")


def test_zero_replicas_disables_the_hpa():
    decision, state = hpa_step(HpaState(), HpaSpec(1, 3), 0, 100.0, 4.0, 0.0)
    assert decision.desired == 0
    assert state == HpaState()


def test_reasons_name_the_cause():
    spec = HpaSpec(1, 2)
    d, _ = hpa_step(HpaState(), spec, 1, 4.3, 4.0, 0.0)
    assert d.reason == "within tolerance"
    d, _ = hpa_step(HpaState(), spec, 1, 4.0, 4.0, 0.0)
    assert d.reason == "steady"
    d, _ = hpa_step(HpaState(), spec, 1, 40.0, 4.0, 0.0)
    assert d.reason == "at max replicas"
    d, _ = hpa_step(HpaState(), spec, 2, 1.0, 4.0, 0.0)
    assert d.reason == "scale down"


def test_behavior_scales_with_time_scale():
    scaled = SHIPPED_BEHAVIOR.scaled(0.1)
    assert scaled.scale_up.policies[0].period_s == pytest.approx(1.5)
    assert scaled.scale_down.stabilization_window_s == 0.0


def test_shipped_behaviour_numbers():
    """The numbers the Kubernetes manifests copy; changing them is a design decision."""
    up, down = SHIPPED_BEHAVIOR.scale_up, SHIPPED_BEHAVIOR.scale_down
    assert up.stabilization_window_s == 0
    assert [(p.type, p.value, p.period_s) for p in up.policies] == [
        ("Percent", 100, 15.0),
        ("Pods", 4, 15.0),
    ]
    assert up.select_policy == "Max"
    assert down.stabilization_window_s == 0
    assert [(p.type, p.value, p.period_s) for p in down.policies] == [("Percent", 100, 15.0)]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"min_replicas": 0, "max_replicas": 2}, "min_replicas"),
        ({"min_replicas": 3, "max_replicas": 2}, "max_replicas"),
        ({"min_replicas": 1, "max_replicas": 2, "tolerance": -0.1}, "tolerance"),
    ],
)
def test_spec_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HpaSpec(**kwargs)


def test_policy_validation():
    with pytest.raises(ValueError, match="period_s"):
        ScalingPolicy("Pods", 1, 0.0)
    with pytest.raises(ValueError, match="type"):
        ScalingPolicy("Replicas", 1, 15.0)


# --- KEDA ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("min_r", "current", "active", "last_active", "now", "desired", "new_last"),
    [
        (0, 0, True, 0.0, 50.0, 1, 50.0),  # activation from zero
        (2, 0, True, 0.0, 50.0, 2, 50.0),  # to minReplicaCount when > 1
        (0, 2, True, 0.0, 50.0, None, 50.0),  # active: HPA's business
        (0, 1, False, 0.0, 300.0, None, 0.0),  # cooldown not yet over (strictly after)
        (0, 1, False, 0.0, 300.5, 0, 0.0),  # idle past the cooldown -> zero
        (1, 1, False, 0.0, 999.0, None, 0.0),  # min 1: never to zero
        (0, 0, False, 0.0, 999.0, None, 0.0),  # already zero
        (2, 1, False, 0.0, 1.0, 2, 0.0),  # below min
    ],
)
def test_keda_step(min_r, current, active, last_active, now, desired, new_last):
    decision = keda_step(KedaSpec(min_r, 300.0), current, active, last_active, now)
    assert (decision.desired, decision.last_active_s) == (desired, new_last)


def test_keda_hpa_min_is_at_least_one():
    assert KedaSpec(0, 1.0).hpa_min_replicas == 1
    assert KedaSpec(3, 1.0).hpa_min_replicas == 3
    with pytest.raises(ValueError, match="min_replicas"):
        KedaSpec(-1, 1.0)
