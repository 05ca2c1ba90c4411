"""KV capacity discovery (router/kv_discovery.py) against a real emulator on 127.0.0.1: its
``/metrics`` (``vllm:cache_config_info``) gives the capacity, its ``/v1/models`` the
``max_model_len`` a request without ``max_tokens`` is costed with."""

from __future__ import annotations

import aiohttp

from router.dispatch import Dispatcher
from router.kv_discovery import discover_once
from router.pool import Pool
from router.tokens import CHAT, TokenDemand
from tests.support import ProcessTracker, start_kv_bound_emulator

CHAT_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "xxxxxxxx"}]}'


async def test_discovery_reads_the_capacity_and_max_model_len_of_each_endpoint(
    procs: ProcessTracker,
) -> None:
    emulator = start_kv_bound_emulator(procs, model="m", slots=4)
    gone = "http://127.0.0.1:9"  # nothing listens: it says nothing, keeps what it had
    pool = Pool(4)
    pool.set_endpoints([emulator.url, gone])
    demand = TokenDemand(None)
    d = Dispatcher(
        pool, hold_when_full=True, kv_tokens=1000, discover_kv_tokens=True, demand=demand
    )
    assert demand(CHAT, CHAT_BODY) == 2 + 4  # max_model_len unknown: the prompt alone
    async with aiohttp.ClientSession() as session:
        await discover_once(d, session, timeout_s=5.0, fixed_len=False)
    # 40 blocks of 128 stated: 39 usable (vLLM's null block), demands in whole blocks
    assert d.kv_capacity(emulator.url) == 39 * 128 and d.charge_of(emulator.url, 2000) == 2048
    assert d.charge_of(gone, 2000) == 2000  # no block size known there
    assert d.kv_capacity(gone) == 1000  # the configured one, until it says
    assert demand.max_model_len == 2048
    assert demand(CHAT, CHAT_BODY) == 2048  # prompt + (max_model_len − prompt)
    fixed = TokenDemand(1024)
    d2 = Dispatcher(Pool(4), hold_when_full=True, discover_kv_tokens=True, demand=fixed)
    d2.pool.set_endpoints([emulator.url])
    async with aiohttp.ClientSession() as session:
        await discover_once(d2, session, timeout_s=5.0, fixed_len=True)
    assert d2.kv_capacity(emulator.url) == 39 * 128 and fixed.max_model_len == 1024
