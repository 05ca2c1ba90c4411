"""Prefix-aware dispatch in the dispatcher (--dispatch prefix): a request goes where its
prompt's prefix is cached while that endpoint is within the balance of the least loaded;
past it, or hitting nowhere, least-outstanding; a removed endpoint's entries go at once;
the index is bounded by an endpoint's KV blocks. The same calls the proxy, the fast path
and the simulator's router make (Admission.enter_now / try_acquire + cached)."""

from __future__ import annotations

import asyncio
import random

import pytest

from inflight.prefix_blocks import token_blocks
from router import endpoint_lists
from router.dispatch import Admission, Charge, Dispatcher
from router.pool import Endpoint, Pool
from router.status import router_status

pytestmark = pytest.mark.unit

A, B, C = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"
GROUP1 = token_blocks(list(range(64)), 16)
GROUP2 = token_blocks(list(range(1000, 1064)), 16)


def prefix_dispatcher(urls: list[str], slots: int = 4, balance: int = 2) -> Dispatcher:
    pool = Pool(slots, rng=random.Random(7))
    pool.set_endpoints(urls)
    return Dispatcher(pool, hold_when_full=True, prefix_balance=balance)


async def _never(ep: Endpoint) -> object:
    raise AssertionError("not opened in these tests")


def admit(d: Dispatcher, blocks: list[int]) -> Admission[object]:
    """As the fast path admits: a slot at once, then the blocks recorded where it went."""
    adm: Admission[object] = Admission(d, _never, lambda ep, exc: None, 0, 0, blocks)
    ep = adm.enter_now()
    assert ep is not None
    d.cached(ep, blocks)
    return adm


def test_a_group_stays_on_the_endpoint_that_cached_it_within_the_balance() -> None:
    d = prefix_dispatcher([A, B])
    first = admit(d, GROUP1)
    home = first.ep
    assert home is not None
    # Same prefix: same endpoint, though the other is idle (1 and 2 over: within 2).
    second = admit(d, GROUP1)
    third = admit(d, GROUP1)
    assert second.ep is home and third.ep is home
    assert d.prefix_queries == 12 and d.prefix_hits == 8  # 4 blocks a request; 2 hit
    # A fourth would make it 3 over the idle one: past the balance, least-outstanding.
    fourth = admit(d, GROUP1)
    assert fourth.ep is not home
    # Another group hits nowhere: the least loaded gets it.
    other = admit(d, GROUP2)
    assert other.ep is fourth.ep
    for adm in (first, second, third, fourth, other):
        adm.leave()
    assert d.inflight == 0


def test_a_new_endpoint_gets_what_hits_nowhere() -> None:
    d = prefix_dispatcher([A, B], balance=8)
    held = [admit(d, GROUP1), admit(d, GROUP1), admit(d, GROUP2), admit(d, GROUP2)]
    assert held[0].ep is held[1].ep and held[2].ep is held[3].ep  # each group at home
    assert held[0].ep is not held[2].ep  # and the second group went to the idle one
    endpoint_lists.apply(d, [A, B, C])
    fresh = admit(d, token_blocks(list(range(5000, 5064)), 16))
    assert fresh.ep is not None and fresh.ep.url == C  # the empty newcomer
    again = admit(d, GROUP1)
    assert again.ep is held[0].ep  # a cached group stays home (within the balance)
    for adm in (*held, fresh, again):
        adm.leave()


def test_a_removed_endpoints_entries_go_at_once() -> None:
    d = prefix_dispatcher([A, B])
    adm = admit(d, GROUP1)
    home = adm.ep
    assert home is not None and d.prefix is not None
    adm.leave()
    assert d.prefix.matched(home.url, GROUP1) == 4
    endpoint_lists.apply(d, [u for u in (A, B) if u != home.url])
    assert d.prefix.matched(home.url, GROUP1) == 0
    endpoint_lists.apply(d, [A, B])  # back at the same address: cold
    assert d.prefix.matched(home.url, GROUP1) == 0


def test_the_index_is_bounded_by_the_endpoints_kv_blocks_and_hashes_in_its_block_size() -> None:
    d = prefix_dispatcher([A])
    assert d.prefix is not None and d.prefix_block_size == 16
    d.set_kv_capacity(A, 3 * 128, block_size=128)  # 3 blocks of 128 tokens
    assert d.prefix_block_size == 128
    big = token_blocks(list(range(128 * 5)), 128)  # 5 blocks: only 3 fit
    admit(d, big).leave()
    assert d.prefix.held(A) == 3 and d.prefix.matched(A, big) == 3


def test_off_by_default_nothing_is_indexed() -> None:
    pool = Pool(4)
    pool.set_endpoints([A, B])
    d = Dispatcher(pool, hold_when_full=True)
    assert d.prefix is None and d.prompt_blocks is None
    adm = admit(d, GROUP1)
    adm.leave()
    assert d.prefix_queries == 0


async def test_a_held_request_records_where_it_went() -> None:
    d = prefix_dispatcher([A], slots=1)
    first = admit(d, GROUP2)

    async def opened(ep: Endpoint) -> object:
        return ep

    waiting: Admission[object] = Admission(d, opened, lambda ep, exc: None, 0, 0, GROUP1)
    task = asyncio.create_task(waiting.enter())
    for _ in range(5):
        await asyncio.sleep(0)
    assert d.queued == 1 and not task.done()  # the only slot is taken: held
    first.leave()
    await task
    assert waiting.ep is not None and waiting.ep.url == A
    assert d.prefix is not None and d.prefix.matched(A, GROUP1) == 4
    assert d.prefix_queries == 8 and d.prefix_hits == 0
    waiting.leave()
    assert d.inflight == 0


