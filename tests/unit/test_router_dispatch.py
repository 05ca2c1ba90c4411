"""Slots, the hold queue and the admission that owns L (pure asyncio, no sockets)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from router.dispatch import Admission, Dispatcher
from router.errors import (
    HeldTooLong,
    NoEndpoint,
    NotDelivered,
    QueueFull,
    QueueTimeout,
    RouterError,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from router.pool import Endpoint, Pool
from router.upstream import Refused, Reset

A, B = "http://127.0.0.1:9001", "http://127.0.0.1:9002"


def dispatcher(urls: list[str], hold: bool, slots: int = 1, **kw: float) -> Dispatcher:
    pool = Pool(slots)
    pool.set_endpoints(urls)
    return Dispatcher(pool, hold_when_full=hold, **kw)  # type: ignore[arg-type]


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_without_hold_no_endpoint_fails_at_once() -> None:
    d = dispatcher([], hold=False)
    with pytest.raises(NoEndpoint):
        await d.acquire()


async def test_without_hold_full_endpoints_still_take_requests() -> None:
    d = dispatcher([A], hold=False, slots=1)
    first = await d.acquire()
    second = await d.acquire()
    assert first is second and first.inflight == 2


async def test_hold_is_fifo_and_hands_the_freed_slot_to_the_oldest() -> None:
    d = dispatcher([A], hold=True, slots=1)
    ep = await d.acquire()
    order: list[int] = []

    async def waiter(i: int) -> None:
        got = await d.acquire()
        order.append(i)
        d.release(got)

    tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
    await settle()
    assert d.queued == 3 and ep.inflight == 1
    d.release(ep)
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    assert d.queued == 0 and ep.inflight == 0


async def test_new_arrivals_do_not_overtake_held_requests() -> None:
    d = dispatcher([A], hold=True, slots=1)
    ep = await d.acquire()
    held = asyncio.create_task(d.acquire())
    await settle()
    d.release(ep)  # the slot goes to the held request, not to a newcomer
    late = asyncio.create_task(d.acquire())
    await settle()
    assert held.done() and not late.done()
    d.release(held.result())
    assert (await late) is ep


async def test_try_acquire_never_overtakes_a_held_request() -> None:
    d = dispatcher([A, B], hold=True, slots=1)
    first, second = d.try_acquire(), d.try_acquire()
    assert first is not None and second is not None and first is not second
    assert d.try_acquire() is None  # full
    held = asyncio.create_task(d.acquire())
    await settle()
    d.release(first)  # handed to the held request at once ...
    assert d.try_acquire() is None  # ... so a newcomer finds nothing
    assert (await held) is first


async def test_scale_from_zero_an_endpoint_appearing_wakes_the_queue() -> None:
    d = dispatcher([], hold=True, slots=4)
    held = asyncio.create_task(d.acquire())
    await settle()
    assert d.queued == 1
    d.pool.set_endpoints([B])
    d.pump()
    ep = await held
    assert ep.url == B and ep.inflight == 1 and d.queued == 0


async def test_queue_bound() -> None:
    d = dispatcher([], hold=True, max_queue=1)
    held = asyncio.create_task(d.acquire())
    await settle()
    with pytest.raises(QueueFull, match="1 requests held"):
        await d.acquire()
    held.cancel()
    await asyncio.gather(held, return_exceptions=True)
    assert d.queued == 0


async def test_queue_timeout_leaves_the_queue() -> None:
    d = dispatcher([], hold=True, queue_timeout_s=0.01)
    with pytest.raises(QueueTimeout, match="--queue-timeout-s"):
        await d.acquire()
    assert d.queued == 0


async def test_cancelled_waiter_leaves_the_queue_and_takes_no_slot() -> None:
    d = dispatcher([A], hold=True, slots=1)
    ep = await d.acquire()
    held = asyncio.create_task(d.acquire())
    await settle()
    held.cancel()
    await asyncio.gather(held, return_exceptions=True)
    assert d.queued == 0
    d.release(ep)
    assert ep.inflight == 0


async def test_slot_handed_over_as_the_waiter_is_cancelled_is_passed_on() -> None:
    d = dispatcher([A], hold=True, slots=1)
    ep = await d.acquire()
    first = asyncio.create_task(d.acquire())
    second = asyncio.create_task(d.acquire())
    await settle()
    d.release(ep)  # the slot is assigned to ``first`` ...
    first.cancel()  # ... which is cancelled before it could run
    await asyncio.gather(first, return_exceptions=True)
    assert (await second) is ep  # the slot went on to the next waiter
    assert ep.inflight == 1


# --- --hold-deadline-s: requests that can still be on time go first ------------------
class Clock:
    """The dispatcher's clock, moved by hand (the dispatcher reads it, nothing sleeps)."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Slot:
    """A plain waiter (the simulator's kind): records the endpoint it was handed."""

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


