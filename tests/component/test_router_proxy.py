"""The router process against small aiohttp upstreams served by the test itself.

These upstreams do what a real replica cannot be made to do on demand: echo the headers
they received, break a stream halfway, refuse connections. The router is the real
``inflight router`` subprocess.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from urllib.parse import unquote

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict
from prometheus_client import CollectorRegistry

from inflight import names
from router.dispatch import Dispatcher
from router.metrics import RouterMetrics
from router.pool import Pool
from router.proxy import Proxy
from router.routes import OPENAI_ROUTES, RouteTable, parse_route
from router.upstream import UPSTREAM_CLIENTS, Upstream, build
from tests.support import INFLIGHT, ProcessTracker, Server

# --- upstream ----------------------------------------------------------------------------


async def _echo(request: web.Request) -> web.Response:
    body = await request.read()
    return web.json_response(
        {
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "path": request.path_qs,
            "body_len": len(body),
        },
        headers={"X-Upstream": "yes", "Proxy-Authenticate": "Basic", "Trailer": "X-Foo"},
    )


async def _broken_stream(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'data: {"n": 1}\n\n')
    assert request.transport is not None
    request.transport.abort()  # the replica dies mid-stream
    return resp


async def _broken_body(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Length": "1000"})
    await resp.prepare(request)
    await resp.write(b'{"choices": ')
    assert request.transport is not None
    request.transport.abort()  # the replica dies before the promised 1000 bytes
    return resp


async def _done_then_wait(request: web.Request) -> web.StreamResponse:
    """vLLM's stream end: ``data: [DONE]`` in its own chunk, the chunked body's end after
    it (here 1 s later, so a client that stops reading at [DONE] is gone by then)."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b'data: {"choices": [{"text": "hi"}]}\n\n')
    await resp.write(b"data: [DONE]\n\n")
    await asyncio.sleep(1.0)
    await resp.write_eof()
    return resp


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(float(request.query.get("s", "30")))
    return web.json_response({"slow": True})


async def _models(_request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "m"}]})


async def _health(_request: web.Request) -> web.Response:
    return web.Response(text="ok")


@pytest.fixture
async def upstream() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_route("*", "/v1/echo", _echo)
    app.router.add_post("/v1/broken", _broken_stream)
    app.router.add_post("/v1/broken-body", _broken_body)
    app.router.add_post("/v1/slow", _slow)
    app.router.add_post("/v1/done-then-wait", _done_then_wait)
    app.router.add_get("/v1/models", _models)
    app.router.add_get("/health", _health)
    # A handler is cancelled when its client leaves (as vLLM aborts a request): a slow
    # one the router gave up on does not hold the teardown for its whole sleep.
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


# The test upstream's own paths: not OpenAI routes, so forwarded only when allowed.
TEST_ROUTES = ("POST:/v1/echo", "POST:/v1/broken", "POST:/v1/broken-body", "POST:/v1/slow",
               "POST:/v1/done-then-wait")  # fmt: skip


def start_router(procs: ProcessTracker, *args: str) -> Server:
    allow = [arg for route in TEST_ROUTES for arg in ("--allow-route", route)]
    return procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--slots-per-endpoint", "1",
         *allow, *args],
        name="router",
    )  # fmt: skip


async def fetch(method: str, url: str, **kw: object) -> tuple[int, CIMultiDict[str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, **kw) as resp,  # type: ignore[arg-type]
    ):
        return resp.status, CIMultiDict(resp.headers), await resp.read()


def scrape(router: Server) -> str:
    with urllib.request.urlopen(router.url + "/metrics", timeout=5) as resp:
        return resp.read().decode()


# --- tests -------------------------------------------------------------------------------


