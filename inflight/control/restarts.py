"""When to restart a core process (Prometheus, the scaler) that died: a pure step.

The stack's run loop is the imperative shell: each tick it tells :func:`restart_step`
whether the process is alive and whether a hold is set (``hold/<name>`` in the state
dir, see :mod:`inflight.statedir`), and does what the returned action says. No I/O,
no clock here: ``now_s`` is passed in, so tests step time.

Back-off, with a worked example (base 1 s, max 30 s): the first death restarts after
1 s, a second death within ``stable_s`` of that start after 2 s, then 4 s, 8 s, 16 s,
30 s, 30 s …; a process that stays up ``stable_s`` starts the count again from 1 s.
A hold keeps a dead process down for as long as it is set (the chaos run's "Prometheus
down for two minutes"); once lifted, the restart waits only for what is left of the
back-off.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class RestartAction(Enum):
    NONE = "none"  # alive, or waiting for the back-off or a hold
    DIED = "died"  # it died since the last step: log and record it
    START = "start"  # start it now


@dataclass(frozen=True)
class RestartPolicy:
    """Back-off between restarts, in seconds of real time."""

    backoff_base_s: float = 1.0
    backoff_max_s: float = 30.0
    stable_s: float = 30.0  # up this long: the failure count starts again

    def __post_init__(self) -> None:
        if not 0 < self.backoff_base_s <= self.backoff_max_s:
            raise ValueError(
                f"restart back-off: need 0 < base ({self.backoff_base_s}) <= max "
                f"({self.backoff_max_s}) seconds"
            )
        if self.stable_s < 0:
            raise ValueError(f"restart stable_s must be >= 0, got {self.stable_s}")

    def backoff_s(self, failures: int) -> float:
        """Delay before restart number ``failures`` (1: the first)."""
        return min(self.backoff_base_s * 2.0 ** max(0, failures - 1), self.backoff_max_s)


@dataclass(frozen=True)
class RestartState:
    """What the step remembers about one process between ticks."""

    failures: int = 0  # deaths in a row (reset after stable_s up)
    up_since_s: float | None = None  # when it was last started (None: down)
    next_start_s: float | None = None  # down: earliest restart


def restart_step(
    state: RestartState, policy: RestartPolicy, *, alive: bool, held: bool, now_s: float
) -> tuple[RestartState, RestartAction]:
    """One tick for one process: the new state and what the shell must do."""
    if alive:
        if state.up_since_s is None:  # started by the shell, first seen alive
            return replace(state, up_since_s=now_s, next_start_s=None), RestartAction.NONE
        if state.failures and now_s - state.up_since_s >= policy.stable_s:
            return replace(state, failures=0), RestartAction.NONE
        return state, RestartAction.NONE
    if state.next_start_s is None:  # it died since the last tick
        failures = state.failures + 1
        return (
            RestartState(failures, None, now_s + policy.backoff_s(failures)),
            RestartAction.DIED,
        )
    if held or now_s < state.next_start_s:
        return state, RestartAction.NONE
    return replace(state, up_since_s=now_s, next_start_s=None), RestartAction.START


def started(state: RestartState, now_s: float) -> RestartState:
    """The shell started the process (initially, or after START)."""
    return replace(state, up_since_s=now_s, next_start_s=None)
