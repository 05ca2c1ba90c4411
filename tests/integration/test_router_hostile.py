"""The hostile-client tier (issue 39): a router process configured as manifests/base
configures it (its ``router.env``, the Kubernetes source replaced by the emulator), each
hostile or broken client against it, then an ordinary completion (the OpenAI SDK) still
served, ``/metrics`` answering 200, and no traceback in the router's log.

The timeouts a case waits on are set small by flag (1 s, where the manifests' 60 s would
take a minute); every other setting is the manifests'. Waits are polls, never sleeps.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from inflight import names
from router.config import RouterSettings
from tests.support import ProcessTracker, Server, sample_total, wait_for

ROOT = Path(__file__).resolve().parents[2]
ROUTER_ENV = ROOT / "manifests" / "base" / "router.env"
MODEL = "m"
# Long enough that a stream outgrows the kernel's socket buffers (a stalled reader's stream
# must still be running when they fill): 60,000 tokens of SSE are megabytes.
MAX_MODEL_LEN = 65536
GUARD_S = 30.0
# Where a case would wait the manifests' minute: the same limit, small.
FAST = ("--header-timeout-s", "1", "--body-timeout-s", "1", "--write-stall-s", "1")


def manifest_env() -> dict[str, str]:
    """manifests/base/router.env's variables, less those of the pod (listen address, port:
    the test's) and of the Kubernetes source (replaced by ``--endpoints``)."""
    env = {}
    for line in ROUTER_ENV.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key] = value
    for key in ("HOST", "PORT", "K8S_SERVICE", "K8S_PORT_NAME"):
        env.pop(f"INFLIGHT_ROUTER_{key}", None)
    return env


@pytest.fixture
def stack(procs: ProcessTracker) -> Iterator[tuple[Server, Server]]:
    emulator = procs.start_inflight(
        ["emulator", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", MODEL,
         "--max-num-seqs", "4", "--num-gpu-blocks", "20000", "--block-size", "16",
         "--max-model-len", str(MAX_MODEL_LEN), "--time-scale", "0.01", "--startup-s", "0"],
        name="emulator",
    )  # fmt: skip
    router = procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--endpoints", emulator.url,
         "--discover-interval-s", "0.2", "--health-interval-s", "0.5", *FAST],
        name="router",
        env=manifest_env(),
        ready_path="/router/status",
    )  # fmt: skip
    # Token admission's capacity and max_model_len, discovered from the emulator (the
    # manifests' way): polled until a budget past it is the router's own 400.
    wait_for(lambda: kv_tokens(router) > 0, what="the endpoint's KV capacity discovered")
    wait_for(lambda: refused_here(router, 10**6), what="max_model_len discovered")
    yield emulator, router
    log = Path(router.process.log_path or "").read_text()
    assert "Traceback" not in log, log[-4000:]


def refused_here(router: Server, max_tokens: int) -> dict[str, Any] | None:
    """The router's own 400 for ``max_tokens`` (its message, not the emulator's), or None."""
    body = b'{"model": "m", "prompt": "hi", "max_tokens": %d}' % max_tokens
    request = urllib.request.Request(
        router.url + "/v1/completions", body, {"content-type": "application/json"}
    )
    try:
        urllib.request.urlopen(request, timeout=GUARD_S).close()
    except urllib.error.HTTPError as exc:
        error: dict[str, Any] = json.loads(exc.read())["error"]
        if exc.code == 400 and "is too large" in error["message"]:
            return error
    return None


