"""``inflight emulator`` as a client sees it: a real subprocess on 127.0.0.1, the OpenAI SDK.

Everything is polled (``wait_for``); nothing asserts on speed. Durations the emulator
reports in its metrics come from its step clock, so they can be checked exactly.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from inflight.emulator import hold_client
from inflight.emulator.profile import Profile
from tests.support import ProcessTracker, Server, until, wait_for

MODEL = "test-model"
SERIES_LABELS = {names.VLLM_MODEL_LABEL: MODEL, names.VLLM_ENGINE_LABEL: "0"}
LONG_BODY = {"model": MODEL, "prompt": "x", "max_tokens": 100_000}


def emulator_argv(*extra: str, time_scale: float = 0.1, slots: int = 4) -> list[str]:
    return [
        "emulator",
        "--host", "127.0.0.1",
        "--port", "{port}",
        "--served-model-name", MODEL,
        "--max-num-seqs", str(slots),
        "--time-scale", str(time_scale),
        "--startup-s", "0",
        *extra,
    ]  # fmt: skip


# One slot, room for 100k-token requests that run for minutes unless their client leaves.
ONE_SLOT_LONG = emulator_argv("--max-model-len", "200000", time_scale=0.1, slots=1)


def samples(server: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(server: Server, name: str, **labels: str) -> float:
    key = (name, tuple(sorted({**SERIES_LABELS, **labels}.items())))
    return samples(server)[key]


def running_waiting(server: Server) -> tuple[float, float]:
    s = samples(server)
    lab = tuple(sorted(SERIES_LABELS.items()))
    return s[(names.VLLM_RUNNING, lab)], s[(names.VLLM_WAITING, lab)]


def arrived(server: Server, count: int) -> Callable[[], tuple[float, float] | None]:
    """A probe: the (running, waiting) snapshot once their sum is ``count``, else None."""

    def probe() -> tuple[float, float] | None:
        seen = running_waiting(server)
        return seen if sum(seen) == count else None

    return probe


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One emulator for the tests that do not care about its state."""
    tracker = ProcessTracker(tmp_path_factory.mktemp("emulator-logs"))
    server = tracker.start_inflight(emulator_argv(time_scale=0.01), name="emulator")
    yield server
    assert tracker.stop_all() == []


def test_eight_requests_on_four_slots(procs: ProcessTracker) -> None:
    # The engine held (--hold-control) while the eight arrive, one at a time so the order is
    # known, then let run until it admits four and held there: the (4, 4) state lasts until
    # it is released, however slow the machine; held again when it admits the last four,
    # the first four are answered while the others cannot finish.
    server = procs.start_inflight(
        emulator_argv("--cold-start-requests", "0", "--hold-control", time_scale=0.1),
        name="emulator",
    )
    hold_client.hold(server.url)
    sdk = client(server)
    done: list[int] = []

    def call(i: int) -> str:
        out = sdk.completions.create(model=MODEL, prompt="x" * 12000, max_tokens=300)
        done.append(i)
        return out.choices[0].finish_reason

    with ThreadPoolExecutor(8) as pool:
        futures = []
        for i in range(8):  # one at a time, so the arrival order is known
            futures.append(pool.submit(call, i))
            seen = wait_for(arrived(server, i + 1), 30, what=f"arrival {i}")
            assert seen == (0, i + 1)  # held: queued, none admitted
        assert hold_client.admit(server.url, 4)["held"]  # admitted at once, held again
        # 4 running on 4 slots, 4 waiting, until released
        assert running_waiting(server) == (4, 4)
        # 4 running × 3,000 prompt tokens: 4 × 24 blocks of 128 tokens, of the default
        # cache's 1,024 (4 slots × --max-model-len 32,768); no token produced yet
        assert metric(server, names.VLLM_KV_CACHE_USAGE) == 4 * 24 / 1024
        assert metric(server, names.VLLM_WAITING_BY_REASON, reason="capacity") == 4
        assert metric(server, names.VLLM_GENERATION_TOKENS) == 0
        assert running_waiting(server) == (4, 4)  # still
        hold_client.hold(server.url, after_admitted=8)
        hold_client.release(server.url)
        wait_for(lambda: len(done) == 4, 30, what="the first four answered")
        assert hold_client.engine_state(server.url)["held"]
        assert running_waiting(server) == (4, 0)
        assert sorted(done) == [0, 1, 2, 3]  # the first four finish before any later one
        hold_client.release(server.url)
        reasons = [f.result(timeout=60) for f in futures]
    assert reasons == ["length"] * 8
    assert metric(server, names.VLLM_REQUEST_SUCCESS, finished_reason="length") == 8
    assert metric(server, names.VLLM_GENERATION_TOKENS) == 8 * 300
    assert metric(server, names.VLLM_PROMPT_TOKENS) == 8 * 3000
    assert metric(server, names.VLLM_QUEUE_TIME + "_count") == 8
    assert metric(server, names.VLLM_TTFT + "_count") == 8
    assert metric(server, names.VLLM_ITL + "_count") == 8 * 299
    # per finished request: 3,000 prompt and 300 output tokens, in vLLM's (2000, 5000] and
    # (200, 500] buckets of the default --max-model-len 32768
    for histogram, tokens, le in (
        (names.VLLM_REQUEST_PROMPT_TOKENS, 3000, ("2000.0", "5000.0")),
        (names.VLLM_REQUEST_GENERATION_TOKENS, 300, ("200.0", "500.0")),
    ):
        assert metric(server, histogram + "_count") == 8
        assert metric(server, histogram + "_sum") == 8 * tokens
        assert metric(server, histogram + "_bucket", le=le[0]) == 0
        assert metric(server, histogram + "_bucket", le=le[1]) == 8
    assert running_waiting(server) == (0, 0)
    assert metric(server, names.VLLM_KV_CACHE_USAGE) == 0


