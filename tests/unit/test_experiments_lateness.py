"""Issue 25's sustained-overload experiment (``python -m experiments.lateness``) through the
router's real Dispatcher in virtual time: the late wait with and without the lateness bound."""

from __future__ import annotations

import pytest

from experiments import lateness
from inflight.control.hold_order import MAX_LATE_S

pytestmark = pytest.mark.unit


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
