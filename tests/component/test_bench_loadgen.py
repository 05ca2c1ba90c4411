"""``inflight.bench.loadgen.send_one`` against a loopback server: what a failed stream's error
keeps.

The fault run (``bench chaos``) attributes a failure to the endpoint the router's SSE error
event names, so the error must keep the stream's last bytes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from inflight.bench.loadgen import send_one
from inflight.measure.records import RequestRecord


async def _send_to(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
) -> RequestRecord:
    """Serve ``handler`` on a loopback port, send one request to it with ``send_one``."""
    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/completions"
        async with aiohttp.ClientSession() as session:
            return await send_one(session, url, b"{}", timeout_s=10)
    finally:
        await runner.cleanup()


async def test_a_stream_cut_without_done_keeps_the_routers_error_event() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"text": "a"}]}\n\n')
        await resp.write(b'data: {"error": {"message": "upstream 127.0.0.1:4242 failed"}}\n\n')
        await resp.write_eof()
        return resp

    record = await _send_to(handler)
    assert not record.ok
    assert record.error.startswith("stream ended without [DONE]")
    assert "upstream 127.0.0.1:4242 failed" in record.error
    assert record.first_token_t is not None


async def test_a_complete_stream_is_ok_with_no_error() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices": [{"text": "a"}]}\n\ndata: [DONE]\n\n')
        await resp.write_eof()
        return resp

    record = await _send_to(handler)
    assert record.ok and record.error == ""


async def test_an_error_status_keeps_the_body() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "upstream 127.0.0.1:4242"}}, status=502)

    record = await _send_to(handler)
    assert not record.ok
    assert record.error.startswith("HTTP 502") and "127.0.0.1:4242" in record.error