def held_dispatcher(clock: Callable[[], float], **kw: Any) -> Dispatcher:
    pool = Pool(1)
    pool.set_endpoints([A])
    return Dispatcher(pool, hold_when_full=True, clock=clock, **kw)


def deadline_dispatcher(clock: Clock, deadline_s: float = 1.5) -> tuple[Dispatcher, Endpoint]:
    d = held_dispatcher(clock, hold_deadline_s=deadline_s)
    ep = d.try_acquire()
    assert ep is not None
    return d, ep


def test_deadline_serves_requests_still_within_it_before_late_ones_oldest_first() -> None:
    clock = Clock()
    d, ep = deadline_dispatcher(clock)
    got: list[str] = []
    for name, at in (("late1", 100.0), ("late2", 100.5), ("fresh1", 101.0), ("fresh2", 101.2)):
        clock.now = at
        d.hold(Slot(name, got))
    clock.now = 102.1  # late1 waited 2.1 s, late2 1.6 s: past 1.5; fresh1 1.1, fresh2 0.9
    for _ in range(4):
        d.release(ep)  # the slot goes to the next held request, which takes it
    assert got == ["fresh1", "fresh2", "late1", "late2"]
    assert d.late_total == 2 and d.queued == 0 and d.queued_late == 0


def test_deadline_without_overload_is_fifo() -> None:
    clock = Clock()
    d, ep = deadline_dispatcher(clock)
    got: list[str] = []
    for i in range(3):
        clock.now = 100.0 + 0.1 * i
        d.hold(Slot(f"r{i}", got))
    clock.now = 100.5  # nobody waited 1.5 s
    for _ in range(3):
        d.release(ep)
    assert got == ["r0", "r1", "r2"] and d.late_total == 0


def test_without_a_deadline_late_requests_keep_their_place_and_no_clock_is_read() -> None:
    def no_clock() -> float:
        raise AssertionError("FIFO read the clock")

    d = held_dispatcher(no_clock)
    ep = d.try_acquire()
    assert ep is not None
    got: list[str] = []
    for name in ("old", "new"):
        d.hold(Slot(name, got))
    d.release(ep)
    d.release(ep)
    assert got == ["old", "new"] and d.late_total == 0


def test_deadline_a_late_request_that_gave_up_leaves_the_queue_and_takes_no_slot() -> None:
    clock = Clock()
    d, ep = deadline_dispatcher(clock)
    got: list[str] = []
    gone, fresh = Slot("gone", got), Slot("fresh", got)
    d.hold(gone)
    clock.now = 102.0
    d.hold(fresh)
    d.release(ep)  # fresh first; "gone" is moved to the late queue
    assert got == ["fresh"] and d.queued_late == 1
    d.unhold(gone)  # its client went away
    assert d.queued == 0
    d.release(ep)
    assert got == ["fresh"] and ep.inflight == 0  # the slot stayed free


async def test_deadline_with_asyncio_waiters_and_the_queue_bound() -> None:
    clock = Clock()
    d = held_dispatcher(clock, hold_deadline_s=1.0, max_queue=2)
    ep = await d.acquire()
    old = asyncio.create_task(d.acquire())
    await settle()
    clock.now += 5.0
    new = asyncio.create_task(d.acquire())
    await settle()
    with pytest.raises(QueueFull):
        await d.acquire()  # late and fresh together count against --max-queue
    d.release(ep)
    await settle()
    assert new.done() and not old.done()
    d.release(new.result())
    assert (await old) is ep


