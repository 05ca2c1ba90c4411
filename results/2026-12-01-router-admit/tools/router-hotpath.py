"""In-process cost of the router's hot path per request (no sockets): Proxy.__call__ for
POST /v1/completions with a canned upstream response, 30,000 requests, best of 5 rounds.
Run with PYTHONPATH pointing at the tree to measure (c958355 or h-router)."""

import asyncio
import gc
import os
import sys
import time

from prometheus_client import CollectorRegistry

import router
from router.dispatch import Dispatcher
from router.metrics import RouterMetrics
from router.pool import Pool
from router.proxy import Proxy
from router.server import DISCONNECT_HOOKS

BODY = b'{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok"}]}'


class Canned:
    status = 200
    raw_headers = [  # noqa: RUF012 (read only)
        (b"content-type", b"application/json"),
        (b"content-length", str(len(BODY)).encode()),
    ]
    content_length = len(BODY)
    is_sse = False

    async def read(self):
        return BODY

    def release(self):
        pass

    def close(self):
        pass


class Client:
    async def open(self, base_url, method, path, headers, body):
        return Canned()

    async def close(self):
        pass


async def main(n: int = 20_000, rounds: int = 10) -> None:
    pool = Pool(4)
    pool.set_endpoints(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    d = Dispatcher(pool)
    proxy = Proxy(d, RouterMetrics(CollectorRegistry(), d), Client, 16 << 20, 2.0)
    msg = {
        "type": "http.request",
        "body": b'{"model":"m","prompt":"hi","max_tokens":1}',
        "more_body": False,
    }

    async def receive():
        return msg

    async def send(_m):
        pass

    headers = [(b"host", b"r"), (b"content-type", b"application/json"), (b"content-length", b"44")]
    best = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(n):
            scope = {
                "type": "http",
                "method": "POST",
                "path": "/v1/completions",
                "raw_path": b"/v1/completions",
                "query_string": b"",
                "headers": headers,
                DISCONNECT_HOOKS: set(),
            }
            await proxy(scope, receive, send)
        best = min(best, (time.process_time() - t0) / n)
    assert d.inflight == 0
    print(f"{router.__file__}: {best * 1e6:.2f} us/request (best of {rounds} x {n})")


if os.environ.get("NOGC"):
    gc.disable()
asyncio.run(
    main(
        int(sys.argv[1]) if len(sys.argv) > 1 else 20_000,
        int(sys.argv[2]) if len(sys.argv) > 2 else 10,
    )
)
