"""Slots and the hold queue (pure asyncio, no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from router.dispatch import Dispatcher
from router.errors import NoEndpoint, QueueFull, QueueTimeout
from router.pool import Pool

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


@pytest.mark.parametrize(
    ("kw", "message"),
    [({"max_queue": -1}, "--max-queue"), ({"queue_timeout_s": 0}, "--queue-timeout-s")],
)
def test_bad_settings_name_the_flag(kw: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Dispatcher(Pool(4), **kw)