# --- --max-late-s: the bound on lateness (inflight.control.hold_order) -------------------
def test_a_late_request_overtaken_past_the_bound_is_refused_503() -> None:
    clock = Clock()
    d = held_dispatcher(clock, hold_deadline_s=1.5, max_late_s=10.0)
    ep = d.try_acquire()
    assert ep is not None
    got: list[str] = []
    d.hold(Slot("old", got))
    clock.now = 111.0
    d.hold(Slot("new", got))
    clock.now = 111.5  # "old" held 11.5 s ≥ 1.5 + 10, overtaken by "new" (on time)
    d.release(ep)
    assert got == ["old:HeldTooLong", "new"]
    assert d.queued == 0 and d.classes[0].too_long == 1 and d.late_total == 1


def test_a_late_request_at_the_head_is_served_however_long_it_waited() -> None:
    clock = Clock()
    d = held_dispatcher(clock, hold_deadline_s=1.5, max_late_s=10.0)
    ep = d.try_acquire()
    assert ep is not None
    got: list[str] = []
    d.hold(Slot("old", got))
    clock.now = 200.0  # nobody overtook it
    d.release(ep)
    assert got == ["old"] and d.classes[0].too_long == 0


def test_requests_held_through_a_cold_start_are_not_refused_when_replicas_come() -> None:
    clock = Clock()
    pool = Pool(1)
    d = Dispatcher(pool, hold_when_full=True, hold_deadline_s=1.5, max_late_s=10.0, clock=clock)
    got: list[str] = []
    d.hold(Slot("cold", got))  # no endpoint: a cold start
    clock.now = 160.0
    d.hold(Slot("fresh", got))
    clock.now = 161.0
    pool.set_endpoints([A])
    d.pump()  # "fresh" goes first; "cold" waited 61 s, but a replica was ready only now
    assert got == ["fresh"]
    ep = pool.endpoints()[0]
    d.release(ep)
    assert got == ["fresh", "cold"] and d.classes[0].too_long == 0


async def test_held_too_long_reaches_the_awaiting_request_and_takes_no_slot() -> None:
    clock = Clock()
    d = held_dispatcher(clock, hold_deadline_s=1.0, max_late_s=5.0)
    ep = await d.acquire()
    old = asyncio.create_task(d.acquire())
    await settle()
    clock.now += 10.0
    new = asyncio.create_task(d.acquire())
    await settle()
    d.release(ep)
    with pytest.raises(HeldTooLong, match="--max-late-s"):
        await old
    assert (await new) is ep and ep.inflight == 1 and d.queued == 0
    assert HeldTooLong.status == 503 and HeldTooLong.retry_after_s == 1


# --- a retried request keeps its place ------------------------------------------------
class Gate:
    """An opener whose first call (on ``first_url``) is refused once the test says so."""

    def __init__(self, d: Dispatcher) -> None:
        self.d = d
        self.calls: list[tuple[str, str]] = []

    def opener(self, name: str, refuse: bool) -> Callable[[Endpoint], Any]:
        async def open(ep: Endpoint) -> str:
            self.calls.append((name, ep.url))
            if refuse and len([c for c in self.calls if c[0] == name]) == 1:
                raise Refused("refused")
            await asyncio.Event().wait()  # holds the slot until cancelled
            return name

        return open

    def refused(self, ep: Endpoint, _exc: NotDelivered) -> None:
        self.d.pool.mark_unhealthy(ep, now_s=0.0, backoff_s=60.0)