@pytest.mark.parametrize("chat", [False, True])
def test_streaming_with_the_sdk(shared: Server, chat: bool) -> None:
    sdk = client(shared)
    options: Any = {"include_usage": True}
    messages: Any = [{"role": "user", "content": "summarize"}]
    if chat:
        stream = sdk.chat.completions.create(
            model=MODEL,
            messages=messages,
            max_tokens=40,
            stream=True,
            stream_options=options,
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    else:
        cstream = sdk.completions.create(
            model=MODEL, prompt="summarize", max_tokens=40, stream=True, stream_options=options
        )
        chunks = list(cstream)  # type: ignore[arg-type]
        text = "".join(c.choices[0].text for c in chunks if c.choices)  # type: ignore[attr-defined]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert len(text.split()) == 40
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 40
    assert all(c.usage is None for c in chunks[:-1])


def test_raw_stream_ends_with_done_and_no_usage_unless_asked(shared: Server) -> None:
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 5, "stream": True}
    with httpx.stream("POST", f"{shared.url}/v1/completions", json=body, timeout=30) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        raw = "".join(resp.iter_text())
    events = [e for e in raw.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert len(chunks) == 6 and all("usage" not in c for c in chunks)


def test_non_streaming_chat_and_models_and_version(shared: Server) -> None:
    sdk = client(shared)
    out = sdk.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x" * 400}], max_tokens=12
    )
    assert out.choices[0].message.role == "assistant"
    assert len((out.choices[0].message.content or "").split()) == 12
    assert out.usage is not None and out.usage.prompt_tokens == 100 + 4
    no_max = sdk.completions.create(model=MODEL, prompt="hi")
    assert no_max.choices[0].finish_reason == "stop"
    assert no_max.usage is not None
    assert no_max.usage.completion_tokens == Profile().default_max_tokens
    assert [m.id for m in sdk.models.list().data] == [MODEL]
    assert "version" in httpx.get(f"{shared.url}/version").json()


