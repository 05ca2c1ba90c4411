"""Ray Serve's default autoscaling policy (``replica_queue_length_autoscaling_policy``).

Implemented from ray-project/ray (the versions the code index holds):

* ``python/ray/serve/autoscaling_policy.py``, the version whose delay logic keeps the
  decision counter in wall-clock time (``SERVE_AUTOSCALING_DECISION_TIMESTAMP_KEY``; it is
  the version ``python/ray/serve/tests/unit/test_autoscaling_policy.py`` at commit
  01624ad4 tests): ``_core_replica_queue_length_policy``, ``_apply_scaling_factors``,
  ``_apply_delay_logic``, ``_get_cold_start_scale_up_replicas``. The older counter
  version (commit 00590c45) scales after ``int(delay_s / CONTROL_LOOP_INTERVAL_S) + 1``
  ticks of 0.1 s, i.e. one tick later; the timestamp version makes the decision
  independent of how often the loop runs, so this loop may tick less often than Ray's
  0.1 s and still decide at the same moments (to within its own tick);
* ``python/ray/serve/_private/autoscaling_state.py`` (commit 00215194):
  ``get_decision_num_replicas`` applies ``[min_replicas, max_replicas]`` after the policy;
  ``current_num_replicas`` is the running replicas, ``target_num_replicas`` the target;
  ``total_num_requests`` is the ongoing requests (running + queued at handles), each
  source's average over ``look_back_period_s``;
* ``python/ray/serve/_private/constants.py`` (commit 0016b72b):
  ``CONTROL_LOOP_INTERVAL_S`` 0.1, ``DEFAULT_TARGET_ONGOING_REQUESTS`` 2, handles record
  their metrics every 0.5 s and push them every 10 s;
* ``python/ray/serve/config.py`` ``AutoscalingConfig``: ``upscale_delay_s`` 30,
  ``downscale_delay_s`` 600, ``look_back_period_s`` 30, scaling factors 1.

The rule: ``desired = running × total / (target_ongoing_requests × running)`` (= total ÷
2), moved from the current count by the up/down scaling factor and rounded up; a change
is made only once the same direction has been wanted continuously for
``upscale_delay_s`` / ``downscale_delay_s`` (measured from the first tick that wanted it,
reset by any tick that did not); a scale-down never goes below 1 unless from 1 (with
``downscale_to_zero_delay_s``); from 0 running replicas with requests waiting it scales
up at once. The ongoing requests here are the router's L (:attr:`Signal.INFLIGHT`: in the
replicas plus held at the router, as Ray counts requests queued at its handles); the
router runs in hold mode (Ray's handles queue beyond ``max_ongoing_requests``, 5 by
default, where the router holds beyond the 4 slots).

Every duration is multiplied by the time-scale (:meth:`RaySpec.scaled`).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, replace

from inflight.control.periodic import next_due
from inflight.planes.peers.base import PeerIO, apply
from inflight.planes.peers.signals import Signal
from inflight.planes.scaler_client import ScalerUnavailable

log = logging.getLogger("inflight.up.peers.ray")

#: ``_DELAY_ELAPSED_EPS_S`` in autoscaling_policy.py.
DELAY_ELAPSED_EPS_S = 1e-6


@dataclass(frozen=True)
class RaySpec:
    """An ``AutoscalingConfig`` (defaults: Ray's) plus the controller's periods."""

    min_replicas: int = 1
    max_replicas: int = 1
    target_ongoing_requests: float = 2.0
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0
    downscale_to_zero_delay_s: float | None = None
    look_back_period_s: float = 30.0
    upscaling_factor: float = 1.0
    downscaling_factor: float = 1.0
    control_loop_interval_s: float = 0.1
    metrics_record_interval_s: float = 0.5
    metrics_push_interval_s: float = 10.0
    #: The controller drops a handle's metrics after max(2 × metrics_interval_s, 10 s)
    #: without an update (``drop_stale_handle_metrics``): 2 push periods.
    stale_after_pushes: float = 2.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError(f"bad replica bounds {self.min_replicas}..{self.max_replicas}")
        if not self.target_ongoing_requests > 0:
            raise ValueError(
                f"target_ongoing_requests must be > 0, got {self.target_ongoing_requests}"
            )
        if not self.upscaling_factor > 0 or not self.downscaling_factor > 0:
            raise ValueError("scaling factors must be > 0")
        for name in (
            "look_back_period_s",
            "control_loop_interval_s",
            "metrics_record_interval_s",
            "metrics_push_interval_s",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"Ray {name} must be > 0, got {getattr(self, name)}")
        if self.upscale_delay_s < 0 or self.downscale_delay_s < 0:
            raise ValueError("Ray delays must be >= 0")

    def scaled(self, time_scale: float) -> RaySpec:
        """Every period × ``time_scale``."""
        zero = self.downscale_to_zero_delay_s
        return replace(
            self,
            upscale_delay_s=self.upscale_delay_s * time_scale,
            downscale_delay_s=self.downscale_delay_s * time_scale,
            downscale_to_zero_delay_s=None if zero is None else zero * time_scale,
            look_back_period_s=self.look_back_period_s * time_scale,
            control_loop_interval_s=self.control_loop_interval_s * time_scale,
            metrics_record_interval_s=self.metrics_record_interval_s * time_scale,
            metrics_push_interval_s=self.metrics_push_interval_s * time_scale,
        )


@dataclass(frozen=True)
class DelayState:
    """The policy state Ray keeps between decisions: the direction wanted (the counter's
    sign: > 0 up, < 0 down) and since when (``None``: no streak)."""

    counter: int = 0
    since_s: float | None = None


def scaling_factors(desired: float, current: int, spec: RaySpec) -> int:
    """``_apply_scaling_factors``.

    >>> scaling_factors(5.0, 2, RaySpec(max_replicas=10))
    5
    >>> scaling_factors(1.0, 4, RaySpec(max_replicas=10, downscaling_factor=0.1))
    3
    """
    if current == 0:
        return math.ceil(desired)
    delta = desired - current
    factor = spec.upscaling_factor if delta > 0 else spec.downscaling_factor
    scaled = math.ceil(current + factor * delta)
    if math.ceil(float(desired)) < current and scaled == current:
        scaled -= 1  # stuck while scaling down because of the factor
    return scaled


def delay_step(
    desired: int, target: int, spec: RaySpec, state: DelayState, now_s: float
) -> tuple[int, DelayState]:
    """``_apply_delay_logic``: the replicas to set and the state for the next call."""
    decision = target
    counter, since = state.counter, state.since_s
    if desired > target:
        if counter < 0:
            counter, since = 0, None
        counter += 1
        if since is None:
            since = now_s
        if now_s - since + DELAY_ELAPSED_EPS_S >= spec.upscale_delay_s:
            counter, since, decision = 0, None, desired
    elif desired < target:
        if counter > 0:
            counter, since = 0, None
        counter -= 1
        if target == 1:  # downscaling to zero is only allowed from 1 -> 0
            delay_s = spec.downscale_delay_s
            if spec.downscale_to_zero_delay_s is not None:
                delay_s = spec.downscale_to_zero_delay_s
        else:
            delay_s = spec.downscale_delay_s
            desired = max(1, desired)
        if since is None:
            since = now_s
        if now_s - since + DELAY_ELAPSED_EPS_S >= delay_s:
            counter, since, decision = 0, None, desired
    else:
        counter, since = 0, None
    return decision, DelayState(counter, since)


@dataclass(frozen=True)
class RayDecision:
    """The count to run (bounded) and what the policy alone wanted."""

    replicas: int
    wanted: float
    reason: str


def ray_decide(
    spec: RaySpec,
    state: DelayState,
    total_num_requests: float,
    running: int,
    target: int,
    now_s: float,
) -> tuple[RayDecision, DelayState]:
    """One control-loop pass of the default policy for one deployment."""
    if running == 0 and total_num_requests > 0:
        # Cold start fast path: no delay.
        wanted = float(max(math.ceil(1 * spec.upscaling_factor), target))
        replicas = _bounded(spec, int(wanted))
        return RayDecision(replicas, wanted, "cold start: requests and no replica"), state
    if running == 0:
        wanted = float(target)  # _core_replica_queue_length_policy with no replica
    else:
        error_ratio = total_num_requests / (spec.target_ongoing_requests * running)
        wanted = running * error_ratio
    scaled = scaling_factors(wanted, running, spec)
    if running == 0 and scaled > 0:
        return RayDecision(_bounded(spec, scaled), wanted, "scale from zero"), state
    decision, state = delay_step(max(0, scaled), target, spec, state, now_s)
    bounded = _bounded(spec, decision)
    if decision != target:
        reason = f"{'up' if decision > target else 'down'} after the delay"
    elif state.counter > 0:
        reason = f"wants {scaled}, waiting for upscale_delay_s"
    elif state.counter < 0:
        reason = f"wants {scaled}, waiting for downscale_delay_s"
    else:
        reason = "steady"
    return RayDecision(bounded, wanted, reason), state


def _bounded(spec: RaySpec, replicas: int) -> int:
    return max(spec.min_replicas, min(spec.max_replicas, replicas))


class OngoingRequests:
    """The handle's metrics: L recorded every ``metrics_record_interval_s``; every
    ``metrics_push_interval_s`` the mean of the samples in the last
    ``look_back_period_s`` is pushed to the controller, which decides on the last push.
    A push with no sample in its window (Prometheus unreadable) pushes nothing; with no
    push for two periods the loop makes no decision (Ray's controller drops such stale
    metrics; here no metrics means no data, not zero requests)."""

    def __init__(self, spec: RaySpec) -> None:
        self.spec = spec
        self.samples: deque[tuple[float, float]] = deque()
        self.pushed = 0.0
        self.pushed_at_s: float | None = None

    def record(self, now_s: float, value: float) -> None:
        self.samples.append((now_s, value))
        while self.samples and self.samples[0][0] <= now_s - self.spec.look_back_period_s:
            self.samples.popleft()

    def push(self, now_s: float) -> None:
        window = [v for t, v in self.samples if t > now_s - self.spec.look_back_period_s]
        if window:
            self.pushed = sum(window) / len(window)
            self.pushed_at_s = now_s


class RayLoop:
    """Ray Serve's controller for one deployment: records L, pushes it, decides every
    ``control_loop_interval_s`` (or at each :meth:`tick` if called less often; the delay
    logic is in time). Writes a decision record at each push and at each change."""

    def __init__(self, spec: RaySpec, io: PeerIO, name: str = "ray") -> None:
        self.spec = spec
        self.io = io
        self.name = name
        self.metrics = OngoingRequests(spec)
        self.state = DelayState()
        self.next_record_s = 0.0
        self.next_push_s = 0.0
        self.next_decide_s = 0.0
        self.started = False

    def start(self, now_s: float) -> None:
        self.started = True
        self.next_record_s = now_s
        self.next_push_s = now_s + self.spec.metrics_push_interval_s
        self.next_decide_s = now_s

    def tick(self, now_s: float) -> bool:
        if not self.started:
            self.start(now_s)
        if now_s >= self.next_record_s:
            self.next_record_s = next_due(
                self.next_record_s, self.spec.metrics_record_interval_s, now_s
            )
            try:
                self.metrics.record(now_s, self.io.read(Signal.INFLIGHT))
            except ScalerUnavailable as exc:
                log.warning("%s: metrics record failed: %s", self.name, exc)
        pushed = False
        if now_s >= self.next_push_s:
            self.next_push_s = next_due(self.next_push_s, self.spec.metrics_push_interval_s, now_s)
            self.metrics.push(now_s)
            pushed = True
        if now_s < self.next_decide_s:
            return False
        self.next_decide_s = next_due(self.next_decide_s, self.spec.control_loop_interval_s, now_s)
        target = self.io.get_replicas()
        fresh_s = self.spec.stale_after_pushes * self.spec.metrics_push_interval_s
        pushed_at = self.metrics.pushed_at_s
        if pushed_at is None or now_s - pushed_at > fresh_s:
            # No metrics (Prometheus unreadable): no decision, said once per push period.
            if pushed:
                apply(self.io, None, None, target, f"{self.name}: no fresh metrics; no decision")
            return pushed
        decision, self.state = ray_decide(
            self.spec, self.state, self.metrics.pushed, self.io.ready_replicas(), target, now_s
        )
        if decision.replicas == target and not pushed:
            return False
        apply(
            self.io,
            self.metrics.pushed,
            self.spec.target_ongoing_requests,
            decision.replicas,
            f"{self.name}: {decision.reason} (total_num_requests {self.metrics.pushed:g})",
        )
        return True
