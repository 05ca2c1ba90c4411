"""The simulated router: the live Pool and Dispatcher, held requests FIFO, L accounted."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from inflight.sim.router import SimRouter
from router.dispatch import Charge
from router.errors import NoEndpoint, QueueFull
from router.pool import Endpoint


def _router(hold: bool = True, max_queue: int = 8) -> tuple[SimRouter, list[tuple[str, str]]]:
    r = SimRouter(2, random.Random(0), max_queue=max_queue, hold_when_full=hold)
    return r, []


def _record(got: list[tuple[str, str]], name: str) -> Callable[[Endpoint, Charge], None]:
    return lambda ep, _charge: got.append((name, ep.url))


def test_slots_first_then_held_in_order_and_handed_over_on_release() -> None:
    r, got = _router()
    r.set_endpoints(["http://a:1"])
    eps: dict[str, Endpoint] = {}

    def slot(name: str) -> Callable[[Endpoint, Charge], None]:
        def on(ep: Endpoint, _charge: Charge) -> None:
            got.append((name, ep.url))
            eps[name] = ep

        return on

    for name in "abcd":
        r.arrive(slot(name))
    assert [g[0] for g in got] == ["a", "b"]  # 2 slots
    assert (r.inflight, r.queued, r.received) == (4, 2, 4)
    r.finish(eps["a"])
    assert [g[0] for g in got] == ["a", "b", "c"]  # the oldest held one takes the slot
    assert (r.inflight, r.queued) == (3, 1)


def test_a_new_endpoint_takes_held_requests_at_once() -> None:
    r, got = _router()
    r.set_endpoints([])
    for name in "ab":
        r.arrive(_record(got, name))
    assert got == [] and r.queued == 2
    r.set_endpoints(["http://b:1"])
    assert got == [("a", "http://b:1"), ("b", "http://b:1")]


def test_a_full_queue_and_a_timeout_leave_l() -> None:
    r, _ = _router(max_queue=1)
    r.set_endpoints([])
    held = r.arrive(lambda ep, tokens: None)
    assert held is not None
    with pytest.raises(QueueFull):
        r.arrive(lambda ep, tokens: None)
    assert (r.inflight, r.queued) == (1, 1)
    assert r.give_up(held)
    assert (r.inflight, r.queued) == (0, 0)
    assert not r.give_up(held)  # once


def test_without_holding_a_full_replica_still_gets_it_and_none_ready_is_503() -> None:
    r, got = _router(hold=False)
    with pytest.raises(NoEndpoint):
        r.arrive(lambda ep, tokens: None)
    assert r.inflight == 0
    r.set_endpoints(["http://a:1"])
    for name in "abc":
        assert r.arrive(_record(got, name)) is None
    assert len(got) == 3 and r.queued == 0  # vLLM queues the third
