"""A lean HTTP/1.1 keep-alive upstream (an asyncio Protocol), so the upstream is not what
limits the 50 ms and streaming scenarios of ``inflight bench router``.

Modes: ``instant`` (a fixed completion at once), ``delay`` (the same after ``--delay-s``),
``sse`` (``--events`` chunked SSE events ``--interval-s`` apart, each carrying the
CLOCK_MONOTONIC instant it was written). Run as its own process::

    python -m inflight.bench.components.upstream --port 0 --mode sse --ready-file r.json
"""

from __future__ import annotations

import argparse
import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from inflight import ready
from inflight.bench.components.procs import PY, Stack

INSTANT_BODY = b'{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok"}]}'
MODES = ("instant", "delay", "sse")


class _UpstreamProtocol(asyncio.Protocol):
    def __init__(self, server: _Upstream) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.events_left = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.streams.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            m = re.search(r"(?im)^content-length:\s*(\d+)", head)
            if m:
                length = int(m.group(1))
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            self.handle(head.split(" ", 2)[1] if " " in head else "/")

    def handle(self, path: str) -> None:
        s = self.server
        if path.startswith("/health") or path.startswith("/v1/models") or s.mode == "instant":
            self.reply(INSTANT_BODY if not path.startswith("/health") else b"ok")
        elif s.mode == "delay":
            asyncio.get_running_loop().call_later(s.delay_s, self.reply, INSTANT_BODY)
        else:
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            self.events_left = s.events
            s.streams.add(self)

    def reply(self, body: bytes) -> None:
        if self.transport is not None:
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )

    def tick(self) -> None:
        if self.transport is None:
            return
        # Each event carries the moment it was written (CLOCK_MONOTONIC, shared by every
        # process on this machine), so the client measures each token's delivery delay.
        event = b'data: {"t":%d,"choices":[{"index":0,"text":"tok"}]}\n\n' % time.monotonic_ns()
        self.events_left -= 1
        if self.events_left <= 0:
            event += b"data: [DONE]\n\n"
            self.server.streams.discard(self)
            self.transport.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
        else:
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))


@dataclass
class _Upstream:
    mode: str
    delay_s: float
    events: int
    interval_s: float
    streams: set[_UpstreamProtocol] = field(default_factory=set)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            for stream in list(self.streams):
                stream.tick()


async def _serve(args: argparse.Namespace) -> None:
    up = _Upstream(args.mode, args.delay_s, args.events, args.interval_s)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _UpstreamProtocol(up), "127.0.0.1", args.port, backlog=4096
    )
    if args.ready_file is not None:
        ready.write(args.ready_file, {"http": server.sockets[0].getsockname()[1]})
    ticker = asyncio.create_task(up.ticker())
    async with server:
        await server.serve_forever()
    ticker.cancel()


def start_upstream(stack: Stack, mode: str, **kw: float) -> str:
    """Start one synthetic upstream in ``mode``; its base URL. ``kw``: delay_s, events,
    interval_s."""
    argv = [PY, "-P", "-m", "inflight.bench.components.upstream", "--port", "0", "--mode", mode]
    for key, value in kw.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return stack.start_ours(argv, f"upstream-{mode}-{len(stack.procs)}", "/health")[0]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="serve a synthetic upstream (bench only)")
    parser.add_argument("--port", type=int, required=True)
    ready.add_argument(parser)
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--delay-s", type=float, default=0.05)
    parser.add_argument("--events", type=int, default=100)
    parser.add_argument("--interval-s", type=float, default=0.01)
    asyncio.run(_serve(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