def metrics(router: Server) -> str:
    with urllib.request.urlopen(router.url + "/metrics", timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()


def kv_tokens(router: Server) -> float:
    return sample_total(metrics(router), names.ROUTER_ENDPOINT_KV_TOKENS)


def client_errors(router: Server, reason: str) -> float:
    prefix = f'{names.ROUTER_CLIENT_ERRORS}{{reason="{reason}"}} '
    for line in metrics(router).splitlines():
        if line.startswith(prefix):
            return float(line.removeprefix(prefix))
    raise AssertionError(f"no {reason} series")


def inflight(router: Server) -> float:
    return sample_total(metrics(router), names.ROUTER_INFLIGHT)


def still_serving(router: Server) -> None:
    """An ordinary completion is answered and /metrics answers 200."""
    client = openai.OpenAI(
        base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=GUARD_S
    )
    out = client.completions.create(model=MODEL, prompt="hello", max_tokens=4)
    assert out.choices[0].text
    metrics(router)


def raw(router: Server, *parts: bytes) -> bytes:
    """Send ``parts`` on one connection, then read until the router closes it."""
    with socket.create_connection(("127.0.0.1", router.port), timeout=GUARD_S) as sock:
        for part in parts:
            sock.sendall(part)
        return read_all(sock)


def raw_completion(router: Server, body: bytes) -> bytes:
    """``POST /v1/completions`` with ``body`` as it is (no client library reshapes it), on a
    connection the router closes after its answer; the whole answer."""
    head = (
        b"POST /v1/completions HTTP/1.1\r\nhost: r\r\nconnection: close\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    )
    return raw(router, head, body)


def read_all(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def error_of(response: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(response.partition(b"\r\n\r\n")[2])["error"]
    return doc


def test_the_manifests_set_every_limit_and_set_it_to_the_default() -> None:
    env = manifest_env()
    defaults = RouterSettings.model_fields
    limits = ("max_url_bytes", "max_header_bytes", "max_headers", "header_timeout_s",
              "body_timeout_s", "max_connections", "write_stall_s", "max_held_bytes")  # fmt: skip
    for flag in limits:
        value = env[f"INFLIGHT_ROUTER_{flag.upper()}"]
        assert float(value) == defaults[flag].default, flag


def test_a_huge_header_is_431_and_a_trickled_one_leaves_others_served(
    stack: tuple[Server, Server],
) -> None:
    _, router = stack
    head = b"POST /v1/completions HTTP/1.1\r\nhost: r\r\nx-big: "
    response = raw(router, head + b"v" * (1 << 20) + b"\r\n\r\n")
    assert status_of(response) == 431
    assert "--max-header-bytes=65536" in error_of(response)["message"]
    # 16 MiB trickled in 64 KiB pieces by another client while an ordinary one is served.
    outcome: list[bytes | BaseException] = []

    def trickle() -> None:
        try:
            with socket.create_connection(("127.0.0.1", router.port), timeout=GUARD_S) as sock:
                sock.sendall(head)
                for _ in range(256):
                    sock.sendall(b"v" * 65536)
                outcome.append(read_all(sock))
        except OSError as exc:  # the router closed it before all 16 MiB went
            outcome.append(exc)

    thread = threading.Thread(target=trickle)
    thread.start()
    still_serving(router)
    thread.join(GUARD_S)
    assert not thread.is_alive() and outcome
    assert client_errors(router, "header_too_large") == 2
    still_serving(router)


def test_slowloris_connections_and_a_stalled_body_are_closed(
    stack: tuple[Server, Server],
) -> None:
    _, router = stack
    slow = []
    for _ in range(200):
        sock = socket.create_connection(("127.0.0.1", router.port), timeout=GUARD_S)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nhost: r\r\nx-a: 1\r\n")  # never ends
        slow.append(sock)
    stalled = socket.create_connection(("127.0.0.1", router.port), timeout=GUARD_S)
    stalled.sendall(
        b"POST /v1/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n"
        b'content-length: 1000\r\n\r\n{"model": '
    )
    try:
        still_serving(router)  # while they hang
        statuses = {status_of(read_all(sock)) for sock in slow}
        assert statuses == {408}
        response = read_all(stalled)
        assert status_of(response) == 408
        assert "--body-timeout-s=1" in error_of(response)["message"]
    finally:
        for sock in [*slow, stalled]:
            sock.close()
    assert client_errors(router, "header_timeout") == 200
    assert client_errors(router, "body_timeout") == 1
    wait_for(lambda: inflight(router) == 0, what="L back to 0")
    still_serving(router)


@pytest.mark.parametrize("max_tokens", [10**9, 10**400])
def test_an_absurd_max_tokens_is_vllms_400_without_waiting(
    stack: tuple[Server, Server], max_tokens: int
) -> None:
    _, router = stack
    before = client_errors(router, "bad_budget")
    error = refused_here(router, max_tokens)
    assert error is not None
    assert error["type"] == "BadRequestError" and error["param"] == "max_tokens"
    assert f"maximum context length is {MAX_MODEL_LEN} tokens" in error["message"]
    assert client_errors(router, "bad_budget") == before + 1
    assert inflight(router) == 0
    still_serving(router)


def test_a_deeply_nested_body_is_a_clean_400(stack: tuple[Server, Server]) -> None:
    _, router = stack
    body = b'{"model": "m", "prompt": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    response = raw_completion(router, body)
    assert status_of(response) == 400
    assert "nested too deeply" in error_of(response)["message"]
    assert client_errors(router, "bad_body") == 1
    still_serving(router)


def test_a_million_prompts_is_a_clean_400_before_any_is_read(stack: tuple[Server, Server]) -> None:
    _, router = stack
    body = json.dumps({"model": MODEL, "prompt": [[1]] * 1_000_000, "max_tokens": 1}).encode()
    response = raw_completion(router, body)
    assert status_of(response) == 400
    message = error_of(response)["message"]
    assert "1000000 prompts" in message and "--max-prompt-items=8192" in message, message
    assert client_errors(router, "bad_body") == 1
    assert inflight(router) == 0
    still_serving(router)


def test_streaming_clients_that_stop_reading_lose_their_slots(
    stack: tuple[Server, Server],
) -> None:
    _, router = stack
    still_serving(router)  # a pooled upstream connection: the first stream takes the fast path
    request = json.dumps(
        {"model": MODEL, "prompt": "hi", "max_tokens": 60_000, "stream": True}
    ).encode()
    readers = []
    for _ in range(4):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", router.port))
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nhost: r\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%b" % (len(request), request)
        )  # and never read
        readers.append(sock)
    try:
        wait_for(
            lambda: client_errors(router, "write_stall") == 4,
            timeout_s=120,
            what="the four stalled readers cut off",
        )
        wait_for(lambda: inflight(router) == 0, what="their slots back")
        text = metrics(router)
        assert 'code="499"' in text
    finally:
        for sock in readers:
            sock.close()
    still_serving(router)


def test_a_clients_own_priority_changes_nothing_unless_the_operator_opts_in(
    procs: ProcessTracker, stack: tuple[Server, Server]
) -> None:
    emulator, _ = stack
    env = manifest_env()
    env.pop("INFLIGHT_ROUTER_HOLD_DEADLINE_S")  # the classes have their own deadlines
    classes = ("--priority-class", "high:0:1.5", "--priority-class", "batch:100:shed")

    def router_with(*flags: str) -> Server:
        return procs.start_inflight(
            ["router", "--host", "127.0.0.1", "--port", "{port}", "--endpoints", emulator.url,
             *classes, *flags],
            name="router", env=env, ready_path="/router/status",
        )  # fmt: skip

    def class_of_request(router: Server, **kw: Any) -> str:
        """The class one completion was counted in."""
        before = class_counts(router)
        client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0)
        client.completions.create(model=MODEL, prompt="hi", max_tokens=2, **kw)
        after = class_counts(router)
        (name,) = [c for c in after if after[c] != before.get(c, 0.0)]
        return name

    claims = {"extra_headers": {"x-request-priority": "50"}, "extra_body": {"priority": 50}}
    plain = router_with()
    assert class_of_request(plain, **claims) == "high"  # the claim changed nothing
    gateway = router_with("--priority-header", "x-gateway-priority")
    assert class_of_request(gateway, **claims) == "high"
    set_by_gateway = {"extra_headers": {"x-gateway-priority": "50"}}
    assert class_of_request(gateway, **set_by_gateway) == "batch"
    opted_in = router_with("--client-priority")
    assert class_of_request(opted_in, **claims) == "batch"
    # A route's priority is the operator's too; the gateway's header comes first.
    by_route = router_with(
        "--route-priority", "/v1/completions=50", "--priority-header", "x-gateway-priority"
    )
    assert class_of_request(by_route) == "batch"
    assert class_of_request(by_route, extra_headers={"x-gateway-priority": "0"}) == "high"
    for router in (plain, gateway, opted_in, by_route):
        log = Path(router.process.log_path or "").read_text()
        assert "Traceback" not in log, log[-4000:]


def class_counts(router: Server) -> dict[str, float]:
    prefix = names.ROUTER_CLASS_REQUESTS + '{class="'
    out = {}
    for line in metrics(router).splitlines():
        if line.startswith(prefix):
            name, _, rest = line.removeprefix(prefix).partition('"}')
            out[name] = float(rest)
    return out
