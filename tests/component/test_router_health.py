"""Active health checks against real HTTP servers on 127.0.0.1 (router/health.py).

A check that times out is not a failure at once: a real engine's API server shares its
cores with the engine and can answer ``/health`` late under load (the likely cause of a CI
failure: a single-replica vLLM fleet seen with every request held at the router). Only
``--health-timeouts`` late answers in a row make an endpoint unhealthy; a refusal or an
error status does at once.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from router.dispatch import Dispatcher
from router.health import FAILED, OK, TIMED_OUT, check_once, probe
from router.pool import READY, UNHEALTHY, Pool
from tests.support import LoopbackHTTPServer, ProcessTracker, QuietHandler, until, wait_for

TIMEOUT_S = 0.2  # the probe's own limit: a late server never answers within it
# The limit of a probe that should be answered: however loaded the machine (a CI run with
# simulations beside it once took over 0.2 s), a healthy server answers within it, and a
# probe answered takes no longer for it.
ANSWER_S = 10.0


@dataclass
class Upstream:
    """A /health that answers ``status``, or never while ``late`` (until the test ends)."""

    url: str = ""
    status: int = 200
    late: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    up = Upstream()

    async def health(_request: web.Request) -> web.Response:
        if up.late:
            await up.release.wait()
        return web.Response(status=up.status, text="ok")

    app = web.Application()
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    up.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield up
    up.release.set()
    await runner.cleanup()


def refused_url() -> str:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def dispatcher_of(url: str) -> Dispatcher:
    pool = Pool(4)
    pool.set_endpoints([url])
    return Dispatcher(pool, hold_when_full=True)


def state(d: Dispatcher, url: str) -> str:
    ep = d.pool.get(url)
    assert ep is not None
    return ep.state


async def test_probe_tells_a_late_answer_from_a_failed_one(upstream: Upstream) -> None:
    async with aiohttp.ClientSession() as session:
        assert await probe(session, upstream.url, ANSWER_S) == OK
        upstream.status = 503
        assert await probe(session, upstream.url, ANSWER_S) == FAILED
        assert await probe(session, refused_url(), ANSWER_S) == FAILED
        upstream.late = True
        assert await probe(session, upstream.url, TIMEOUT_S) == TIMED_OUT


async def test_only_the_nth_late_answer_in_a_row_makes_an_endpoint_unhealthy(
    upstream: Upstream,
) -> None:
    d = dispatcher_of(upstream.url)
    async with aiohttp.ClientSession() as session:

        async def check() -> str:
            limit = TIMEOUT_S if upstream.late else ANSWER_S
            await check_once(d, session, limit, backoff_s=0.0, timeouts=3)
            return state(d, upstream.url)

        upstream.late = True
        assert [await check(), await check()] == [READY, READY]
        # A request sent now still gets the endpoint: it was never taken out.
        ep = d.try_acquire()
        assert ep is not None and ep.url == upstream.url
        d.release(ep)
        assert await check() == UNHEALTHY  # the third in a row
        upstream.late = False
        upstream.release.set()
        assert await check() == READY  # a passing check after the back-off (0 s)
        upstream.late, upstream.release = True, asyncio.Event()
        # The count began again at the passing check: two late answers are two, not five.
        assert [await check(), await check()] == [READY, READY]
        upstream.late = False
        upstream.release.set()
        assert await check() == READY
        upstream.late, upstream.release = True, asyncio.Event()
        assert [await check(), await check(), await check()] == [READY, READY, UNHEALTHY]


@pytest.mark.parametrize("how", ["503", "refused"])
async def test_a_failed_check_is_unhealthy_at_once(upstream: Upstream, how: str) -> None:
    url = upstream.url
    if how == "refused":
        url = refused_url()
    else:
        upstream.status = 503
    d = dispatcher_of(url)
    async with aiohttp.ClientSession() as session:
        await check_once(d, session, ANSWER_S, backoff_s=60.0, timeouts=3)
    assert state(d, url) == UNHEALTHY
    assert d.try_acquire() is None


async def test_one_timeout_allowed_is_the_old_rule(upstream: Upstream) -> None:
    d = dispatcher_of(upstream.url)
    upstream.late = True
    async with aiohttp.ClientSession() as session:
        await check_once(d, session, TIMEOUT_S, backoff_s=60.0, timeouts=1)
    assert state(d, upstream.url) == UNHEALTHY


async def test_held_requests_go_out_when_the_endpoint_is_healthy_again(
    upstream: Upstream,
) -> None:
    d = dispatcher_of(upstream.url)
    upstream.late = True
    async with aiohttp.ClientSession() as session:
        await check_once(d, session, TIMEOUT_S, backoff_s=0.0, timeouts=1)
        assert state(d, upstream.url) == UNHEALTHY
        waiter = asyncio.ensure_future(d.acquire())
        await until(lambda: d.queued == 1, "the request held")
        assert not waiter.done()
        upstream.late = False
        upstream.release.set()
        await check_once(d, session, ANSWER_S, backoff_s=0.0, timeouts=1)
        ep = await asyncio.wait_for(waiter, 5.0)
    assert ep.url == upstream.url and d.queued == 0
    d.release(ep)


# --- the router process: the flag reaches its health loop ---------------------------------
class LateHealth(QuietHandler):
    """A replica whose /health answers only once ``answer`` is set (a stand-in: the state
    of a busy engine's API server, which the emulator cannot be put in on demand)."""

    answer = threading.Event()

    def do_GET(self) -> None:
        if self.path == "/health":
            type(self).answer.wait(timeout=60)
        self.respond(b"{}")


def test_the_router_takes_the_flags_count_of_late_answers(procs: ProcessTracker) -> None:
    class Replica(LateHealth):
        answer = threading.Event()

    server = LoopbackHTTPServer(Replica)
    try:
        router = procs.start_inflight(
            ["router", "--host", "127.0.0.1", "--port", "{port}", "--endpoints", server.url,
             "--health-interval-s", "0.1", "--health-timeout-s", "0.2",
             "--health-timeouts", "2", "--unhealthy-backoff-s", "0"],
            name="router",
        )  # fmt: skip

        def endpoint_state() -> str:
            with urllib.request.urlopen(router.url + "/router/status", timeout=5) as resp:
                (endpoint,) = json.loads(resp.read())["endpoints"]
            return str(endpoint["state"])

        wait_for(lambda: endpoint_state() == UNHEALTHY, timeout_s=30, what="unhealthy")
        log = Path(router.process.log_path or "").read_text()
        assert "unhealthy: 2 health checks in a row timed out" in log, log[-2000:]
        Replica.answer.set()
        wait_for(lambda: endpoint_state() == READY, timeout_s=30, what="ready again")
    finally:
        Replica.answer.set()
        server.close()