@pytest.mark.parametrize("deadline_s", [None, 1.5])
async def test_a_retried_request_keeps_its_place_in_the_hold_order(
    deadline_s: float | None,
) -> None:
    """It was held before "later", got a slot on A, A refused it: held again, it is still
    ahead of "later" (it used to go behind it, held anew)."""
    clock = Clock()
    d = dispatcher([A, B], hold=True, slots=1, hold_deadline_s=deadline_s, clock=clock)  # type: ignore[arg-type]
    gate = Gate(d)
    busy_a, busy_b = d.try_acquire(), d.try_acquire()
    assert busy_a is not None and busy_b is not None
    retried = asyncio.create_task(Admission(d, gate.opener("retried", True), gate.refused).enter())
    await settle()
    clock.now += 0.5
    later = asyncio.create_task(Admission(d, gate.opener("later", False), gate.refused).enter())
    await settle()
    d.release(busy_a)  # to "retried", which A refuses: held again
    await settle()
    assert gate.calls == [("retried", busy_a.url)] and d.queued == 2
    d.release(busy_b)
    await settle()
    assert gate.calls[1:] == [("retried", busy_b.url)]  # not "later"
    for task in (retried, later):
        task.cancel()
    await asyncio.gather(retried, later, return_exceptions=True)
    assert all_free(d)