async def test_headers_hop_by_hop_dropped_and_host_not_chosen_by_client(
    procs: ProcessTracker, upstream: str
) -> None:
    router = await asyncio.to_thread(start_router, procs, "--endpoints", upstream)
    status, headers, body = await fetch(
        "POST",
        router.url + "/v1/echo?x=1",
        data=b'{"a": 1}',
        headers={
            "Host": "evil.example:1",
            "Connection": "keep-alive, X-Secret",
            "X-Secret": "hop",
            "Keep-Alive": "timeout=5",
            "Proxy-Authorization": "Basic Zm9v",
            "TE": "trailers",
            "Authorization": "Bearer sk-test",
            "X-Request-Id": "abc",
        },
    )
    assert status == 200
    seen = json.loads(body)
    got = seen["headers"]
    assert got["host"] == upstream.split("://")[1]  # the request cannot pick the host
    for hop in ("x-secret", "keep-alive", "proxy-authorization", "te"):
        assert hop not in got, hop
    assert got["authorization"] == "Bearer sk-test"
    assert got["x-request-id"] == "abc"
    assert seen["path"] == "/v1/echo?x=1"
    assert seen["body_len"] == 8
    assert headers["X-Upstream"] == "yes"
    assert "Proxy-Authenticate" not in headers and "Trailer" not in headers


