"""The simulated supervisor: inflight.control.lifecycle's decisions on virtual probes."""

from __future__ import annotations

import random

from inflight.control.lifecycle import ReplicaPhase
from inflight.emulator.engine import Sequence
from inflight.emulator.profile import Profile
from inflight.sim.events import EventQueue
from inflight.sim.fleet import Fleet
from inflight.sim.router import SimRouter
from router.pool import Endpoint


def _fleet(startup_s: float = 30.0) -> tuple[Fleet, EventQueue, SimRouter]:
    events = EventQueue(0.0)
    router = SimRouter(4, random.Random(0))
    return Fleet(Profile(startup_s=startup_s), events, router, lambda: None), events, router


def test_a_new_replica_is_ready_after_its_start_up_and_joins_the_router() -> None:
    fleet, events, router = _fleet()
    fleet.start_ready(1)
    assert router.ready_endpoints() == 1
    events.at(5.0, lambda: fleet.set_desired(2))
    events.run_until(34.999)
    assert (fleet.live, fleet.ready, router.ready_endpoints()) == (2, 1, 1)
    events.run_until(35.0)
    assert (fleet.live, fleet.ready, router.ready_endpoints()) == (2, 2, 2)


def test_a_replica_started_at_an_inexact_time_is_ready_at_its_own_pass() -> None:
    # (50.0999999999979 + 30) − 50.0999999999979 is 29.999999999999993 in floats: the pass
    # at the end of start-up must still find it healthy, with no other pass to follow.
    fleet, events, router = _fleet()
    fleet.start_ready(1)
    started = 50.0999999999979
    events.at(started, lambda: fleet.set_desired(8))
    events.run_until(started + 30.0)
    assert (fleet.live, fleet.ready, router.ready_endpoints()) == (8, 8, 8)


def test_scale_down_cancels_a_starting_replica_first_then_drains_the_newest_ready() -> None:
    fleet, events, router = _fleet()
    fleet.start_ready(2)
    events.at(1.0, lambda: fleet.set_desired(3))
    events.run_until(2.0)
    assert [s.phase for s in fleet.states].count(ReplicaPhase.STARTING) == 1
    events.at(3.0, lambda: fleet.set_desired(2))
    events.run_until(3.0)
    assert (fleet.live, fleet.ready) == (2, 2)  # the starting one was cancelled and is gone
    # One request on each ready replica: equally busy, so the newest leaves, and its
    # request keeps it draining (live) until it ends.
    newest = max(fleet.replicas.values(), key=lambda r: r.id)
    for r in list(fleet.replicas.values()):
        _busy(router, r.url)
    ep = router.pool.get(newest.url)
    assert ep is not None
    events.at(4.0, lambda: fleet.set_desired(1))
    events.run_until(4.0)
    assert fleet.phase(newest.id) is ReplicaPhase.DRAINING
    assert (fleet.live, fleet.ready, router.ready_endpoints()) == (2, 1, 1)
    events.at(9.0, lambda: _finish(fleet, router, ep))
    events.run_until(9.0)
    assert (fleet.live, fleet.ready) == (1, 1)
    assert newest.id not in fleet.replicas


def test_scale_down_keeps_the_busier_replica_even_the_newest() -> None:
    """inflight.control.scale_down, with prefix dispatch (the rule comes with it): fewest
    requests in flight leaves first."""
    events = EventQueue(0.0)
    router = SimRouter(4, random.Random(0), prefix_balance=2)
    fleet = Fleet(Profile(startup_s=30.0), events, router, lambda: None)
    fleet.start_ready(2)
    oldest, newest = sorted(fleet.replicas.values(), key=lambda r: r.id)
    _busy(router, newest.url)
    events.at(1.0, lambda: fleet.set_desired(1))
    events.run_until(1.0)
    assert oldest.id not in fleet.replicas  # idle: drained at once, gone
    assert fleet.phase(newest.id) is ReplicaPhase.READY


def test_without_prefix_dispatch_the_newest_leaves_even_when_busy() -> None:
    """Off by default with its feature: newest first, as before (simulations unchanged)."""
    fleet, events, router = _fleet()
    fleet.start_ready(2)
    oldest, newest = sorted(fleet.replicas.values(), key=lambda r: r.id)
    _busy(router, newest.url)
    events.at(1.0, lambda: fleet.set_desired(1))
    events.run_until(1.0)
    assert fleet.phase(newest.id) is ReplicaPhase.DRAINING
    assert fleet.phase(oldest.id) is ReplicaPhase.READY


def test_scale_down_keeps_the_replica_with_the_cache_no_other_holds() -> None:
    """Equally busy (idle): the one whose prefix blocks exist nowhere else stays."""
    events = EventQueue(0.0)
    router = SimRouter(4, random.Random(0), prefix_balance=2)
    fleet = Fleet(Profile(startup_s=30.0), events, router, lambda: None)
    fleet.start_ready(2)
    oldest, newest = sorted(fleet.replicas.values(), key=lambda r: r.id)
    index = router.dispatcher.prefix
    assert index is not None
    index.record(oldest.url, [1, 2])  # both hold 1, 2
    index.record(newest.url, [1, 2, 3, 4])  # 3, 4 only here
    events.at(1.0, lambda: fleet.set_desired(1))
    events.run_until(1.0)
    assert oldest.id not in fleet.replicas
    assert fleet.phase(newest.id) is ReplicaPhase.READY


def _busy(router: SimRouter, url: str) -> Endpoint:
    """A request the router holds on ``url`` (never finished unless the test does)."""
    ep = router.pool.get(url)
    assert ep is not None
    router.dispatcher.enter()
    router.pool.acquire(ep)
    return ep


def _finish(fleet: Fleet, router: SimRouter, ep: Endpoint) -> None:
    router.finish(ep)
    fleet.released(fleet.by_url[ep.url])


def test_a_drain_that_never_ends_stops_at_the_deadline() -> None:
    fleet, events, router = _fleet()
    fleet.start_ready(2)
    newest = max(fleet.replicas.values(), key=lambda r: r.id)
    for r in fleet.replicas.values():  # one request on each, held forever: the newest leaves
        _busy(router, r.url)
    newest.engine.submit(Sequence(10, 10**6, 0.0), 0.0)
    events.at(1.0, lambda: fleet.set_desired(1))
    events.run_until(1.0 + fleet.config.drain_timeout_s - 0.001)
    assert fleet.live == 2
    events.run_until(1.0 + fleet.config.drain_timeout_s)
    assert fleet.live == 1
