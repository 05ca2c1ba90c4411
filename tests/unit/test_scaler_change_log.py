"""The scaler's log lines: one when the replica count the HPA derives changes, and one when
a late scale-up's hold begins or ends (a hold changes no count, so the count's lines alone
never showed it: the 2026-12-03 live run's follow-up)."""

from __future__ import annotations

from dataclasses import replace

from external_scaler.servicer import change_message
from inflight.control.policy import Decision

BASE = Decision(
    policy="saturation", value=12.0, target=4.0, desired_replicas=3, active=True,
    inflight=12.0, ready_replicas=3, saturation=1.0, direction="hold", reason="L 12 = 3 x 4",
)  # fmt: skip
HELD = replace(
    BASE, inflight=20.0, saturation=5 / 3, held_scale_up=True,
    reason="late scale-up held: L's 2 excursion(s) above 3 x 4 ...",
)  # fmt: skip


def _lines(decisions: list[Decision]) -> list[str | None]:
    """What the servicer logs for ``decisions`` in turn (its bookkeeping, replayed)."""
    before: tuple[int, bool] | None = None
    out = []
    for d in decisions:
        out.append(change_message("m", before, d))
        before = (d.desired_replicas, d.held_scale_up)
    return out


def test_the_first_decision_and_each_change_of_count_are_logged_once() -> None:
    up = replace(BASE, desired_replicas=5, value=20.0, reason="L 20 = 5 x 4")
    lines = _lines([BASE, BASE, up, up])
    assert lines[0] == "m: desired ? -> 3 (saturation policy, value 12, target 4): L 12 = 3 x 4"
    assert lines[1] is None and lines[3] is None
    assert lines[2] == "m: desired 3 -> 5 (saturation policy, value 20, target 4): L 20 = 5 x 4"


def test_a_hold_is_logged_when_it_begins_and_when_it_ends_though_the_count_stays() -> None:
    after = replace(BASE, desired_replicas=5, value=20.0, reason="L 20 = 5 x 4")
    lines = _lines([BASE, HELD, HELD, BASE, HELD, after])
    assert lines[1] is not None and lines[1].startswith("m: scale-up held at 3 (")
    assert "late scale-up held" in lines[1]  # the policy's reason: why it held
    assert lines[2] is None  # still held: no new line
    assert lines[3] is not None
    assert lines[3].startswith("m: scale-up no longer held, desired 3 -> 3 (")
    assert lines[4] is not None and lines[4].startswith("m: scale-up held at 3 (")
    assert lines[5] is not None
    assert lines[5].startswith("m: scale-up no longer held, desired 3 -> 5 (")


def test_a_hold_on_the_first_decision_is_logged_as_a_hold() -> None:
    assert _lines([HELD])[0] == (
        "m: scale-up held at 3 (saturation policy, value 12, target 4): " + HELD.reason
    )
