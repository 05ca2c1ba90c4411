"""The pure restart step of the stack's core processes (inflight.control.restarts)."""

from __future__ import annotations

import pytest

from inflight.control.restarts import (
    RestartAction,
    RestartPolicy,
    RestartState,
    restart_step,
    started,
)

POLICY = RestartPolicy(backoff_base_s=1.0, backoff_max_s=8.0, stable_s=30.0)
NONE, DIED, START = RestartAction.NONE, RestartAction.DIED, RestartAction.START


def step(state, now, alive, held=False):
    return restart_step(state, POLICY, alive=alive, held=held, now_s=now)


def test_a_death_is_reported_once_then_restarted_after_the_backoff():
    s = started(RestartState(), 0.0)
    s, a = step(s, 10.0, alive=False)
    assert a is DIED and s.failures == 1 and s.next_start_s == 11.0
    s, a = step(s, 10.5, alive=False)
    assert a is NONE
    s, a = step(s, 11.0, alive=False)
    assert a is START and s.up_since_s == 11.0


def test_the_backoff_doubles_per_death_in_a_row_up_to_the_max():
    s = started(RestartState(), 0.0)
    delays = []
    now = 0.0
    for _ in range(6):
        s, a = step(s, now, alive=False)
        assert a is DIED
        delays.append(s.next_start_s - now)
        now = s.next_start_s
        s, a = step(s, now, alive=False)
        assert a is START
        now += 1.0  # dies again a second later
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_up_for_stable_s_resets_the_count():
    s = started(RestartState(failures=3), 0.0)
    s, _ = step(s, 29.0, alive=True)
    assert s.failures == 3
    s, _ = step(s, 30.0, alive=True)
    assert s.failures == 0
    s, a = step(s, 40.0, alive=False)
    assert a is DIED and s.next_start_s == 41.0


def test_a_hold_keeps_it_down_and_lifting_it_restarts_at_once_past_the_backoff():
    s = started(RestartState(), 0.0)
    s, a = step(s, 1.0, alive=False, held=True)
    assert a is DIED  # the death is reported even when held
    for now in (2.0, 60.0, 120.0):
        s, a = step(s, now, alive=False, held=True)
        assert a is NONE
    s, a = step(s, 121.0, alive=False, held=False)
    assert a is START


def test_a_restart_that_dies_at_once_is_a_new_death():
    s = started(RestartState(), 0.0)
    s, _ = step(s, 1.0, alive=False)
    s, a = step(s, 2.0, alive=False)
    assert a is START
    s, a = step(s, 2.05, alive=False)  # the new process did not live to the next tick
    assert a is DIED and s.failures == 2 and s.next_start_s == pytest.approx(4.05)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backoff_base_s": 0}, "back-off"),
        ({"backoff_base_s": 5, "backoff_max_s": 1}, "back-off"),
        ({"stable_s": -1}, "stable_s"),
    ],
)
def test_bad_policies_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RestartPolicy(**kwargs)
