"""Priority classes (--priority-class): the request's priority, the classes' order in the
dispatcher, the sheddable class's 429, the per-class metrics and the flag's errors."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from inflight import names
from inflight.control.hold_order import plan_from_classes
from router.config import ConfigError, RouterSettings
from router.dispatch import Dispatcher
from router.errors import BadPriority, Shed
from router.metrics import RouterMetrics
from router.pool import Endpoint, Pool
from router.priority import request_priority

A = "http://127.0.0.1:9001"


@pytest.mark.parametrize(
    ("headers", "body", "priority"),
    [
        ([], b"{}", 0),
        ([(b"x-request-priority", b"-2")], b'{"priority": 7}', -2),  # the header first
        ([], b'{"model": "m", "priority": 7}', 7),
        ([], b'not json but "priority"', 0),
        ([], b'["priority"]', 0),
    ],
)
def test_request_priority(headers: list[tuple[bytes, bytes]], body: bytes, priority: int) -> None:
    assert request_priority(headers, body) == priority


@pytest.mark.parametrize(
    ("headers", "body", "message"),
    [
        ([(b"x-request-priority", b"high")], b"{}", "x-request-priority must be an integer"),
        ([], b'{"priority": "high"}', "priority must be an integer"),
        ([], b'{"priority": 1.5}', "priority must be an integer"),
        ([], b'{"priority": true}', "priority must be an integer"),
    ],
)
def test_bad_priorities_are_400(
    headers: list[tuple[bytes, bytes]], body: bytes, message: str
) -> None:
    with pytest.raises(BadPriority, match=message) as info:
        request_priority(headers, body)
    assert info.value.status == 400


class Slot:
    def __init__(self, name: str, got: list[str]) -> None:
        self.name, self._got, self._done = name, got, False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Endpoint, /) -> None:
        self._done = True
        self._got.append(self.name)

    def set_exception(self, exception: BaseException, /) -> None:
        self._done = True
        self._got.append(f"{self.name}:{type(exception).__name__}")


def classes_dispatcher() -> tuple[Dispatcher, Endpoint, list[float]]:
    now = [100.0]
    pool = Pool(1)
    pool.set_endpoints([A])
    plan = plan_from_classes(["low:10:5", "high:0:1.5", "batch:100:shed"], 30.0)
    d = Dispatcher(pool, hold_when_full=True, plan=plan, clock=lambda: now[0])
    ep = d.try_acquire()
    assert ep is not None
    return d, ep, now


def test_classes_are_served_by_priority_and_on_time_before_late_within_one() -> None:
    d, ep, now = classes_dispatcher()
    got: list[str] = []
    d.hold(Slot("low-old", got), cls=1)
    now[0] = 103.0
    d.hold(Slot("high-late", got), cls=0)
    now[0] = 104.9
    d.hold(Slot("high-fresh", got), cls=0)
    d.hold(Slot("low-fresh", got), cls=1)
    now[0] = 105.0  # low-old waited 5 s (late), high-late 2 s (late); the fresh 0.1 s
    for _ in range(4):
        d.release(ep)
    assert got == ["high-fresh", "high-late", "low-fresh", "low-old"]
    assert [c.late for c in d.classes] == [1, 1, 0]


def test_a_sheddable_class_is_refused_429_when_no_slot_is_free_never_held() -> None:
    d, ep, _ = classes_dispatcher()
    with pytest.raises(Shed, match="sheddable class 'batch'") as info:
        d.hold(Slot("batch", []), cls=2)
    assert info.value.status == 429 and info.value.retry_after_s == 1
    assert d.queued == 0 and d.classes[2].shed == 1
    d.release(ep)
    assert d.try_acquire() is ep  # with a free slot a sheddable request is served


def test_per_class_metrics() -> None:
    d, ep, now = classes_dispatcher()
    registry = CollectorRegistry()
    RouterMetrics(registry, d)
    d.hold(Slot("h", []), cls=0)
    with pytest.raises(Shed):
        d.hold(Slot("b", []), cls=2)
    sample = registry.get_sample_value
    assert sample(names.ROUTER_CLASS_QUEUED, {"class": "high"}) == 1.0
    assert sample(names.ROUTER_CLASS_QUEUED, {"class": "low"}) == 0.0
    assert sample(names.ROUTER_CLASS_HELD, {"class": "high", "outcome": "held"}) == 1.0
    assert sample(names.ROUTER_CLASS_HELD, {"class": "batch", "outcome": "shed"}) == 1.0
    now[0] += 1.0
    d.release(ep)  # "h" gets the slot after 1 s held
    wait = names.ROUTER_CLASS_WAIT
    assert sample(wait + "_bucket", {"class": "high", "le": "0.5"}) == 0.0
    assert sample(wait + "_bucket", {"class": "high", "le": "1.0"}) == 1.0
    assert sample(wait + "_count", {"class": "high"}) == 1.0
    assert sample(wait + "_sum", {"class": "high"}) == 1.0
    assert sample(wait + "_count", {"class": "low"}) == 0.0
    d.classes[0].received += 1  # what the proxy counts with classes
    assert sample(names.ROUTER_CLASS_REQUESTS, {"class": "high"}) == 1.0


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"priority_class": ["high:0:1.5"]}, "needs --hold-when-full"),
        ({"priority_class": ["high:0:soon"], "hold_when_full": True}, "DEADLINE_S must be"),
        (
            {"priority_class": ["a:0:1", "b:0:2"], "hold_when_full": True},
            "must be above 0",
        ),
        (
            {"priority_class": ["a:0:1"], "hold_when_full": True, "hold_deadline_s": 1.5},
            "its own deadline",
        ),
    ],
)
def test_bad_priority_class_flags_name_the_flag(values: dict, message: str) -> None:
    with pytest.raises((ConfigError, ValueError), match=message):
        RouterSettings.model_validate({"endpoints": A, **values})


def test_the_classes_flag_makes_the_dispatchers_plan() -> None:
    cfg = RouterSettings.model_validate(
        {
            "endpoints": A,
            "hold_when_full": True,
            "max_late_s": 30,
            "priority_class": "batch:100:shed,chat:0:1.5",
        }
    )
    plan = cfg.dispatch_plan
    assert [c.name for c in plan.classes] == ["chat", "batch"] and plan.max_late_s == 30.0
    assert RouterSettings.model_validate({"endpoints": A}).dispatch_plan.timed is False