def test_bad_settings_name_the_flag() -> None:
    with pytest.raises(ValueError, match="--prefix-balance"):
        Dispatcher(Pool(1), hold_when_full=True, prefix_balance=-1)
    with pytest.raises(ValueError, match="--prefix-block-size"):
        Dispatcher(Pool(1), hold_when_full=True, prefix_balance=1, prefix_block_size=0)


def test_status_reports_each_endpoints_cached_and_unique_blocks() -> None:
    """/router/status with --dispatch prefix: what the supervisor's scale-down reads
    (inflight/control/scale_down.py); without it, the fields are absent (None)."""
    d = prefix_dispatcher([A, B])
    d.prefix.record(A, GROUP1)  # type: ignore[union-attr]
    d.prefix.record(B, GROUP1[:2] + GROUP2)  # type: ignore[union-attr]
    by_url = {e.url: e for e in router_status(d).endpoints}
    assert (by_url[A].cached_blocks, by_url[A].unique_blocks) == (4, 2)
    assert (by_url[B].cached_blocks, by_url[B].unique_blocks) == (6, 4)
    plain = Dispatcher(Pool(4, rng=random.Random(7)))
    plain.pool.set_endpoints([A])
    (only,) = router_status(plain).endpoints
    assert only.cached_blocks is None and only.unique_blocks is None


def token_dispatcher(urls: list[str], kv_tokens: int, balance: int = 2) -> Dispatcher:
    """Prefix dispatch with token admission, each endpoint's cache discovered (block 16)."""
    pool = Pool(4, rng=random.Random(7))
    pool.set_endpoints(urls)
    d = Dispatcher(pool, hold_when_full=True, prefix_balance=balance, discover_kv_tokens=True)
    for url in urls:
        d.set_kv_capacity(url, kv_tokens, block_size=16)
    return d


def admit_tokens(d: Dispatcher, blocks: list[int], tokens: int) -> Admission[object]:
    """As the fast path admits with token admission: the slot, then what it holds there."""
    adm: Admission[object] = Admission(d, _never, lambda ep, exc: None, 0, tokens, blocks)
    ep = adm.enter_now()
    assert ep is not None
    adm.hold(d.cached(ep, blocks, tokens))
    return adm


def test_with_token_admission_a_prefix_shared_in_flight_is_counted_once() -> None:
    # 64-token prompts (4 blocks of 16) + 36 output tokens: a demand of 100.
    d = token_dispatcher([A, B], kv_tokens=1024)
    first = admit_tokens(d, GROUP1, 100)
    assert first.ep is not None
    url = first.ep.url
    # Its own part (36 tokens: 48 in whole blocks of 16) and its prompt's 4 blocks (64).
    assert (first.tokens, first.demand, d.tokens_in_flight(url)) == (36, 100, 48 + 64)
    # The same prefix on the same endpoint, in flight: its 4 blocks are not counted again.
    second = admit_tokens(d, GROUP1, 100)
    assert second.ep is first.ep and second.tokens == 36 and second.demand == 100
    assert d.tokens_in_flight(url) == 112 + 48
    # A prompt no request in flight references is counted whole (where it went).
    other = admit_tokens(d, GROUP2, 100)
    assert other.ep is not None and other.ep is not first.ep
    assert d.tokens_in_flight(other.ep.url) == 112
    second.leave()
    assert d.tokens_in_flight(url) == 112  # exactly what it added comes back
    first.leave()
    other.leave()
    assert d.tokens_in_flight(A) == 0 and d.tokens_in_flight(B) == 0 and d.inflight == 0


def test_the_shared_prefix_stays_counted_until_its_last_request_ends() -> None:
    d = token_dispatcher([A], kv_tokens=1024)
    first = admit_tokens(d, GROUP1, 100)
    second = admit_tokens(d, GROUP1, 100)
    assert d.tokens_in_flight(A) == 160  # 64 shared + 48 + 48 (each one's own part)
    first.leave()  # the request that brought the prefix ends first: it stays in use
    assert d.tokens_in_flight(A) == 112
    # A request whose prefix is in the index but referenced by nothing in flight adds it.
    second.leave()
    third = admit_tokens(d, GROUP1, 100)
    assert d.prefix is not None and d.prefix.matched(A, GROUP1) == 4
    assert d.tokens_in_flight(A) == 112
    third.leave()
    assert d.tokens_in_flight(A) == 0


def test_a_cached_prefix_fits_where_its_whole_demand_would_not() -> None:
    d = token_dispatcher([A], kv_tokens=160)
    first = admit_tokens(d, GROUP1, 100)  # 112 of 160 held
    # 100 more would pass 160; with its 64 cached tokens it adds 36 (48 in blocks): fits.
    second = admit_tokens(d, GROUP1, 100)
    assert second.ep is first.ep and d.tokens_in_flight(A) == 160
    first.leave()
    second.leave()
    assert d.tokens_in_flight(A) == 0


def test_the_simulators_router_counts_the_same_shared_prefix() -> None:
    from inflight.sim.router import SimRouter
    from router.kv_discovery import KvCache

    r = SimRouter(4, random.Random(7), prefix_balance=2, kv_tokens=KvCache(1024, 16))
    r.set_endpoints([A])
    got: list[tuple[Endpoint, Charge]] = []
    for _ in range(2):
        r.arrive(lambda ep, charge: got.append((ep, charge)), tokens=100, blocks=GROUP1)
    assert [c.tokens for _, c in got] == [36, 36]  # the live admission's figures (above)
    assert r.dispatcher.tokens_in_flight(A) == 160
    r.finish(*got[0])
    assert r.dispatcher.tokens_in_flight(A) == 112  # the prefix stays: the second holds it
    r.finish(*got[1])
    assert r.dispatcher.tokens_in_flight(A) == 0 and r.inflight == 0
