"""An endpoint's KV capacity read as it is added (router/kv_discovery.py, ``AddedReads``).

Before, a replica added by a scale-up was admitted on request slots alone until the next
``--discover-interval-s`` round: a fresh vLLM whose cache fits two long requests was sent
four. Here the interval is 3,600 s, so only the on-add read can tell the router the cache.

* The router (a real process) in front of the emulator with a KV cache that binds (40
  blocks of 128: 4,992 usable tokens; requests of 1,800 + 200 tokens, 2,048 in whole
  blocks, so two fit and three do not), scaled from zero by its endpoints file: the
  emulator never holds more than two, and the other two wait at the router.
* A replica whose ``/metrics`` answers 500, closes the connection or does not answer: the
  router falls back to ``--kv-tokens`` (else slots), counts the failed read in
  ``router_kv_capacity_read_failures_total``, and every held request is answered. The
  replica is a stand-in (``LoopbackHTTPServer``): the emulator's ``/metrics`` cannot be
  made to fail, and the stand-in counts exactly how many requests it holds at once.
* In-process (the dispatcher, the reader and loopback servers on this loop): an endpoint
  removed while it is read, or removed and added again, and the reader stopped (the
  router shutting down), lose no held request and leave no mark behind.

Every wait is a poll; nothing asserts on time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from experiments.token_admission_check import scrape
from inflight import names
from inflight.emulator import hold_client
from router import endpoint_lists
from router.dispatch import Dispatcher
from router.kv_discovery import AddedReads
from router.pool import Endpoint, Pool
from router.tokens import TokenDemand
from tests.integration.test_router_emulator import start_router
from tests.support import (
    LoopbackHTTPServer,
    ProcessTracker,
    QuietHandler,
    start_kv_bound_emulator,
    until,
    wait_for,
)

MODEL = "kv-bound"
PROMPT, OUTPUT = 1800, 200  # 2,000 tokens: 2,048 in blocks of 128; two fit in 4,992
USABLE = 39 * 128  # 40 blocks stated, vLLM's null block left out
CACHE_INFO = 'vllm:cache_config_info{block_size="128",num_gpu_blocks="40"} 1.0\n'
BODY = json.dumps({"model": MODEL, "prompt": [1] * PROMPT, "max_tokens": OUTPUT}).encode()
# Token admission, reading capacities; the rounds far apart (only the on-add read counts).
ROUTER_FLAGS = ("--hold-when-full", "--discover-kv-tokens", "--discover-interval-s", "3600",
                "--file-poll-s", "0.1")  # fmt: skip


# --- helpers ---------------------------------------------------------------------------------
def write_endpoints(path: Path, urls: list[str]) -> None:
    """Replace the endpoints file atomically (as ``inflight up`` does)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(urls))
    os.replace(tmp, path)


