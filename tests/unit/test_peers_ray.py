"""Ray Serve's default policy on Ray's own test cases: the pure policy and controller pass
(inflight/control/peers/ray_serve.py), then its loop (inflight/planes/peers/ray_serve.py).

From ray-project/ray ``python/ray/serve/tests/unit/test_autoscaling_policy.py`` (commit
01624ad4): ``_run_upscale_downscale_flow`` (a fake clock advancing 0.1 s per call, as the
controller's loop), ``test_upscale_downscale_delay``, ``test_replicas_delayed_startup``,
``test_fluctuating_ongoing_requests``, ``test_single_replica_receives_all_requests`` and the
scaling-factor cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from inflight.control.peers import ray_serve
from inflight.control.peers.base import Decision, Replicas, Signal
from inflight.control.peers.ray_serve import (
    DelayState,
    HandleMetrics,
    RaySpec,
    RayState,
    controller_pass,
    push,
    record,
    scaling_factors,
)
from inflight.planes.autoscaler import Observation
from inflight.planes.peers.base import PeerIO
from inflight.planes.peers.ray_serve import RayLoop
from inflight.planes.scaler_client import ScalerUnavailable
from inflight.statedir import DecisionRecord

TICKS_PER_S = 10  # round(1 / CONTROL_LOOP_INTERVAL_S)


class Policy:
    """Ray's wrapped default policy with its state, called on a clock that advances 0.1 s
    per call (the test's ``_advance_time``)."""

    def __init__(self, spec: RaySpec) -> None:
        self.spec = spec
        self.state = DelayState()
        self.tick = 0

    def __call__(self, total: float, current: int, target: int) -> int:
        now = self.tick / TICKS_PER_S
        self.tick += 1
        decision, self.state = ray_serve.policy(self.spec, self.state, total, current, target, now)
        return decision.replicas


def run_upscale_downscale_flow(
    policy: Policy, overload: float, start: int, upscale_target: int
) -> None:
    """``_run_upscale_downscale_flow``."""
    spec = policy.spec
    up_wait = math.ceil(spec.upscale_delay_s * TICKS_PER_S)
    down_wait = math.ceil(spec.downscale_delay_s * TICKS_PER_S)
    zero_delay = spec.downscale_to_zero_delay_s or spec.downscale_delay_s
    zero_wait = math.ceil(zero_delay * TICKS_PER_S)

    for i in range(up_wait):  # scale up only after enough consecutive decisions
        assert policy(overload, start, start) == start, i
    assert policy(overload, start, start) == upscale_target
    for i in range(down_wait):
        assert policy(0, upscale_target, upscale_target) == upscale_target, i
    assert policy(0, upscale_target, upscale_target) == 1
    for i in range(zero_wait):
        assert policy(0, 1, 1) == 1, i
    assert policy(0, 1, 1) == 0
    for i in range(up_wait // 2):  # some scale-up decisions, not enough
        assert policy(overload, 1, 1) == 1, i
    policy(0, 1, 1)  # interrupted by a scale-down decision: the streak starts again
    for i in range(up_wait):
        assert policy(overload, 1, 1) == 1, i
    assert policy(overload, 1, 1) == upscale_target
    for i in range(down_wait // 2):
        assert policy(0, upscale_target, upscale_target) == upscale_target, i
    policy(overload, upscale_target, upscale_target)  # interrupted by a scale-up decision
    for i in range(down_wait):
        assert policy(0, upscale_target, upscale_target) == upscale_target, i
    assert policy(0, upscale_target, upscale_target) == 1
    for i in range(zero_wait // 2):
        assert policy(0, 1, 1) == 1, i
    policy(overload, 1, 1)  # interrupted
    for i in range(zero_wait):
        assert policy(0, 1, 1) == 1, i
    assert policy(0, 1, 1) == 0


@pytest.mark.parametrize("downscale_to_zero_delay_s", [None, 300.0])
def test_upscale_downscale_delay(downscale_to_zero_delay_s: float | None) -> None:
    spec = RaySpec(
        min_replicas=0,
        max_replicas=2,
        target_ongoing_requests=1,
        upscale_delay_s=30.0,
        downscale_delay_s=600.0,
        downscale_to_zero_delay_s=downscale_to_zero_delay_s,
    )
    policy = Policy(spec)
    # Cold start: 0 replicas and a request waiting -> 1 at once, no delay.
    decision, _ = ray_serve.policy(spec, DelayState(), 1, 0, 0, 0.0)
    assert decision.replicas == 1
    run_upscale_downscale_flow(policy, overload=2, start=1, upscale_target=2)


def test_replicas_delayed_startup() -> None:
    spec = RaySpec(
        min_replicas=1,
        max_replicas=200,
        upscale_delay_s=0,
        downscale_delay_s=100000,
        target_ongoing_requests=1,
    )
    policy = Policy(spec)
    assert policy(100, 1, 1) == 100
    assert policy(100, 1, 100) == 100  # no new replica ran yet
    assert policy(123, 3, 100) == 123  # two new ones
    assert policy(10, 4, 123) == 123  # drained, but the downscale delay holds


@pytest.mark.parametrize("delay_s", [30.0, 0.0])
def test_fluctuating_ongoing_requests(delay_s: float) -> None:
    spec = RaySpec(
        min_replicas=1,
        max_replicas=10,
        upscale_delay_s=delay_s,
        downscale_delay_s=delay_s,
        target_ongoing_requests=50,
    )
    policy = Policy(spec)
    for trial in range(1000):
        if trial % 2 == 0:
            assert policy(100, 1, 1) == (1 if delay_s > 0 else 2), trial
        else:
            assert policy(40, 2, 2) == (2 if delay_s > 0 else 1), trial


@pytest.mark.parametrize("ongoing", [20, 100, 10])
def test_single_replica_receives_all_requests(ongoing: int) -> None:
    spec = RaySpec(
        min_replicas=1,
        max_replicas=50,
        target_ongoing_requests=5,
        upscale_delay_s=0.0,
        downscale_delay_s=0.0,
    )
    assert Policy(spec)(ongoing, 4, 4) == ongoing / 5


def test_scaling_factor_scale_up_from_zero() -> None:
    """``test_scaling_factor_scale_up_from_0_replicas``: 1 × 10, then ceil(1 × 0.5)."""
    spec = RaySpec(min_replicas=0, max_replicas=2, upscaling_factor=10)
    decision, _ = ray_serve.policy(spec, DelayState(), 1, 0, 0, 0.0)
    assert decision.wanted == 10 and decision.replicas == 2  # bounded by max_replicas
    spec = RaySpec(min_replicas=0, max_replicas=2, upscaling_factor=0.5)
    assert ray_serve.policy(spec, DelayState(), 1, 0, 0, 0.0)[0].replicas == 1


def test_scaling_factor_scale_down_to_zero() -> None:
    """``test_scaling_factor_scale_down_to_0_replicas``: 5 -> 1 -> 0 with no delay, and a
    small factor still reaches 0 (never stuck)."""
    spec = RaySpec(
        min_replicas=0,
        max_replicas=5,
        downscaling_factor=10,
        upscale_delay_s=0,
        downscale_delay_s=0,
    )
    policy = Policy(spec)
    assert policy(0, 5, 5) == 1
    assert policy(0, 1, 1) == 0
    slow = Policy(RaySpec(**{**spec.__dict__, "downscaling_factor": 0.2}))
    n = 5
    for _ in range(5):
        n = slow(0, n, n)
    assert n == 0
    assert scaling_factors(0.0, 3, slow.spec) == 2  # ceil(3 - 0.6) = 3, unstuck by one


def test_the_defaults() -> None:
    spec = RaySpec()
    assert spec.target_ongoing_requests == 2
    assert (spec.upscale_delay_s, spec.downscale_delay_s, spec.look_back_period_s) == (30, 600, 30)
    assert (spec.upscaling_factor, spec.downscaling_factor) == (1, 1)
    fast = RaySpec(max_replicas=8).scaled(0.05)
    assert (fast.upscale_delay_s, fast.downscale_delay_s) == pytest.approx((1.5, 30))
    assert fast.control_loop_interval_s == pytest.approx(0.005)


def test_a_loop_that_ticks_less_often_decides_at_the_same_moment() -> None:
    """The delay is kept in time: ticking every 1 s in place of 0.1 s decides the scale-up
    at the same instant, 30 s after the first tick that wanted it."""
    spec = RaySpec(min_replicas=1, max_replicas=8, upscale_delay_s=30.0)
    for step in (0.1, 1.0):
        state, t, target = DelayState(), 0.0, 1
        while target == 1:
            decision, state = ray_serve.policy(spec, state, 8.0, 1, target, t)
            target = decision.replicas
            t = round(t + step, 6)
        assert t - step == pytest.approx(30.0), step
        assert target == 4  # 8 ongoing / 2 per replica


# --- the handle's metrics and the controller's pass ----------------------------------------


def test_the_handle_pushes_the_mean_of_its_look_back_window() -> None:
    spec = RaySpec(look_back_period_s=30.0)
    m = HandleMetrics()
    for t in range(0, 41, 5):  # L = t, recorded every 5 s
        m = m.record(spec, float(t), float(t))
    assert [t for t, _ in m.samples] == [15.0, 20.0, 25.0, 30.0, 35.0, 40.0]  # > 40 - 30
    pushed = m.push(spec, 40.0)
    assert (pushed.pushed, pushed.pushed_at_s) == (27.5, 40.0)
    assert m.pushed_at_s is None  # a value: the push made a new one
    # With no sample in its window, a push pushes nothing: the last push stands.
    assert pushed.push(spec, 100.0) is pushed


def test_decide_without_fresh_metrics_makes_no_decision() -> None:
    spec = RaySpec(min_replicas=1, max_replicas=8)  # pushes every 10 s, stale after 20 s
    never = RayState()
    decision, after = controller_pass(spec, never, Replicas(desired=4, ready=4), 5.0)
    assert decision == Decision(4, None, None, "no fresh metrics; no decision")
    assert after is never
    state = push(spec, record(spec, never, 6.0, 0.0), 10.0)
    assert controller_pass(spec, state, Replicas(4, 4), 30.0)[0].value == 6.0
    assert controller_pass(spec, state, Replicas(4, 4), 30.1)[0].value is None


def test_decide_scales_on_the_pushed_average_after_the_delay() -> None:
    """Ray's timers in virtual time: a record every 0.5 s, a push every 10 s, a pass every
    0.1 s. The first push (10 s) reports 8 ongoing requests; wanting 4 replicas from then,
    the 30 s upscale delay gives the change at 40 s."""
    spec = RaySpec(min_replicas=1, max_replicas=8)
    state, replicas = RayState(), Replicas(1, 1)
    decisions: dict[int, Decision] = {}
    for tick in range(0, 801):  # tenths of a second
        now = tick / 10
        if tick % 5 == 0:
            state = record(spec, state, 8.0, now)
        if tick % 100 == 0 and tick:
            state = push(spec, state, now)
        decisions[tick], state = controller_pass(spec, state, replicas, now)
        replicas = Replicas(decisions[tick].desired, 1)
    assert decisions[99].value is None  # nothing pushed yet
    assert decisions[100] == Decision(
        1, 8.0, 2.0, "wants 4, waiting for upscale_delay_s (total_num_requests 8)"
    )
    assert next(t for t, d in decisions.items() if d.desired != 1) == 400
    assert decisions[400] == Decision(4, 8.0, 2.0, "up after the delay (total_num_requests 8)")
    assert state.delay == DelayState()


# --- the loop -----------------------------------------------------------------------------


@dataclass
class World:
    inflight: float = 0.0
    desired: int = 1
    ready: int = 1
    records: list[DecisionRecord] = field(default_factory=list)

    down: bool = False

    def read(self, signal: Signal) -> float:
        assert signal is Signal.INFLIGHT
        if self.down:
            raise ScalerUnavailable("prometheus at http://127.0.0.1:1 unreachable")
        return self.inflight

    def set(self, n: int) -> None:
        self.desired = n

    def io(self) -> PeerIO:
        return PeerIO(
            read=self.read,
            get_replicas=lambda: self.desired,
            ready_replicas=lambda: self.ready,
            set_replicas=self.set,
            observe=lambda: Observation(self.inflight, self.ready, 4),
            record=self.records.append,
            wall_clock=lambda: 0.0,
        )


def test_loop_scales_on_the_pushed_look_back_average_after_the_delay() -> None:
    world = World(inflight=8.0)
    loop = RayLoop(RaySpec(min_replicas=1, max_replicas=8), world.io())
    loop.start(0.0)
    changed_at = None
    t = 0.0
    while t <= 80.0:
        loop.tick(t)
        if world.desired != 1 and changed_at is None:
            changed_at = t
        t = round(t + 0.1, 6)
    # The first push (t = 10 s) reports 8 ongoing requests; wanting 4 replicas from then,
    # the upscale delay of 30 s gives the change at 40 s.
    assert changed_at == pytest.approx(40.0)
    assert world.desired == 4
    assert world.records and all(r.reason.startswith("ray: ") for r in world.records)
    assert any(r.desired == 4 and r.value == 8.0 for r in world.records)


def test_loop_without_metrics_makes_no_decision() -> None:
    world = World(inflight=0.0, desired=4, ready=4, down=True)
    loop = RayLoop(RaySpec(min_replicas=1, max_replicas=8, downscale_delay_s=5.0), world.io())
    loop.start(0.0)
    t = 0.0
    while t <= 60.0:
        loop.tick(t)
        t = round(t + 0.1, 6)
    assert world.desired == 4  # 0 requests would have scaled down after 5 s
    assert world.records and all("no fresh metrics" in r.reason for r in world.records)
    world.down = False
    while t <= 90.0:
        loop.tick(t)
        t = round(t + 0.1, 6)
    assert world.desired == 1