def assert_vllm_error(doc: Any, status: int, err_type: str, param: str | None) -> None:
    """vLLM's error body, field for field.

    vLLM (``vllm/entrypoints/openai/protocol.py``): ``ErrorResponse(error: ErrorInfo)``,
    ``ErrorInfo(message: str, type: str, param: str | None = None, code: int)``, ``code``
    the HTTP status. Its ``RequestValidationError`` handler
    (``vllm/entrypoints/openai/api_server.py``, now ``serve/utils/server_utils.py``)
    answers a body that does not validate with 400, type ``"Bad Request"``
    (``HTTPStatus.BAD_REQUEST.phrase``) and the first error's location as ``param``;
    errors of its serving layer have types such as ``BadRequestError``/``NotFoundError``.
    """
    assert isinstance(doc, dict) and set(doc) == {"error"}
    err = doc["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert (err["type"], err["param"], err["code"]) == (err_type, param, status)


# A body that does not validate against vLLM's request model: vLLM's handler answers.
INVALID = "Bad Request"
BR = "BadRequestError"
CO, CH = "/v1/completions", "/v1/chat/completions"


@pytest.mark.parametrize(
    ("path", "body", "status", "err_type", "param"),
    [
        # bad JSON
        (CO, b"{oops", 400, INVALID, "body.1"),
        (CO, b"", 400, INVALID, "body"),
        (CO, b"[1, 2]", 400, INVALID, "body"),
        # wrong types
        (CO, b'{"model": 3, "prompt": "x"}', 400, INVALID, "body.model"),
        (CO, b'{"prompt": 5}', 400, INVALID, "body.prompt"),
        (CO, b'{"prompt": "x", "max_tokens": "many"}', 400, INVALID, "body.max_tokens"),
        (CO, b'{"prompt": "x", "stream": [1]}', 400, INVALID, "body.stream"),
        (CH, b'{"messages": "hi"}', 400, INVALID, "body.messages"),
        (CH, b'{"messages": [{"content": "x"}]}', 400, INVALID, "body.messages.0.role"),
        # a missing required field
        (CH, b'{"model": "test-model"}', 400, INVALID, "body.messages"),
        # well-typed, refused by the serving layer
        (CO, b'{"model": "test-model"}', 400, BR, "prompt"),
        (CO, b'{"model": "nope", "prompt": "x"}', 404, "NotFoundError", "model"),
        (CO, b'{"prompt": "x", "max_tokens": 0}', 400, BR, "max_tokens"),
        (CO, b'{"prompt": "x", "n": 2}', 400, BR, "n"),
        (CH, b'{"messages":[{"role":"u"}],"max_tokens":-1}', 400, BR, "max_tokens"),
    ],
)  # fmt: skip
def test_bad_input_gets_vllms_error(
    shared: Server, path: str, body: bytes, status: int, err_type: str, param: str | None
) -> None:
    resp = httpx.post(
        f"{shared.url}{path}",
        content=body,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert resp.status_code == status
    assert_vllm_error(resp.json(), status, err_type, param)
    # The emulator is still alive and serving.
    assert httpx.post(
        f"{shared.url}/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=10
    ).is_success


def test_missing_model_is_the_served_one_and_lax_types_as_vllm(shared: Server) -> None:
    """vLLM's ``model`` is optional (the first served name), and its pydantic types are lax."""
    resp = httpx.post(
        f"{shared.url}/v1/completions",
        json={"prompt": "x", "max_tokens": "2", "unknown_field": True},
        timeout=10,
    )
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["model"] == MODEL and doc["usage"]["completion_tokens"] == 2


def test_a_body_without_content_type_is_read_as_json(shared: Server) -> None:
    resp = httpx.post(f"{shared.url}/v1/completions", content=b'{"prompt": "x", "max_tokens": 1}')
    assert resp.status_code == 200


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_tokens": "many"}, "body.max_tokens"),
        ({"prompt": {"text": "x"}}, "body.prompt"),
        ({"model": 7}, "body.model"),
    ],
)
def test_sdk_sees_vllms_validation_error(
    shared: Server, extra: dict[str, object], param: str
) -> None:
    sdk = client(shared)
    with pytest.raises(openai.BadRequestError) as info:
        sdk.completions.create(model=MODEL, prompt="x", max_tokens=1, extra_body=extra)
    assert info.value.status_code == 400
    assert_vllm_error({"error": info.value.body}, 400, INVALID, param)
    # The SDK reads them too (its ``code`` is typed as a string).
    assert (info.value.type, info.value.param, info.value.code) == (INVALID, param, "400")


def test_sdk_maps_errors(shared: Server) -> None:
    sdk = client(shared)
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.completions.create(model="nope", prompt="x", max_tokens=1)
    assert_vllm_error({"error": missing.value.body}, 404, "NotFoundError", "model")
    with pytest.raises(openai.BadRequestError) as zero:
        sdk.completions.create(model=MODEL, prompt="x", max_tokens=0)
    assert_vllm_error({"error": zero.value.body}, 400, "BadRequestError", "max_tokens")


def test_closing_a_stream_early_frees_the_slot(procs: ProcessTracker) -> None:
    server = procs.start_inflight(ONE_SLOT_LONG, name="emulator")
    sdk = client(server)
    stream = sdk.completions.create(model=MODEL, prompt="x", max_tokens=100_000, stream=True)
    it = iter(stream)
    next(it), next(it)
    with ThreadPoolExecutor(1) as pool:
        waiter = pool.submit(sdk.completions.create, model=MODEL, prompt="y", max_tokens=3)
        wait_for(lambda: running_waiting(server) == (1, 1), 30, what="1 running, 1 waiting")
        stream.close()
        out = waiter.result(timeout=60)
    assert out.choices[0].finish_reason == "length"
    assert metric(server, names.VLLM_REQUEST_SUCCESS, finished_reason="abort") == 1
    assert running_waiting(server) == (0, 0)


def raw_request(body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data
    )


def test_disconnect_while_waiting_aborts(procs: ProcessTracker) -> None:
    server = procs.start_inflight(ONE_SLOT_LONG, name="emulator")
    request = raw_request(LONG_BODY)
    running = socket.create_connection(("127.0.0.1", server.port))
    running.sendall(request)
    wait_for(lambda: running_waiting(server) == (1, 0), 30, what="one running")
    waiting = socket.create_connection(("127.0.0.1", server.port))
    waiting.sendall(request)
    wait_for(lambda: running_waiting(server) == (1, 1), 30, what="one waiting")
    waiting.close()  # non-streaming client gives up while queued
    wait_for(lambda: running_waiting(server) == (1, 0), 30, what="the waiter to be aborted")
    running.close()  # non-streaming client gives up while running
    wait_for(lambda: running_waiting(server) == (0, 0), 30, what="the runner to be aborted")
    assert metric(server, names.VLLM_REQUEST_SUCCESS, finished_reason="abort") == 2


