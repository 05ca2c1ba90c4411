"""Admission bounds on streams and distinct triggers, stepped with a fake monotonic clock."""

from __future__ import annotations

import pytest

from external_scaler.limits import LimitExceeded, Limits, QueryRate
from inflight import names


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_streams_past_the_bound_are_refused_naming_the_flag() -> None:
    limits = Limits(max_streams=2)
    with limits.stream(), limits.stream():
        assert limits.streams == 2
        with pytest.raises(LimitExceeded) as err, limits.stream():
            pass
        assert "--max-streams 2" in str(err.value)
        assert err.value.kind == names.SCALER_ERROR_TOO_MANY_STREAMS
    assert limits.streams == 0
    with limits.stream():  # closing one frees its slot
        pass


def test_a_new_trigger_past_the_bound_is_refused_known_ones_still_pass() -> None:
    clock = Clock()
    limits = Limits(max_triggers=2, trigger_idle_s=60.0, monotonic=clock)
    for key in ("a", "b"):
        with limits.trigger(key):
            pass
    with pytest.raises(LimitExceeded) as err, limits.trigger("c"):
        pass
    assert "--max-triggers 2" in str(err.value) and "--trigger-idle-s 60" in str(err.value)
    assert err.value.kind == names.SCALER_ERROR_TOO_MANY_TRIGGERS
    clock.now = 59.0
    with limits.trigger("a"):  # admitted ones keep working at the bound
        pass
    assert limits.triggers() == 2


def test_an_idle_trigger_frees_its_slot_after_the_idle_time() -> None:
    clock = Clock()
    limits = Limits(max_triggers=1, trigger_idle_s=60.0, monotonic=clock)
    with limits.trigger("a"):
        pass
    clock.now = 59.9
    with pytest.raises(LimitExceeded), limits.trigger("b"):
        pass
    clock.now = 60.0
    with limits.trigger("b"):
        pass
    assert limits.triggers() == 1


def test_a_held_trigger_never_idles() -> None:
    """A stream holds its trigger for as long as it is open, however long that is."""
    clock = Clock()
    limits = Limits(max_triggers=1, trigger_idle_s=1.0, monotonic=clock)
    with limits.trigger("stream"):
        clock.now = 1000.0
        with pytest.raises(LimitExceeded), limits.trigger("other"):
            pass
        with limits.trigger("stream"):  # the stream's own polls share its slot
            pass
    clock.now = 1000.5  # released at 1000: idle for 0.5 s only
    assert limits.triggers() == 1
    clock.now = 1001.0
    assert limits.triggers() == 0


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"max_streams": 0}, "--max-streams"),
        ({"max_triggers": 0}, "--max-triggers"),
        ({"trigger_idle_s": 0.0}, "--trigger-idle-s"),
    ],
)
def test_bad_bounds_name_the_flag(kwargs: dict[str, float], flag: str) -> None:
    with pytest.raises(ValueError, match=flag):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_query_rate_spends_a_burst_then_refills_at_the_rate() -> None:
    clock = Clock()
    rate = QueryRate(2.0, burst=3, monotonic=clock)
    for _ in range(3):
        rate.take()
    with pytest.raises(LimitExceeded) as err:
        rate.take()
    assert "--max-queries-per-s 2" in str(err.value)
    assert err.value.kind == names.SCALER_ERROR_TOO_MANY_QUERIES
    clock.now = 0.5  # one fetch back (2 a second)
    rate.take()
    with pytest.raises(LimitExceeded):
        rate.take()
    clock.now = 100.0  # never more than the burst
    for _ in range(3):
        rate.take()
    with pytest.raises(LimitExceeded):
        rate.take()