async def test_a_retried_request_that_never_waited_goes_ahead_of_its_class() -> None:
    clock = Clock()
    d = dispatcher([A, B], hold=True, slots=1, hold_deadline_s=1.5, clock=clock)  # type: ignore[arg-type]
    gate = Gate(d)
    busy_b = d.try_acquire()
    assert busy_b is not None
    refused_open = asyncio.Event()

    async def first_open(ep: Endpoint) -> str:
        gate.calls.append(("first", ep.url))
        if len(gate.calls) == 1:
            await refused_open.wait()  # the connect takes a while; others arrive meanwhile
            raise Refused("refused")
        await asyncio.Event().wait()
        return "first"

    first = asyncio.create_task(Admission(d, first_open, gate.refused).enter())  # slot A at once
    await settle()
    clock.now += 0.2
    later = asyncio.create_task(Admission(d, gate.opener("later", False), gate.refused).enter())
    await settle()
    assert d.queued == 1
    refused_open.set()
    await settle()
    d.release(busy_b)
    await settle()
    assert [c[0] for c in gate.calls] == ["first", "first"]
    for task in (first, later):
        task.cancel()
    await asyncio.gather(first, later, return_exceptions=True)
    assert all_free(d)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"max_queue": -1}, "--max-queue"),
        ({"max_late_s": 0}, "--max-late-s"),
        ({"queue_timeout_s": 0}, "--queue-timeout-s"),
        ({"hold_deadline_s": 0}, "--hold-deadline-s"),
        ({"hold_deadline_s": -1.0}, "--hold-deadline-s"),
    ],
)
def test_bad_settings_name_the_flag(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Dispatcher(Pool(4), **kw)


# --- the admission: the one owner of L and the slot (every way out) ---------------------
class UpstreamCalls:
    """Stands in for the proxy's upstream call (``open``): pure asyncio, no sockets.

    ``plan`` says what each call does, in order: a value to return, an exception to raise,
    or "wait" (block until cancelled, as a request queued in vLLM does).
    """

    def __init__(self, d: Dispatcher, *plan: object) -> None:
        self.d = d
        self.plan = list(plan)
        self.calls: list[str] = []
        self.not_delivered: list[tuple[str, str]] = []
        self.waiting = asyncio.Event()

    async def open(self, ep: Endpoint) -> object:
        self.calls.append(ep.url)
        # While the upstream has the request, it is in L and holds its slot.
        assert self.d.inflight >= 1 and ep.inflight >= 1
        step = self.plan.pop(0)
        if step == "wait":
            self.waiting.set()
            await asyncio.Event().wait()
        if isinstance(step, BaseException):
            raise step
        return step

    def refused(self, ep: Endpoint, exc: NotDelivered) -> None:
        """What the proxy does: count it, mark the endpoint so the retry goes elsewhere."""
        self.not_delivered.append((ep.url, exc.reason))
        self.d.pool.mark_unhealthy(ep, now_s=0.0, backoff_s=60.0)

    def admit(self) -> Admission[object]:
        return Admission(self.d, self.open, self.refused)


def all_free(d: Dispatcher) -> bool:
    """Nothing in L, nothing held in the queue, every slot given back."""
    return d.inflight == 0 and d.queued == 0 and all(e.inflight == 0 for e in d.pool.endpoints())


async def test_admit_normal_exit_counts_l_and_the_slot_inside_and_releases_after() -> None:
    d = dispatcher([A], hold=False)
    up = UpstreamCalls(d, "response")
    async with up.admit() as ticket:
        assert ticket.response == "response"
        assert ticket.ep is not None and ticket.ep.url == A
        assert d.inflight == 1 and ticket.ep.inflight == 1
    assert all_free(d)
    assert ticket.ep.url == A and not ticket.retried  # kept for the metrics' label


@pytest.mark.parametrize(
    "error",
    [
        UpstreamUnavailable("upstream sent a reply that is not HTTP"),
        UpstreamTimeout("no response headers in time"),
    ],
    ids=["upstream-error", "upstream-timeout"],
)
async def test_admit_upstream_error_or_timeout_before_the_response_releases(
    error: RouterError,
) -> None:
    d = dispatcher([A], hold=False)
    up = UpstreamCalls(d, error)
    admission = up.admit()
    with pytest.raises(type(error)):
        async with admission:
            raise AssertionError("the block must not run")
    assert all_free(d)
    assert admission.ep is not None and admission.ep.url == A  # it did reach A
    assert up.not_delivered == []  # delivered, so not retried elsewhere


@pytest.mark.parametrize(
    "error",
    [OSError("client connection lost"), RuntimeError("upstream broke mid-body")],
    ids=["client-gone-mid-stream", "error-mid-stream"],
)
async def test_admit_error_inside_the_block_releases(error: Exception) -> None:
    d = dispatcher([A], hold=False)
    with pytest.raises(type(error)):
        async with UpstreamCalls(d, "response").admit():
            raise error
    assert all_free(d)


async def test_admit_queue_timeout_leaves_l_and_the_queue() -> None:
    d = dispatcher([A], hold=True, slots=1, queue_timeout_s=0.01)
    busy = await d.acquire()  # the only slot is taken
    up = UpstreamCalls(d, "never")
    with pytest.raises(QueueTimeout):
        async with up.admit():
            raise AssertionError("the block must not run")
    assert d.inflight == 0 and d.queued == 0 and up.calls == []
    d.release(busy)
    assert all_free(d)


async def test_admit_client_gone_before_the_first_byte_releases() -> None:
    """Cancelled while the upstream has the request (queued in vLLM)."""
    d = dispatcher([A], hold=False)
    up = UpstreamCalls(d, "wait")

    async def request() -> None:
        async with up.admit():
            raise AssertionError("the block must not run")

    task = asyncio.create_task(request())
    await up.waiting.wait()
    assert d.inflight == 1 and d.pool.endpoints()[0].inflight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all_free(d)


async def test_admit_cancelled_mid_stream_releases() -> None:
    d = dispatcher([A], hold=False)
    inside = asyncio.Event()

    async def request() -> None:
        async with UpstreamCalls(d, "response").admit():
            inside.set()
            await asyncio.Event().wait()  # relaying a long stream

    task = asyncio.create_task(request())
    await inside.wait()
    assert d.inflight == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert all_free(d)


async def test_admit_cancelled_while_held_in_the_queue_is_in_l_then_leaves() -> None:
    d = dispatcher([A], hold=True, slots=1)
    busy = await d.acquire()
    up = UpstreamCalls(d, "response")

    async def request() -> None:
        async with up.admit():
            raise AssertionError("the block must not run")

    task = asyncio.create_task(request())
    await settle()
    assert d.inflight == 1 and d.queued == 1  # held requests count in L
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert d.inflight == 0 and d.queued == 0 and up.calls == []
    d.release(busy)
    assert all_free(d)


async def test_admit_slot_handed_over_as_the_held_request_is_cancelled_is_passed_on() -> None:
    d = dispatcher([A], hold=True, slots=1)
    busy = await d.acquire()
    first, second = UpstreamCalls(d, "one"), UpstreamCalls(d, "two")
    got: list[object] = []

    async def request(up: UpstreamCalls) -> None:
        async with up.admit() as ticket:
            got.append(ticket.response)

    t1 = asyncio.create_task(request(first))
    t2 = asyncio.create_task(request(second))
    await settle()
    d.release(busy)  # the slot is assigned to t1 ...
    t1.cancel()  # ... which is cancelled before it could run
    await asyncio.gather(t1, t2, return_exceptions=True)
    assert got == ["two"] and first.calls == []
    assert all_free(d)


async def test_admit_retries_once_on_another_endpoint_when_not_delivered() -> None:
    d = dispatcher([A, B], hold=False)
    up = UpstreamCalls(d, Refused("refused"), "response")
    async with up.admit() as ticket:
        first, second = up.calls
        assert first != second
        assert ticket.ep is not None and ticket.ep.url == second
        assert ticket.response == "response" and ticket.retried
        # The first endpoint's slot was given back before the second was taken.
        assert {e.url: e.inflight for e in d.pool.endpoints()} == {first: 0, second: 1}
        assert d.inflight == 1
    assert up.not_delivered == [(first, "connect")]
    assert all_free(d)


async def test_admit_not_delivered_twice_is_502_after_one_retry() -> None:
    d = dispatcher([A, B], hold=False)
    up = UpstreamCalls(d, Reset("reset"), Refused("refused"), "never")
    admission = up.admit()
    with pytest.raises(UpstreamUnavailable, match="retried once"):
        async with admission:
            raise AssertionError("the block must not run")
    assert len(up.calls) == 2 and up.plan == ["never"]  # one retry, not more
    assert up.not_delivered == [(up.calls[0], "reset"), (up.calls[1], "connect")]
    assert admission.ep is not None and admission.ep.url == up.calls[1] and admission.retried
    assert all_free(d)


async def test_admit_retry_with_no_other_endpoint_is_no_endpoint() -> None:
    d = dispatcher([A], hold=False)
    up = UpstreamCalls(d, Refused("refused"), "never")
    admission = up.admit()
    with pytest.raises(NoEndpoint):
        async with admission:
            raise AssertionError("the block must not run")
    assert admission.ep is None and admission.retried  # no endpoint has the request
    assert all_free(d)


async def test_admit_cancelled_during_the_retry_releases() -> None:
    d = dispatcher([A, B], hold=False)
    up = UpstreamCalls(d, Refused("refused"), "wait")

    async def request() -> None:
        async with up.admit():
            raise AssertionError("the block must not run")

    task = asyncio.create_task(request())
    await up.waiting.wait()
    assert d.inflight == 1 and sum(e.inflight for e in d.pool.endpoints()) == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert all_free(d)


async def test_admit_leaves_exactly_once() -> None:
    d = dispatcher([A], hold=False)
    admission = UpstreamCalls(d, "response").admit()
    await admission.__aenter__()
    await admission.__aexit__(None, None, None)
    await admission.__aexit__(None, None, None)  # a second exit gives nothing back again
    assert all_free(d)


def test_l_has_one_writer_the_dispatchers_enter_and_leave() -> None:
    """L is written by Dispatcher.enter/leave only (the admission, the proxy's fast path
    and the simulator's router all call them): the count is read-only from outside, and no
    module reaches into the field behind it (``x._inflight``; a class's own
    ``self._inflight`` is its own)."""
    d = Dispatcher(Pool(2))
    with pytest.raises(AttributeError):
        d.inflight = 1  # type: ignore[misc]
    d.enter()
    d.enter()
    assert d.inflight == 2
    d.leave()
    assert d.inflight == 1
    root = Path(__file__).resolve().parents[2]
    writers = sorted(
        str(path.relative_to(root))
        for top in ("router", "inflight", "external_scaler")
        for path in (root / top).rglob("*.py")
        if re.search(r"(?<!self)\._inflight\b", path.read_text())
    )
    assert writers == [], f"L's field is reached into from outside: {writers}"
