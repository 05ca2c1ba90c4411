"""Ray Serve's default autoscaling policy (``replica_queue_length_autoscaling_policy``), pure.

Implemented from ray-project/ray (the versions the code index holds):

* ``python/ray/serve/autoscaling_policy.py``, the version whose delay logic keeps the
  decision counter in wall-clock time (``SERVE_AUTOSCALING_DECISION_TIMESTAMP_KEY``; it is
  the version ``python/ray/serve/tests/unit/test_autoscaling_policy.py`` at commit
  01624ad4 tests): ``_core_replica_queue_length_policy``, ``_apply_scaling_factors``,
  ``_apply_delay_logic``, ``_get_cold_start_scale_up_replicas`` (:func:`policy`). The older
  counter version (commit 00590c45) scales after ``int(delay_s / CONTROL_LOOP_INTERVAL_S)
  + 1`` ticks of 0.1 s, i.e. one tick later; the timestamp version makes the decision
  independent of how often the loop runs, so the loop may tick less often than Ray's
  0.1 s and still decide at the same moments (to within its own tick);
* ``python/ray/serve/_private/autoscaling_state.py`` (commit 00215194):
  ``get_decision_num_replicas`` applies ``[min_replicas, max_replicas]`` after the policy;
  ``current_num_replicas`` is the running replicas, ``target_num_replicas`` the target;
  ``total_num_requests`` is the ongoing requests (running + queued at handles), each
  source's average over ``look_back_period_s`` (:class:`HandleMetrics`); the controller
  drops metrics that have gone stale (:func:`controller_pass`);
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
up at once. The ongoing requests here are the router's L (``Signal.INFLIGHT``: in the
replicas plus held at the router, as Ray counts requests queued at its handles); the
router runs in hold mode (Ray's handles queue beyond ``max_ongoing_requests``, 5 by
default, where the router holds beyond the 4 slots).

Every duration is multiplied by the time-scale (:meth:`RaySpec.scaled`). Unlike Ray's
newer policy, nothing here reads a clock: ``now_s`` is an argument, and the state is
threaded through the calls (:class:`RayState`). The timers (record, push, control loop)
are the loop's (:class:`inflight.planes.peers.ray_serve.RayLoop`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from inflight.control.peers.base import Decision, Replicas

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

    @property
    def fresh_s(self) -> float:
        """How long a push stays usable: ``stale_after_pushes`` push periods."""
        return self.stale_after_pushes * self.metrics_push_interval_s


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


def policy(
    spec: RaySpec,
    state: DelayState,
    total_num_requests: float,
    running: int,
    target: int,
    now_s: float,
) -> tuple[RayDecision, DelayState]:
    """One control-loop pass of the default policy for one deployment, bounded
    (``get_decision_num_replicas``).

    Worked example (defaults, 1 running, target 1, 8 ongoing): wanted = 1 × 8 / (2 × 1)
    = 4; the first pass starts the upscale streak and keeps 1; a pass 30 s later
    returns 4.
    """
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


@dataclass(frozen=True)
class HandleMetrics:
    """The handle's metrics: L recorded every ``metrics_record_interval_s`` (the samples
    of the last ``look_back_period_s``, oldest first); every ``metrics_push_interval_s``
    their mean is pushed to the controller (``pushed``, at ``pushed_at_s``), which decides
    on the last push. A push with no sample in its window (the signal unreadable) pushes
    nothing.

    >>> spec = RaySpec(look_back_period_s=30.0)
    >>> m = HandleMetrics().record(spec, 0.0, 2.0).record(spec, 10.0, 4.0)
    >>> m.push(spec, 10.0).pushed, m.push(spec, 35.0).pushed  # 0 s is out of the window
    (3.0, 4.0)
    """

    samples: tuple[tuple[float, float], ...] = ()
    pushed: float = 0.0
    pushed_at_s: float | None = None

    def record(self, spec: RaySpec, now_s: float, value: float) -> HandleMetrics:
        samples = (*self.samples, (now_s, value))
        cutoff_s = now_s - spec.look_back_period_s
        old = 0
        while old < len(samples) and samples[old][0] <= cutoff_s:
            old += 1
        return replace(self, samples=samples[old:])

    def push(self, spec: RaySpec, now_s: float) -> HandleMetrics:
        window = [v for t, v in self.samples if t > now_s - spec.look_back_period_s]
        if not window:
            return self
        return replace(self, pushed=sum(window) / len(window), pushed_at_s=now_s)


@dataclass(frozen=True)
class RayState:
    """What the controller keeps for one deployment: the handle's metrics and the
    policy's delay state."""

    metrics: HandleMetrics = field(default_factory=HandleMetrics)
    delay: DelayState = field(default_factory=DelayState)


def record(spec: RaySpec, state: RayState, value: float, now_s: float) -> RayState:
    """The handle records the ongoing requests ``value`` at ``now_s``."""
    return replace(state, metrics=state.metrics.record(spec, now_s, value))


def push(spec: RaySpec, state: RayState, now_s: float) -> RayState:
    """The handle pushes its look-back average to the controller."""
    return replace(state, metrics=state.metrics.push(spec, now_s))


def controller_pass(
    spec: RaySpec, state: RayState, replicas: Replicas, now_s: float
) -> tuple[Decision, RayState]:
    """One controller pass on the last push: :func:`policy` with ``total_num_requests``
    = the pushed average, ``running`` = ``replicas.ready``, ``target`` =
    ``replicas.desired``. With no push in ``spec.fresh_s`` the controller has no metrics
    (Ray drops stale ones; here no metrics means no data, not zero requests): the
    decision keeps ``replicas.desired`` and the state is unchanged.
    """
    pushed_at_s = state.metrics.pushed_at_s
    if pushed_at_s is None or now_s - pushed_at_s > spec.fresh_s:
        return Decision(replicas.desired, None, None, "no fresh metrics; no decision"), state
    total = state.metrics.pushed
    result, delay = policy(spec, state.delay, total, replicas.ready, replicas.desired, now_s)
    decision = Decision(
        result.replicas,
        total,
        spec.target_ongoing_requests,
        f"{result.reason} (total_num_requests {total:g})",
    )
    return decision, replace(state, delay=delay)
