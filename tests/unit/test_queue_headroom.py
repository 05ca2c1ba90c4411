"""The peak stage's queueing headroom (issue 40): square-root staffing over the peak of L,
``L + beta x min(sqrt(L), L's standard deviation)`` (``queueHeadroom``), named in the
decision's reason; a closed loop's steady L gets none."""

from __future__ import annotations

import math

import pytest

from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from inflight import names
from inflight.control.policy import PolicySpec, Sample, decide, queue_headroom


def steady(level: float, seconds: int = 400, end_s: float = 1000.0) -> list[Sample]:
    return [Sample(end_s - seconds + i + 1, level) for i in range(seconds)]


def varying(level: float, swing: float, seconds: int = 400, end_s: float = 1000.0) -> list[Sample]:
    """L at ``level ± swing`` from one second to the next: its 10 s means are ``level`` and
    its standard deviation is ``swing``."""
    return [
        Sample(end_s - seconds + i + 1, level + (swing if i % 2 else -swing))
        for i in range(seconds)
    ]


def spec(beta: float) -> PolicySpec:
    # The floor off: the peak stage alone sets the value.
    return PolicySpec(slots_per_replica=4, queue_headroom=beta, floor_window_s=0.0)


@pytest.mark.parametrize(
    ("level", "beta", "headroom"),
    [(16.0, 1.0, 4.0), (25.0, 2.0, 10.0), (0.0, 1.0, 0.0), (9.0, 0.0, 0.0), (-1.0, 1.0, 0.0)],
)
def test_headroom_is_beta_times_the_square_root(level: float, beta: float, headroom: float) -> None:
    assert queue_headroom(level, beta) == pytest.approx(headroom)


@pytest.mark.parametrize(
    ("spread", "headroom"), [(0.0, 0.0), (1.5, 1.5), (4.0, 4.0), (9.0, 4.0), (-1.0, 0.0)]
)
def test_headroom_is_at_most_what_l_was_seen_to_vary(spread: float, headroom: float) -> None:
    assert queue_headroom(16.0, 1.0, spread) == pytest.approx(headroom)


def test_l_of_16_varying_by_5_asks_for_20_and_the_reason_names_the_stage() -> None:
    d = decide(varying(16.0, 5.0), spec(1.0), now_s=1000.0, ready_replicas=4)
    assert d.value == pytest.approx(20.0)
    assert d.desired_replicas == 5  # ceil(20 / 4): one replica of headroom over 4
    assert d.reason.startswith("headroom: max of L over the last")
    assert "is 16" in d.reason and "= 20" in d.reason


def test_l_that_varies_less_than_poisson_gets_what_it_varies() -> None:
    d = decide(varying(16.0, 2.0), spec(1.0), now_s=1000.0, ready_replicas=4)
    assert d.value == pytest.approx(18.0, abs=0.02)  # 16 ± 2 rises 2 above its mean


def test_a_spread_under_one_request_is_none() -> None:
    """A closed loop's L dips by one between an answer and the next request: 4 and 3 in
    turn rise half a request above their mean, which buys no room (nor a second replica)."""
    d = decide(varying(3.5, 0.5), spec(1.0), now_s=1000.0, ready_replicas=1)
    assert d.value == pytest.approx(3.5, abs=0.01)
    assert d.desired_replicas == 1


def test_a_closed_loops_steady_l_gets_no_headroom() -> None:
    """The seed's sweep at concurrency 4 on 4 slots: L holds at 4, nothing waits, and the
    fleet stays at one replica (docs/workload.md, "What 'reproduced' means")."""
    d = decide(steady(4.0), spec(1.0), now_s=1000.0, ready_replicas=1)
    assert d.value == pytest.approx(4.0)
    assert d.desired_replicas == 1
    assert not d.reason.startswith("headroom")


def test_off_the_peak_is_l_itself() -> None:
    d = decide(varying(16.0, 5.0), spec(0.0), now_s=1000.0, ready_replicas=4)
    assert d.value == pytest.approx(16.0)
    assert d.desired_replicas == 4
    assert not d.reason.startswith("headroom")


def test_the_headroom_grows_as_the_square_root_so_a_large_fleet_pays_less_per_replica() -> None:
    small = decide(varying(4.0, 3.0), spec(1.0), now_s=1000.0)
    large = decide(varying(64.0, 9.0), spec(1.0), now_s=1000.0)
    assert small.value / 4.0 == pytest.approx(1.5)
    assert large.value / 64.0 == pytest.approx(1.125)
    assert large.desired_replicas == math.ceil(72 / 4)


def test_an_idle_window_stays_idle() -> None:
    d = decide(steady(0.0), spec(1.0), now_s=1000.0, ready_replicas=1)
    assert d.value == 0.0
    assert not d.active


def test_the_key_is_the_simulators_alone_and_a_bad_value_is_refused_by_name() -> None:
    """Tried as the default and not adopted (docs/decisions.md): the simulator takes it, the
    scaler refuses any value but the default 0, naming the key."""
    given = {**names.METADATA_DEFAULTS, names.META_QUEUE_HEADROOM: "1.5"}
    assert parse_metadata(given, experimental=True).policy.queue_headroom == 1.5
    assert parse_metadata(names.METADATA_DEFAULTS).policy.queue_headroom == 0.0
    with pytest.raises(MetadataError, match=names.META_QUEUE_HEADROOM):
        parse_metadata(given)
    for bad in ("-1", "11", "lots"):
        given = {**names.METADATA_DEFAULTS, names.META_QUEUE_HEADROOM: bad}
        with pytest.raises(MetadataError, match=names.META_QUEUE_HEADROOM):
            parse_metadata(given, experimental=True)


def test_a_load_that_starts_from_idle_is_a_step_not_a_spread() -> None:
    """Idle samples say nothing of how the load varies: the closed loop's first seconds
    (L from 0 to 4 on 4 slots) ask for no second replica."""
    samples = [*steady(0.0, 100, end_s=900.0), *steady(4.0, 100)]
    d = decide(samples, spec(1.0), now_s=1000.0, ready_replicas=1)
    assert d.value == pytest.approx(4.0)
    assert d.desired_replicas == 1