def test_health_503_during_startup_and_time_scale_shortens_durations(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    scale = 0.1
    server = procs.start_inflight(
        [*emulator_argv(time_scale=scale)[:-2], "--startup-s", "60"],  # 6 s of wall time
        name="emulator",
        ready_path=None,
    )
    url = f"{server.url}/health"

    def health_code() -> int | None:
        try:
            return httpx.get(url, timeout=5).status_code
        except httpx.TransportError:
            return None

    first = wait_for(health_code, 30, what="the emulator to listen")
    assert first == 503
    starting = httpx.post(f"{server.url}/v1/completions", json={"prompt": "x"}, timeout=5)
    assert starting.status_code == 503 and "error" in starting.json()
    wait_for(lambda: health_code() == 200, 60, what="start-up to finish")

    # A lone cold request: its latency on the step clock, all multiplied by the scale.
    client(server).completions.create(model=MODEL, prompt="x" * 4000, max_tokens=50)
    p = Profile(time_scale=scale)
    expected_s = p.prefill_s(1000) + 50 * p.step_s(1) * p.cold_start_factor
    assert metric(server, names.VLLM_E2E_LATENCY + "_sum") == pytest.approx(expected_s, rel=1e-6)
    unscaled = Profile(time_scale=1.0)
    assert expected_s == pytest.approx(
        scale * (unscaled.prefill_s(1000) + 50 * unscaled.step_s(1) * p.cold_start_factor)
    )


def test_queued_stream_sends_nothing_until_its_first_token(procs: ProcessTracker) -> None:
    """As vLLM: status and headers come with the first token, so TTFB = TTFT."""
    server = procs.start_inflight(ONE_SLOT_LONG, name="emulator")
    running = socket.create_connection(("127.0.0.1", server.port))
    running.sendall(raw_request({**LONG_BODY, "stream": True}))
    head = running.recv(65536)
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
    queued = socket.create_connection(("127.0.0.1", server.port))
    queued.sendall(raw_request({**LONG_BODY, "stream": True}))
    wait_for(lambda: running_waiting(server) == (1, 1), 30, what="one streaming waiter")
    queued.setblocking(False)
    with pytest.raises(BlockingIOError):
        queued.recv(1)  # nothing at all while it waits in the queue
    queued.close()
    wait_for(lambda: running_waiting(server) == (1, 0), 30, what="the queued stream aborted")
    running.close()
    wait_for(lambda: running_waiting(server) == (0, 0), 30, what="the running stream aborted")
    assert metric(server, names.VLLM_REQUEST_SUCCESS, finished_reason="abort") == 2


def test_sigterm_with_requests_in_flight_exits_cleanly(procs: ProcessTracker) -> None:
    server = procs.start_inflight(ONE_SLOT_LONG, name="emulator")
    request = raw_request(LONG_BODY)
    conns = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    for conn in conns:
        conn.sendall(request)
    wait_for(lambda: running_waiting(server) == (1, 1), 30, what="1 running, 1 waiting")
    # A generous grace period: exit code 0 means it left on SIGTERM, not on SIGKILL.
    assert server.process.stop(grace_s=30) == 0
    for conn in conns:
        conn.close()


async def test_the_emulators_connections_have_nagle_off() -> None:
    """uvicorn writes a response's headers and body apart; with Nagle on, the body waits
    for the client's delayed ACK (+41 ms a response, measured). The emulator (and the
    router) serve uvicorn's httptools protocol on a ``ready.listen`` socket: the
    connections it accepts must have Nagle off (read from the socket, not timed)."""
    import asyncio

    import uvicorn
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.server import ServerState

    from inflight import ready

    config = uvicorn.Config(
        lambda *_a: None, http=HttpToolsProtocol, lifespan="off", log_level="warning"
    )
    state = ServerState()
    made: list[HttpToolsProtocol] = []

    def factory() -> HttpToolsProtocol:
        made.append(HttpToolsProtocol(config=config, server_state=state, app_state={}))
        return made[-1]

    sock = ready.listen("127.0.0.1", 0)
    server = await asyncio.get_running_loop().create_server(factory, sock=sock)
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", ready.bound_port(sock))
        await until(lambda: made and made[-1].transport is not None, what="the accepted connection")
        accepted = made[-1].transport.get_extra_info("socket")
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
