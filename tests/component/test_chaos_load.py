"""The fault run's sender (``inflight.bench.chaos.load.stream_one``) against a loopback
port: a refused connection (a router restarting on its port) is retried, and counted; the
record keeps its first start.

The port is held by a socket bound and not listening, so connections to it are refused
until the test closes it and serves on that port.
"""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import pytest
from aiohttp import web

from inflight.bench.chaos import load as chaos_load
from inflight.bench.loadgen import send_one


def _held_port() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: a connect is refused
    return sock


async def _done(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'data: {"choices": [{"text": "x"}]}\n\ndata: [DONE]\n\n')
    return resp


async def test_a_refused_request_is_retried_until_the_server_is_back(monkeypatch) -> None:
    held = _held_port()
    port = held.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/completions"
    refused = asyncio.Event()

    async def observed(*args, **kwargs):
        record = await send_one(*args, **kwargs)
        if not record.ok:
            refused.set()
        return record

    monkeypatch.setattr(chaos_load, "send_one", observed)
    app = web.Application()
    app.router.add_post("/v1/completions", _done)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        async with aiohttp.ClientSession() as session:
            t = time.time()
            task = asyncio.create_task(chaos_load.stream_one(session, url, b"{}", 30.0, 0))
            await asyncio.wait_for(refused.wait(), 10)
            held.close()
            await web.TCPSite(runner, "127.0.0.1", port).start()
            record = await asyncio.wait_for(task, 20)
    finally:
        held.close()
        await runner.cleanup()
    assert record.ok, record.error
    assert record.refused >= 1
    assert t <= record.start_t < t + 1.0


async def test_a_refused_request_fails_at_its_timeout_and_other_failures_are_final() -> None:
    held = _held_port()
    url = f"http://127.0.0.1:{held.getsockname()[1]}/v1/completions"
    try:
        async with aiohttp.ClientSession() as session:
            record = await chaos_load.stream_one(session, url, b"{}", 0.5, 0)
    finally:
        held.close()
    assert not record.ok and record.error.startswith(chaos_load.REFUSED)
    assert record.refused >= 1
    assert record.end_t - record.start_t == pytest.approx(0.5, abs=0.4)

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=502, text="upstream 127.0.0.1:1 refused")

    app = web.Application()
    app.router.add_post("/v1/completions", broken)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/completions"
        async with aiohttp.ClientSession() as session:
            record = await chaos_load.stream_one(session, url, b"{}", 5.0, 0)
    finally:
        await runner.cleanup()
    assert not record.ok and record.error.startswith("HTTP 502") and record.refused == 0


async def test_a_request_counts_in_flight_from_its_send_so_a_top_up_loop_ends() -> None:
    """The scale-down fault tops the long streams up to a count without awaiting in
    between: each send must count at once, before its task runs, or that loop never ends
    (it did once: tasks piled up, the event loop blocked)."""
    app = web.Application()
    app.router.add_post("/v1/completions", _done)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as session:
            loop = chaos_load.OpenLoop(session, [url], b"{}", 1.0, 10.0)
            while loop.long_inflight < 3:
                loop.send(long=True)
            loop.send()
            assert (loop.inflight, loop.long_inflight) == (4, 3)
            assert await loop.drain(20.0)
    finally:
        await runner.cleanup()
    assert (loop.inflight, loop.long_inflight) == (0, 0)
    assert sorted(r.long for r in loop.records) == [False, True, True, True]
    assert all(r.ok for r in loop.records)