async def test_body_over_limit_is_413(procs: ProcessTracker, upstream: str) -> None:
    router = await asyncio.to_thread(
        start_router, procs, "--endpoints", upstream, "--max-body-bytes", "100"
    )
    status, _, body = await fetch("POST", router.url + "/v1/echo", data=b"x" * 101)
    assert status == 413
    assert "--max-body-bytes" in json.loads(body)["error"]["message"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(5):
            yield b"y" * 30

    status, _, _ = await fetch("POST", router.url + "/v1/echo", data=chunks())
    assert status == 413
    status, _, body = await fetch("POST", router.url + "/v1/echo", data=b"x" * 100)
    assert status == 200 and json.loads(body)["body_len"] == 100
    text = scrape(router)
    assert f'{names.ROUTER_REQUESTS}{{code="413",endpoint="none"}} 2.0' in text
    assert f"{names.ROUTER_REQUESTS_RECEIVED} 3.0" in text
    assert f"{names.ROUTER_INFLIGHT} 0.0" in text


async def test_zero_endpoints_health_ready_503_status_and_metrics_path(
    procs: ProcessTracker,
) -> None:
    router = await asyncio.to_thread(start_router, procs, "--endpoints", "")
    assert (await fetch("GET", router.url + "/health"))[0] == 200
    assert (await fetch("GET", router.url + "/ready"))[0] == 503
    status, headers, body = await fetch("POST", router.url + "/v1/completions", json={})
    assert status == 503
    assert headers["Retry-After"] == "1"
    assert json.loads(body)["error"]["type"] == "no_ready_endpoint"
    status, headers, body = await fetch("GET", router.url + "/metrics", allow_redirects=False)
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    text = body.decode()
    for name, kind in names.ROUTER_METRICS.items():
        assert f"# TYPE {name} {kind}" in text, name
    assert f"{names.ROUTER_SLOTS_PER_ENDPOINT} 1.0" in text
    doc = json.loads((await fetch("GET", router.url + "/router/status"))[2])
    assert doc == {"inflight": 0, "queued": 0, "slots_per_endpoint": 1, "endpoints": []}


async def test_refused_endpoint_is_retried_once_and_marked_unhealthy(
    procs: ProcessTracker, upstream: str, refused_port: Callable[[], int]
) -> None:
    dead = f"http://127.0.0.1:{refused_port()}"  # nothing listens there
    router = await asyncio.to_thread(
        start_router,
        procs,
        "--endpoints", f"{dead},{upstream}",
        "--unhealthy-backoff-s", "60",
        "--health-interval-s", "60",
    )  # fmt: skip
    # Ties are broken at random: send until the dead endpoint has been tried once.
    codes = []
    for _ in range(60):
        codes.append((await fetch("POST", router.url + "/v1/echo", data=b"{}"))[0])
        text = scrape(router)
        if f"{names.ROUTER_RETRIES} 1.0" in text:
            break
    assert set(codes) == {200}, codes
    for _ in range(4):  # unhealthy now (60 s back-off): no further retries
        assert (await fetch("POST", router.url + "/v1/echo", data=b"{}"))[0] == 200
    text = scrape(router)
    retries = [ln for ln in text.splitlines() if ln.startswith(names.ROUTER_RETRIES + " ")]
    assert retries == [f"{names.ROUTER_RETRIES} 1.0"]  # only the first request hit it
    dead_label = dead.split("://")[1]
    assert f'endpoint="{dead_label}",reason="connect"}} 1.0' in text
    doc = json.loads((await fetch("GET", router.url + "/router/status"))[2])
    states = {e["url"]: e["state"] for e in doc["endpoints"]}
    assert states == {dead: "unhealthy", upstream: "ready"}


async def test_only_endpoint_refused_gives_503(
    procs: ProcessTracker, refused_port: Callable[[], int]
) -> None:
    """The refusal marks the only endpoint unhealthy, so the retry finds none ready."""
    dead = f"http://127.0.0.1:{refused_port()}"
    router = await asyncio.to_thread(start_router, procs, "--endpoints", dead)
    status, headers, body = await fetch("POST", router.url + "/v1/echo", data=b"{}")
    assert status == 503
    assert "Retry-After" in headers
    assert "error" in json.loads(body)


async def test_refused_twice_gives_502_after_one_retry(
    procs: ProcessTracker, refused_port: Callable[[], int]
) -> None:
    dead = ",".join(f"http://127.0.0.1:{refused_port()}" for _ in range(2))
    router = await asyncio.to_thread(start_router, procs, "--endpoints", dead)
    status, _, body = await fetch("POST", router.url + "/v1/echo", data=b"{}")
    assert status == 502
    assert "error" in json.loads(body)
    assert f"{names.ROUTER_RETRIES} 1.0" in scrape(router)


async def test_upstream_breaking_mid_stream_ends_with_an_sse_error_event(
    procs: ProcessTracker, upstream: str
) -> None:
    router = await asyncio.to_thread(start_router, procs, "--endpoints", upstream)
    status, _, body = await fetch("POST", router.url + "/v1/broken", json={"stream": True})
    assert status == 200
    events = [e for e in body.decode().split("\n\n") if e]
    assert events[0] == 'data: {"n": 1}'
    assert json.loads(events[-1].removeprefix("data: "))["error"]["type"] == "upstream_broken"
    text = scrape(router)
    assert 'reason="broken"} 1.0' in text
    assert f"{names.ROUTER_INFLIGHT} 0.0" in text


async def test_a_stream_read_to_done_is_finished_even_if_the_client_leaves_at_once(
    procs: ProcessTracker, upstream: str
) -> None:
    """A client that stops reading at ``data: [DONE]`` (and closes) got the whole response:
    it is counted with the upstream's status, never as a 499 (a client that left)."""
    router = await asyncio.to_thread(start_router, procs, "--endpoints", upstream)
    reader, writer = await asyncio.open_connection("127.0.0.1", router.port)
    body = b'{"stream": true}'
    writer.write(
        b"POST /v1/done-then-wait HTTP/1.1\r\nhost: router\r\ncontent-type: application/json"
        b"\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
    )
    received = await asyncio.wait_for(reader.readuntil(b"data: [DONE]\n\n"), 10)
    writer.close()  # what a client that breaks out of its loop on [DONE] does
    assert received.startswith(b"HTTP/1.1 200")
    label = upstream.split("://")[1]
    finished = f'{names.ROUTER_REQUESTS}{{code="200",endpoint="{label}"}} 1.0'
    for _ in range(100):
        text = await asyncio.to_thread(scrape, router)
        if finished in text or 'code="499"' in text:
            break
        await asyncio.sleep(0.05)  # polling the router, with a deadline
    assert 'code="499"' not in text
    assert finished in text
    assert f"{names.ROUTER_INFLIGHT} 0.0" in text


async def test_upstream_breaking_inside_a_sized_body_is_a_counted_502(
    procs: ProcessTracker, upstream: str
) -> None:
    """A body with a Content-Length (up to 256 KiB) is read whole before the client gets a
    byte, so when the upstream breaks inside it the client gets the router's 502, not a
    truncated 200; it is counted as a 502 and an upstream error.
    """
    router = await asyncio.to_thread(start_router, procs, "--endpoints", upstream)
    status, _, body = await fetch("POST", router.url + "/v1/broken-body", data=b"{}")
    assert status == 502
    assert json.loads(body)["error"]["type"] == "upstream_broken"
    text = scrape(router)
    label = upstream.split("://")[1]
    assert f'{names.ROUTER_REQUESTS}{{code="502",endpoint="{label}"}} 1.0' in text
    assert f'endpoint="{label}",reason="broken"}} 1.0' in text
    assert f"{names.ROUTER_INFLIGHT} 0.0" in text


async def test_models_is_metadata_and_never_waits_for_a_slot(
    procs: ProcessTracker, upstream: str
) -> None:
    router = await asyncio.to_thread(
        start_router, procs, "--endpoints", upstream, "--hold-when-full"
    )
    async with aiohttp.ClientSession() as session:
        slow = asyncio.create_task(session.post(router.url + "/v1/slow?s=30", data=b"{}"))
        for _ in range(200):
            doc = json.loads((await fetch("GET", router.url + "/router/status"))[2])
            if doc["inflight"] == 1:
                break
            await asyncio.sleep(0.05)  # polling the router, with a deadline
        assert doc["endpoints"][0]["inflight"] == 1  # the only slot is taken
        status, _, body = await fetch("GET", router.url + "/v1/models")
        assert status == 200 and json.loads(body)["data"][0]["id"] == "m"
        doc = json.loads((await fetch("GET", router.url + "/router/status"))[2])
        assert doc["inflight"] == 1 and doc["queued"] == 0
        slow.cancel()
        await asyncio.gather(slow, return_exceptions=True)


async def test_head_and_cors_preflight_pass_through_the_router_process(
    procs: ProcessTracker, upstream: str
) -> None:
    """``HEAD /v1/models`` and an ``OPTIONS`` preflight were 405 at the router though its
    docstring said they pass: through the real router (uvicorn's HEAD handling), they
    reach the upstream as metadata, in no slot and not counted."""
    router = await asyncio.to_thread(start_router, procs, "--endpoints", upstream)
    status, headers, body = await fetch("HEAD", router.url + "/v1/models")
    assert status == 200 and body == b"" and headers["content-type"].startswith("application/json")
    preflight = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST"}
    status, _, body = await fetch("OPTIONS", router.url + "/v1/echo", headers=preflight)
    assert status == 200
    seen = json.loads(body)["headers"]
    assert seen["origin"] == "https://app.example"
    assert seen["access-control-request-method"] == "POST"
    text = scrape(router)
    assert f"{names.ROUTER_REQUESTS_RECEIVED} 0.0" in text  # metadata: not work


async def test_path_outside_v1_is_not_proxied(procs: ProcessTracker, upstream: str) -> None:
    router = await asyncio.to_thread(start_router, procs, "--endpoints", upstream)
    assert (await fetch("GET", router.url + "/health/../v1x"))[0] == 404
    assert (await fetch("POST", router.url + "/v2/echo", data=b"{}"))[0] in (404, 405)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--endpoints", "", "--slots-per-endpoint", "0"], "--slots-per-endpoint"),
        (["--endpoints", "http://h:1/v1"], "--endpoints"),
        (["--k8s-namespace", "llm", "--k8s-service", "vllm"], "no Kubernetes credentials"),
    ],
)
def test_cli_refuses_bad_config_naming_the_flag(
    argv: list[str], message: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBERNETES_"))}
    env["HOME"] = str(tmp_path)  # no ~/.kube/config
    done = subprocess.run(
        [*INFLIGHT, "router", "--port", "0", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert message in done.stderr


# --- the proxy in this process (ASGI calls by hand), for what a subprocess hides --------


class InProcess:
    """A :class:`Proxy` on a fresh registry, called with hand-made ASGI messages."""

    def __init__(self, client: Upstream, *upstreams: str) -> None:
        pool = Pool(1)
        pool.set_endpoints(upstreams)
        self.dispatcher = Dispatcher(pool)
        self.registry = CollectorRegistry()
        metrics = RouterMetrics(self.registry, self.dispatcher)
        routes = RouteTable((*OPENAI_ROUTES, *map(parse_route, TEST_ROUTES)))
        self.proxy = Proxy(self.dispatcher, metrics, lambda: client, 1000, 60.0, routes=routes)

    async def call(
        self, *messages: dict[str, object], method: str = "POST", raw_path: bytes = b"/v1/echo"
    ) -> list[dict[str, object]]:
        """``method raw_path`` with ``messages`` as what the client sends; the scope as
        uvicorn builds it (``path`` percent-decoded, ``raw_path`` as sent)."""
        pending = list(messages)
        sent: list[dict[str, object]] = []

        async def receive() -> dict[str, object]:
            if pending:
                return pending.pop(0)
            await asyncio.Event().wait()  # the client stays connected
            raise AssertionError("unreachable")

        async def send(message: dict[str, object]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": method, "path": unquote(raw_path.decode("ascii")),
                 "raw_path": raw_path, "query_string": b"", "headers": []}  # fmt: skip
        await self.proxy(scope, receive, send)  # type: ignore[arg-type]
        return sent

    def sample(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(name, labels)


@contextlib.asynccontextmanager
async def in_process(
    kind: str, *upstreams: str, connect_timeout_s: float = 5.0
) -> AsyncIterator[InProcess]:
    """An :class:`InProcess` proxy over a fresh upstream client of ``kind``, closed after."""
    client = build(kind, connect_timeout_s, None, 4.0)
    try:
        yield InProcess(client, *upstreams)
    finally:
        await client.close()


@pytest.fixture(params=UPSTREAM_CLIENTS)
def client_kind(request: pytest.FixtureRequest) -> str:
    """Both upstream clients (--upstream-client): they must map failures alike."""
    return str(request.param)


@pytest.fixture
async def garbage_upstream() -> AsyncIterator[str]:
    """Reads a request, answers bytes that are not HTTP."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    server.close()
    await server.wait_closed()


async def test_malformed_upstream_response_is_a_counted_502(
    garbage_upstream: str, client_kind: str
) -> None:
    """A client error other than refused/reset/timeout (here a response that is not
    HTTP) is mapped like the others, not left to escape to uvicorn as an uncounted 500.
    """
    async with in_process(client_kind, garbage_upstream) as router:
        sent = await router.call({"type": "http.request", "body": b"{}"})
    assert sent[0]["status"] == 502
    assert json.loads(sent[1]["body"])["error"]["type"] == "upstream_unavailable"  # type: ignore[arg-type]
    label = garbage_upstream.split("://")[1]
    assert router.sample(names.ROUTER_REQUESTS, endpoint=label, code="502") == 1.0
    assert router.sample(names.ROUTER_UPSTREAM_ERRORS, endpoint=label, reason="broken") == 1.0
    assert router.dispatcher.inflight == 0
    assert [v.inflight for v in router.dispatcher.pool.snapshot()] == [0]


async def test_client_gone_while_sending_the_body_is_counted_as_finished(
    upstream: str, client_kind: str
) -> None:
    """Every work request counted as received is counted as finished (here 499), so the
    router's own λ and W describe the same requests.
    """
    async with in_process(client_kind, upstream) as router:
        sent = await router.call(
            {"type": "http.request", "body": b"{", "more_body": True}, {"type": "http.disconnect"}
        )
    assert sent == []
    assert router.sample(names.ROUTER_REQUESTS_RECEIVED) == 1.0
    assert router.sample(names.ROUTER_REQUESTS, endpoint="none", code="499") == 1.0
    assert router.sample(names.ROUTER_REQUEST_DURATION + "_count") == 1.0
    assert router.sample(names.ROUTER_TTFB + "_count") == 0.0  # no byte was sent
    assert router.dispatcher.inflight == 0


@pytest.fixture
def blackhole() -> Iterator[str]:
    """An address whose connections are never accepted: a listening socket whose backlog is
    full, so the kernel drops further SYNs (what a dead node's pod IP looks like).
    """
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        host, port = listener.getsockname()
        fillers = []
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect((host, port))
            fillers.append(filler)
        yield f"http://{host}:{port}"
        for filler in fillers:
            filler.close()


async def test_connect_timeout_is_retried_elsewhere_and_marks_the_endpoint(
    blackhole: str, upstream: str, client_kind: str
) -> None:
    """A connection that is never established is a failed connect like a refused one: the
    request never reached that endpoint, so it is retried on another (not a 504).
    """
    async with in_process(client_kind, blackhole, upstream, connect_timeout_s=0.3) as router:
        pool = router.dispatcher.pool
        good = pool.get(upstream)
        assert good is not None
        pool.acquire(good)  # least-outstanding now picks the blackhole first
        sent = await router.call({"type": "http.request", "body": b"{}"})
        pool.release(good)
    assert sent[0]["status"] == 200
    assert router.sample(names.ROUTER_RETRIES) == 1.0
    label = blackhole.split("://")[1]
    assert router.sample(names.ROUTER_UPSTREAM_ERRORS, endpoint=label, reason="connect") == 1.0
    assert {v.url: v.state for v in pool.snapshot()}[blackhole] == "unhealthy"
    assert [v.inflight for v in pool.snapshot()] == [0, 0]


# --- path and method confinement ---------------------------------------------------------
@pytest.fixture
async def recording_upstream() -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    """Answers 200 to any method and path, and records (method, raw path) of each request."""
    seen: list[tuple[str, str]] = []

    async def anything(request: web.Request) -> web.Response:
        seen.append((request.method, request.raw_path))
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", anything)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    await runner.cleanup()


@pytest.mark.parametrize(
    ("method", "raw_path", "status", "kind"),
    [
        ("GET", b"/v1/../admin", 400, "bad_path"),
        ("POST", b"/v1/../admin", 400, "bad_path"),
        ("POST", b"/v1/%2e%2e/admin", 400, "bad_path"),
        ("POST", b"/v1/%2E%2E/admin", 400, "bad_path"),
        ("POST", b"/v1/.%2e/x", 400, "bad_path"),
        ("POST", b"/v1/./completions", 400, "bad_path"),
        ("POST", b"/v1/completions/../../admin", 400, "bad_path"),
        ("POST", b"/v1/a%2f..%2fadmin", 400, "bad_path"),
        ("POST", b"/v1/load_lora_adapter", 404, "route_not_found"),
        ("POST", b"/v1/unload_lora_adapter", 404, "route_not_found"),
        ("GET", b"/v1/completions", 405, "method_not_allowed"),
        ("DELETE", b"/v1/chat/completions", 405, "method_not_allowed"),
        ("PUT", b"/v1/embeddings", 405, "method_not_allowed"),
        ("POST", b"/v1/models", 405, "method_not_allowed"),
    ],
)
async def test_paths_and_methods_outside_the_table_are_refused_never_forwarded(
    recording_upstream: tuple[str, list[tuple[str, str]]],
    method: str,
    raw_path: bytes,
    status: int,
    kind: str,
) -> None:
    url, seen = recording_upstream
    async with in_process("httptools", url) as router:
        sent = await router.call({"type": "http.request", "body": b"{}"}, method=method,
                                 raw_path=raw_path)  # fmt: skip
    assert seen == []  # the upstream never saw it
    start, body = sent
    assert start["status"] == status
    headers = dict(start["headers"])  # type: ignore[call-overload]
    assert json.loads(body["body"])["error"]["type"] == kind  # type: ignore[arg-type]
    if status == 405:
        assert headers[b"allow"] in (b"POST, OPTIONS", b"GET, HEAD, OPTIONS")
    if method not in ("GET", "HEAD"):  # work requests: counted, at no endpoint, in no slot
        assert router.sample(names.ROUTER_REQUESTS, endpoint="none", code=str(status)) == 1.0
    assert router.dispatcher.inflight == 0
    assert [v.inflight for v in router.dispatcher.pool.snapshot()] == [0]


@pytest.mark.parametrize(
    ("method", "raw_path"),
    [
        ("POST", b"/v1/completions"),
        ("POST", b"/v1/chat/completions"),
        ("GET", b"/v1/models"),
        ("GET", b"/v1/responses/resp_1"),
        ("POST", b"/v1/echo"),  # allowed by the flag (TEST_ROUTES)
        ("HEAD", b"/v1/models"),  # metadata: HEAD wherever GET is (was 405)
        ("OPTIONS", b"/v1/chat/completions"),  # a CORS preflight (was 405)
        ("OPTIONS", b"/v1/echo"),
    ],
)
async def test_table_routes_are_forwarded_as_sent(
    recording_upstream: tuple[str, list[tuple[str, str]]], method: str, raw_path: bytes
) -> None:
    url, seen = recording_upstream
    async with in_process("httptools", url) as router:
        sent = await router.call({"type": "http.request", "body": b"{}"}, method=method,
                                 raw_path=raw_path)  # fmt: skip
    assert sent[0]["status"] == 200
    assert seen == [(method, raw_path.decode())]