class Clients:
    """``n`` completions sent at once, each on its own thread; ``codes`` their answers."""

    def __init__(self, url: str, n: int) -> None:
        self.codes: list[int] = []
        self.threads = [threading.Thread(target=self._send, args=(url,)) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _send(self, url: str) -> None:
        req = urllib.request.Request(
            url + "/v1/completions", BODY, {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                resp.read()
                self.codes.append(resp.status)
        except urllib.error.HTTPError as exc:
            self.codes.append(exc.code)
        except OSError:
            self.codes.append(-1)  # the router stopped under it (teardown of a failed test)

    def join(self) -> None:
        for t in self.threads:
            t.join(timeout=60)


@pytest.fixture
def endpoints_file(tmp_path: Path) -> Path:
    path = tmp_path / "endpoints.json"
    write_endpoints(path, [])
    return path


# --- the router and the emulator -------------------------------------------------------------
def test_a_replica_added_with_a_small_cache_is_never_sent_more_than_it_holds(
    procs: ProcessTracker, endpoints_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The emulator's clock held (--hold-control) while the router sends to it: what it
    # was sent waits in its queue until the test lets it admit, and the state read lasts.
    monkeypatch.setenv("INFLIGHT_EMULATOR_HOLD_CONTROL", "true")
    emulator = start_kv_bound_emulator(procs, model=MODEL, slots=4, time_scale=0.5)
    hold_client.hold(emulator.url)
    router = start_router(procs, "--endpoints-file", str(endpoints_file), extra=ROUTER_FLAGS)
    clients = Clients(router.url, 4)
    try:
        wait_for(lambda: scrape(router.url)[names.ROUTER_QUEUED] == 4, what="4 held, no replica")
        write_endpoints(endpoints_file, [emulator.url])  # the scale-up
        wait_for(
            lambda: (
                hold_client.engine_state(emulator.url)["waiting"] == 2
                and scrape(router.url)[names.ROUTER_QUEUED] == 2
            ),
            timeout_s=60,
            what="2 sent to the held emulator, 2 held at the router",
        )
        assert hold_client.admit(emulator.url, 2)["held"]  # both admitted, held there
        engine = scrape(emulator.url)
        assert (engine[names.VLLM_RUNNING], engine[names.VLLM_WAITING]) == (2, 0)
        at_router = scrape(router.url)
        assert at_router[names.ROUTER_QUEUED] == 2
        assert at_router[names.ROUTER_ENDPOINT_KV_TOKENS] == USABLE  # read on add
        # the first went as the replica was added (one at a time while read: 2,000, no
        # block size known yet), the second once read (2,048 in whole blocks)
        assert at_router[names.ROUTER_ENDPOINT_INFLIGHT_TOKENS] == 2000 + 2048
        assert at_router[names.ROUTER_KV_READ_FAILURES] == 0
        hold_client.release(emulator.url)
        wait_for(lambda: len(clients.codes) == 4, timeout_s=120, what="all four answered")
        # the most requests the emulator held at once (running + waiting), as it recorded it
        most = hold_client.engine_state(emulator.url)["most_in_engine"]
        assert most == 2, f"the emulator held {most} at once"
        assert clients.codes == [200] * 4
        assert scrape(router.url)[names.ROUTER_INFLIGHT] == 0
    finally:
        with contextlib.suppress(OSError):
            hold_client.release(emulator.url)  # a failed test's clients are answered
        clients.join()


# --- a replica whose /metrics fails (a stand-in) ----------------------------------------------
class StandIn(QuietHandler):
    """A replica that serves completions (each held until ``release``) and whose
    ``/metrics`` fails as ``mode`` says: ``500``, ``close`` (no answer, connection closed)
    or ``hang`` (answers nothing until ``release``)."""

    mode = "500"
    url = ""  # where it listens
    lock = threading.Lock()
    release = threading.Event()
    holding = 0  # completions being served now
    most = 0  # the most at once

    def do_GET(self) -> None:
        cls = type(self)
        if self.path == "/health":
            self.respond(b"{}")
        elif self.path == "/metrics":
            if cls.mode == "500":
                self.respond(b"engine error", "text/plain", status=500)
            elif cls.mode == "hang":
                cls.release.wait(timeout=120)
                self.respond(CACHE_INFO.encode(), "text/plain")
            else:  # close: the connection ends without an answer
                self.close_connection = True
        else:
            self.respond(b'{"object": "list", "data": []}')

    def do_POST(self) -> None:
        cls = type(self)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with cls.lock:
            cls.holding += 1
            cls.most = max(cls.most, cls.holding)
        cls.release.wait(timeout=120)
        with cls.lock:
            cls.holding -= 1
        body = {
            "id": "cmpl-1", "object": "text_completion", "created": 0, "model": MODEL,
            "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
            "usage": {"prompt_tokens": PROMPT, "completion_tokens": 1, "total_tokens": PROMPT + 1},
        }  # fmt: skip
        self.respond(json.dumps(body).encode())


@pytest.fixture
def stand_in() -> Iterator[type[StandIn]]:
    class Replica(StandIn):  # this test's own state
        release = threading.Event()
        lock = threading.Lock()

    handler = Replica
    server = LoopbackHTTPServer(handler)
    handler.url = server.url
    try:
        yield handler
    finally:
        handler.release.set()
        server.close()


@pytest.mark.parametrize(
    ("mode", "kv_tokens", "admitted"),
    [("500", "4992", 2), ("close", None, 4), ("hang", "4992", 2)],
)
def test_a_failed_read_on_add_falls_back_and_loses_no_held_request(
    procs: ProcessTracker,
    endpoints_file: Path,
    stand_in: type[StandIn],
    mode: str,
    kv_tokens: str | None,
    admitted: int,
) -> None:
    stand_in.mode = mode
    url = stand_in.url
    flags = [*ROUTER_FLAGS, "--health-timeout-s", "0.5"]
    if kv_tokens is not None:
        flags += ["--kv-tokens", kv_tokens]  # the fallback: 2 of 2,000 tokens fit
    router = start_router(procs, "--endpoints-file", str(endpoints_file), extra=tuple(flags))
    clients = Clients(router.url, 4)
    try:
        wait_for(lambda: scrape(router.url)[names.ROUTER_QUEUED] == 4, what="4 held, no replica")
        write_endpoints(endpoints_file, [url])
        failures = names.ROUTER_KV_READ_FAILURES

        def fell_back() -> bool:
            at = scrape(router.url)
            return at[failures] == 1 and at[names.ROUTER_QUEUED] == 4 - admitted

        wait_for(fell_back, timeout_s=30, what=f"{mode}: the read failed, {admitted} sent")
        wait_for(lambda: stand_in.holding == admitted, what=f"{admitted} at the replica")
        at_router = scrape(router.url)
        assert at_router[names.ROUTER_ENDPOINT_KV_TOKENS] == int(kv_tokens or 0)
        assert at_router[names.ROUTER_INFLIGHT] == 4  # the other held, none lost
        stand_in.release.set()
        wait_for(lambda: len(clients.codes) == 4, timeout_s=60, what="all four answered")
        assert clients.codes == [200] * 4
        assert stand_in.most == admitted  # never more than the fallback admits
        final = scrape(router.url)
        assert final[names.ROUTER_INFLIGHT] == 0 and final[names.ROUTER_QUEUED] == 0
        assert final[failures] == 1  # the rounds are 3,600 s apart: no other read
    finally:
        stand_in.release.set()
        clients.join()


# --- in-process: removed, added again, stopped -------------------------------------------------
class Replicas:
    """Loopback replicas on this loop whose ``/metrics`` states the small cache, after
    ``gate`` opens for those made with ``hang``."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.runners: list[web.AppRunner] = []
        self.metrics_served = 0
        self.models_asked = 0

    async def start(self, hang: bool = False, hang_models: bool = False) -> str:
        async def metrics(_: web.Request) -> web.Response:
            if hang:
                await self.gate.wait()
            self.metrics_served += 1
            return web.Response(text=CACHE_INFO)

        async def models(_: web.Request) -> web.Response:
            self.models_asked += 1
            if hang_models:
                await self.gate.wait()
            return web.json_response({"data": [{"id": "m", "max_model_len": 2048}]})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app)
        await runner.setup()
        self.runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    made = Replicas()
    try:
        yield made
    finally:
        made.gate.set()
        for runner in made.runners:
            await runner.cleanup()


def dispatcher(kv_tokens: int | None = None) -> tuple[Dispatcher, AddedReads]:
    d = Dispatcher(Pool(4), hold_when_full=True, kv_tokens=kv_tokens, discover_kv_tokens=True)
    reads = AddedReads()
    reads.watch(d)
    return d, reads


class Held:
    """``n`` requests of 2,000 tokens waiting for a slot (``d.acquire``)."""

    def __init__(self, d: Dispatcher, n: int) -> None:
        self.d = d
        self.tasks = [asyncio.ensure_future(d.acquire(tokens=PROMPT + OUTPUT)) for _ in range(n)]
        self.released: set[asyncio.Task[Endpoint]] = set()

    def sent(self) -> int:
        return sum(t.done() for t in self.tasks)

    def finish(self) -> None:
        """Give back every slot handed over so far (each once)."""
        for t in self.tasks:
            if t.done() and t not in self.released:
                self.released.add(t)
                self.d.release(t.result(), PROMPT + OUTPUT)


async def test_an_endpoint_removed_while_read_gets_nothing_and_held_requests_wait(
    replicas: Replicas,
) -> None:
    d, reads = dispatcher()
    async with aiohttp.ClientSession() as session:
        reader = asyncio.ensure_future(reads.run(lambda: session, 30.0, True))
        try:
            slow = await replicas.start(hang=True)
            held = Held(d, 3)
            await until(lambda: d.queued == 3, "3 held")
            endpoint_lists.apply(d, [slow])  # read under way: one request at a time meanwhile
            await until(lambda: held.sent() == 1, "one sent while read")
            assert d.kv_unread(slow) and d.kv_capacity(slow) is None and d.queued == 2
            endpoint_lists.apply(d, [])  # removed: draining with its one request
            held.finish()  # drained: forgotten
            assert d.pool.get(slow) is None
            replicas.gate.set()  # the read ends with a capacity for nobody
            await until(lambda: not d.kv_unread(slow), "the mark dropped")
            assert d.kv_capacity(slow) is None and d.queued == 2  # still held, not lost
            good = await replicas.start()
            endpoint_lists.apply(d, [good])
            await until(lambda: d.kv_capacity(good) == USABLE, "the new one read")
            await until(lambda: held.sent() == 3, "both held ones sent")
            assert d.tokens_in_flight(good) == 2000 + 2048 and d.queued == 0  # 1st while read
            held.finish()
            ep = d.pool.get(good)
            assert ep is not None and ep.inflight == 0 and d.tokens_in_flight(good) == 0
            assert d.kv_read_failures == 0
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def test_an_endpoint_added_again_while_read_keeps_its_own_read(
    replicas: Replicas,
) -> None:
    d, reads = dispatcher()
    async with aiohttp.ClientSession() as session:
        reader = asyncio.ensure_future(reads.run(lambda: session, 30.0, True))
        try:
            url = await replicas.start(hang=True)
            endpoint_lists.apply(d, [url])
            old = d.pool.get(url)
            endpoint_lists.apply(d, [])  # nothing in flight: forgotten at once
            endpoint_lists.apply(d, [url])  # back: a new endpoint, read anew
            assert d.pool.get(url) is not old and d.kv_unread(url)
            replicas.gate.set()
            await until(lambda: not d.kv_unread(url), "read")
            assert d.kv_capacity(url) == USABLE and d.kv_read_failures == 0
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)


async def test_stopping_the_reader_falls_back_and_keeps_the_held_requests(
    replicas: Replicas,
) -> None:
    d, reads = dispatcher(kv_tokens=4992)
    async with aiohttp.ClientSession() as session:
        reader = asyncio.ensure_future(reads.run(lambda: session, 30.0, True))
        slow = await replicas.start(hang=True)
        held = Held(d, 3)
        await until(lambda: d.queued == 3, "3 held")
        endpoint_lists.apply(d, [slow])
        await until(lambda: held.sent() == 1, "one sent while read")
        reader.cancel()  # the router stops with the read under way
        await asyncio.gather(reader, return_exceptions=True)
        assert not d.kv_unread(slow) and d.kv_capacity(slow) == 4992  # fell back
        assert d.kv_read_failures == 0  # not a failed read
        await until(lambda: held.sent() == 2, "a second fits --kv-tokens")
        assert d.queued == 1 and d.tokens_in_flight(slow) == 4000
        held.finish()  # room for the last one
        await until(lambda: held.sent() == 3, "the last one sent")
        held.finish()
        assert d.queued == 0 and d.tokens_in_flight(slow) == 0


async def test_the_capacity_read_on_add_comes_with_max_model_len(replicas: Replicas) -> None:
    """Issue 39: an endpoint is never admitted on a known capacity while its max_model_len
    is unknown (a budget past it would be taken and held): both are read, then both set."""
    d = Dispatcher(Pool(4), hold_when_full=True, discover_kv_tokens=True, demand=TokenDemand(None))
    reads = AddedReads()
    reads.watch(d)
    async with aiohttp.ClientSession() as session:
        reader = asyncio.ensure_future(reads.run(lambda: session, 30.0, False))
        try:
            url = await replicas.start(hang_models=True)
            endpoint_lists.apply(d, [url])
            demand = d.demand
            assert isinstance(demand, TokenDemand)
            await until(
                lambda: replicas.metrics_served == 1 and replicas.models_asked == 1,
                "the capacity answered, max_model_len asked",
            )
            # The capacity is in, max_model_len not: the endpoint is not admitted on it yet.
            assert d.kv_unread(url) and d.kv_capacity(url) is None
            replicas.gate.set()
            await until(lambda: not d.kv_unread(url), "read")
            assert d.kv_capacity(url) == USABLE and demand.max_model_len == 2048
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
