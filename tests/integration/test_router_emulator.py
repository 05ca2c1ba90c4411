"""The router in front of real emulator processes, on loopback.

Every process is a real ``inflight`` subprocess started by the ``procs`` fixture; clients
are the OpenAI SDK or aiohttp. Conditions are polled with ``wait_for`` and generous
deadlines (the machine is small and shared); nothing asserts on speed.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import aiohttp
import openai
import pytest

from inflight import names
from tests.support import ProcessTracker, Server, wait_for

MODEL = "router-test-model"
TIME_SCALE = "0.1"  # a 300-token reference request takes ~0.45 s
# Deadline for "returns to 0": the issue asks for within a second; on a loaded 2-core
# machine we poll up to 5 s, so the test proves the release happens, not its speed.
SETTLE_S = 5.0


# --- helpers -------------------------------------------------------------------------------
def start_emulator(procs: ProcessTracker, name: str = "emulator") -> Server:
    return procs.start_inflight(
        [
            "emulator",
            "--host", "127.0.0.1",
            "--port", "{port}",
            "--served-model-name", MODEL,
            "--max-num-seqs", "4",
            "--time-scale", TIME_SCALE,
            "--startup-s", "0",
        ],
        name=name,
    )  # fmt: skip


def start_router(procs: ProcessTracker, *source: str, extra: tuple[str, ...] = ()) -> Server:
    return procs.start_inflight(
        [
            "router",
            "--host", "127.0.0.1",
            "--port", "{port}",
            "--slots-per-endpoint", "4",
            "--health-interval-s", "0.5",
            *source,
            *extra,
        ],
        name="router",
    )  # fmt: skip


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def status(router: Server) -> dict:
    return get_json(router.url + "/router/status")


def per_endpoint(router: Server) -> dict[str, int]:
    return {e["url"]: e["inflight"] for e in status(router)["endpoints"]}


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        return resp.read().decode()


def metric_sum(text: str, name: str) -> float:
    """Sum of every sample of ``name`` (any labels) in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


def emulator_load(emu: Server) -> float:
    """running + waiting as the emulator reports them (vLLM's metric names)."""
    text = metrics_text(emu.url)
    return metric_sum(text, names.VLLM_RUNNING) + metric_sum(text, names.VLLM_WAITING)


def router_gauges_zero(router: Server) -> bool:
    text = metrics_text(router.url)
    return (
        metric_sum(text, names.ROUTER_INFLIGHT) == 0
        and metric_sum(text, names.ROUTER_QUEUED) == 0
        and metric_sum(text, names.ROUTER_ENDPOINT_INFLIGHT) == 0
    )


def all_idle(router: Server, emulators: list[Server]) -> bool:
    return router_gauges_zero(router) and all(emulator_load(e) == 0 for e in emulators)


def completion_body(max_tokens: int, stream: bool = False) -> dict:
    return {"model": MODEL, "prompt": "summarize the meeting", "max_tokens": max_tokens,
            "stream": stream}  # fmt: skip


async def post(session: aiohttp.ClientSession, router: Server, body: dict) -> tuple[int, bytes]:
    async with session.post(router.url + "/v1/completions", json=body) as resp:
        return resp.status, await resp.read()


async def raw_request(
    server: Server, method: str, target: str, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One request written by hand, so the target reaches the router exactly as written
    (HTTP clients resolve ``..`` in a URL before sending it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(
            f"{method} {target} HTTP/1.1\r\nHost: router\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 30)  # to EOF: Connection: close
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines)}
    return int(status_line.split()[1]), headers, payload


def write_endpoints(path: Path, urls: list[str]) -> None:
    """Atomic replace, as the orchestrator does it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(urls))
    os.replace(tmp, path)


@pytest.fixture
def two_emulators(procs: ProcessTracker) -> list[Server]:
    return [start_emulator(procs, "emulator-a"), start_emulator(procs, "emulator-b")]


# --- tests ---------------------------------------------------------------------------------
def test_openai_sdk_streaming_and_not_through_the_router(
    procs: ProcessTracker, two_emulators: list[Server]
) -> None:
    router = start_router(procs, "--endpoints", ",".join(e.url for e in two_emulators))
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0)
    try:
        models = client.models.list()
        assert [m.id for m in models.data] == [MODEL]

        done = client.completions.create(model=MODEL, prompt="hello", max_tokens=12)
        assert done.choices[0].text
        assert done.usage is not None and done.usage.completion_tokens == 12

        chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
        assert chat.choices[0].message.content

        pieces = [
            chunk.choices[0].delta.content or ""
            for chunk in client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=16,
                stream=True,
            )
            if chunk.choices
        ]
        assert len([p for p in pieces if p]) > 1  # arrived as several SSE events
        streamed = client.completions.create(
            model=MODEL, prompt="hello", max_tokens=10, stream=True
        )
        assert "".join(c.choices[0].text for c in streamed if c.choices)
    finally:
        client.close()
    wait_for(lambda: all_idle(router, two_emulators), SETTLE_S, what="idle after SDK calls")
    text = metrics_text(router.url)
    # models.list is metadata (no slot, not in L, not in λ): 4 work requests were counted.
    assert metric_sum(text, names.ROUTER_REQUESTS) == 4
    assert metric_sum(text, names.ROUTER_REQUESTS_RECEIVED) == 4
    assert metric_sum(text, names.ROUTER_REQUEST_DURATION + "_count") == 4


async def test_sixteen_concurrent_split_evenly_and_gauges_return_to_zero(
    procs: ProcessTracker, two_emulators: list[Server]
) -> None:
    """16 closed-loop workers on 2 endpoints × 4 slots.

    A sample is taken while all 16 requests are in flight at the router (between one
    request ending and its worker's next one arriving, a count is briefly one short, which
    is not a dispatch decision): in every such sample the two counts differ by ≤ 1.
    """
    router = start_router(procs, "--endpoints", ",".join(e.url for e in two_emulators))
    samples: list[tuple[int, int]] = []
    stop = asyncio.Event()

    async def sampler(session: aiohttp.ClientSession) -> None:
        while not stop.is_set():
            async with session.get(router.url + "/router/status") as resp:
                doc = await resp.json()
            if doc["inflight"] == 16:
                counts = [e["inflight"] for e in doc["endpoints"]]
                samples.append((counts[0], counts[1]))
            await asyncio.sleep(0.01)

    async def worker(session: aiohttp.ClientSession) -> list[int]:
        return [(await post(session, router, completion_body(200)))[0] for _ in range(3)]

    async with aiohttp.ClientSession() as session:
        sampling = asyncio.create_task(sampler(session))
        codes = await asyncio.gather(*(worker(session) for _ in range(16)))
        stop.set()
        await sampling
    assert all(code == 200 for row in codes for code in row)
    assert samples, "never saw all 16 requests in flight"
    worst = max(abs(a - b) for a, b in samples)
    assert worst <= 1, f"imbalance {worst} in samples {samples[:20]}"
    wait_for(lambda: all_idle(router, two_emulators), SETTLE_S, what="every gauge back to 0")


async def test_clients_that_leave_free_slots_at_router_and_emulator(
    procs: ProcessTracker,
) -> None:
    """Streams aborted after their first event, and clients that give up before the first
    byte while their request waits in the emulator's queue: the slots come back at once.
    """
    emu = start_emulator(procs)
    router = start_router(procs, "--endpoints", emu.url)
    async with aiohttp.ClientSession() as session:
        # 1) Streams aborted early.
        async def abort_after_first_event() -> None:
            async with session.post(
                router.url + "/v1/completions", json=completion_body(3000, stream=True)
            ) as resp:
                assert resp.status == 200
                await resp.content.readline()  # first SSE line: the stream has begun
            # leaving the block closes the connection mid-stream

        await asyncio.gather(*(abort_after_first_event() for _ in range(3)))
        wait_for(lambda: all_idle(router, [emu]), SETTLE_S, what="aborted streams released")

        # 2) Clients that leave before the first byte, queued in the emulator.
        running = [asyncio.create_task(post(session, router, completion_body(3000)))
                   for _ in range(4)]  # fmt: skip
        await asyncio.to_thread(wait_for, lambda: emulator_load(emu) == 4, 10.0, 0.05, "4 running")
        queued = [asyncio.create_task(post(session, router, completion_body(3000)))
                  for _ in range(4)]  # fmt: skip

        def queued_in_emulator() -> bool:
            text = metrics_text(emu.url)
            return metric_sum(text, names.VLLM_WAITING) == 4

        await asyncio.to_thread(wait_for, queued_in_emulator, 10.0, 0.05, "4 waiting in vLLM")
        assert status(router)["inflight"] == 8
        for task in queued:
            task.cancel()  # the client gives up before any response byte
        await asyncio.gather(*queued, return_exceptions=True)

        def back_to_four() -> bool:
            text = metrics_text(emu.url)
            return (
                status(router)["inflight"] == 4
                and per_endpoint(router)[emu.url] == 4
                and metric_sum(text, names.VLLM_WAITING) == 0
            )

        await asyncio.to_thread(wait_for, back_to_four, SETTLE_S, 0.05, "queued ones released")
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    wait_for(lambda: all_idle(router, [emu]), SETTLE_S, what="everything released")


async def test_emulator_killed_mid_stream(
    procs: ProcessTracker, two_emulators: list[Server]
) -> None:
    victim, survivor = two_emulators
    router = start_router(
        procs,
        "--endpoints",
        f"{victim.url},{survivor.url}",
        extra=("--unhealthy-backoff-s", "30"),
    )

    async def stream(session: aiohttp.ClientSession, started: asyncio.Event) -> bytes:
        async with session.post(
            router.url + "/v1/completions", json=completion_body(3000, stream=True)
        ) as resp:
            assert resp.status == 200
            first = await resp.content.readline()
            started.set()
            return first + await resp.read()  # must end, not hang

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        events = [asyncio.Event() for _ in range(4)]
        tasks = [asyncio.create_task(stream(session, ev)) for ev in events]
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in events)), 30)
        assert per_endpoint(router) == {victim.url: 2, survivor.url: 2}
        victim.process.signal_group(signal.SIGKILL)
        await asyncio.to_thread(
            wait_for,
            lambda: per_endpoint(router)[victim.url] == 0,
            SETTLE_S,
            0.05,
            "the killed endpoint's gauge to return to 0",
        )
        # The victim's clients got a clean end with an SSE error event.
        for _ in range(int(SETTLE_S / 0.05)):
            if sum(t.done() for t in tasks) >= 2:
                break
            await asyncio.sleep(0.05)  # polling the client tasks, with a deadline
        broken = [task.result() for task in tasks if task.done()]
        assert len(broken) == 2, "the victim's two streams should have ended"
        for body in broken:
            assert b"[DONE]" not in body
            assert body.rstrip().splitlines()[-1].startswith(b'data: {"error"')
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        # New requests go to the survivor (refused → unhealthy → retried on the survivor).
        results = await asyncio.gather(
            *(post(session, router, completion_body(5)) for _ in range(4))
        )
        assert [code for code, _ in results] == [200] * 4
    text = metrics_text(router.url)
    survivor_label = survivor.url.split("://")[1]
    assert f'{names.ROUTER_REQUESTS}{{code="200",endpoint="{survivor_label}"}} 4.0' in text
    wait_for(
        lambda: (
            {e["url"]: e["state"] for e in status(router)["endpoints"]}[victim.url] == "unhealthy"
        ),
        SETTLE_S,
        what="the killed endpoint to be marked unhealthy",
    )
    wait_for(lambda: router_gauges_zero(router), SETTLE_S, what="router gauges back to 0")


async def test_endpoint_file_change_during_load_keeps_counts_and_drains(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    a, b, c = (start_emulator(procs, f"emulator-{n}") for n in "abc")
    path = tmp_path / "endpoints.json"
    write_endpoints(path, [a.url, b.url])
    router = start_router(procs, "--endpoints-file", str(path), extra=("--file-poll-s", "0.2"))
    async with aiohttp.ClientSession() as session:
        first = [asyncio.create_task(post(session, router, completion_body(1500)))
                 for _ in range(8)]  # fmt: skip
        await asyncio.to_thread(
            wait_for,
            lambda: per_endpoint(router) == {a.url: 4, b.url: 4},
            10.0,
            0.05,
            "4 + 4 in flight",
        )
        write_endpoints(path, [b.url, c.url])

        def changed() -> dict | None:
            doc = status(router)
            return doc if len(doc["endpoints"]) == 3 else None

        doc = await asyncio.to_thread(wait_for, changed, 10.0, 0.05, "the new list")
        rows = {e["url"]: (e["state"], e["inflight"]) for e in doc["endpoints"]}
        if all(not t.done() for t in first):
            assert rows[a.url] == ("draining", 4)
            assert rows[b.url] == ("ready", 4)
        assert rows[c.url] == ("ready", 0)
        second = [asyncio.create_task(post(session, router, completion_body(20)))
                  for _ in range(4)]  # fmt: skip
        results = await asyncio.gather(*first, *second)
        assert [code for code, _ in results] == [200] * 12
    wait_for(
        lambda: [e["url"] for e in status(router)["endpoints"]] == [b.url, c.url],
        SETTLE_S,
        what="the drained endpoint to disappear",
    )
    text = metrics_text(router.url)
    a_label = a.url.split("://")[1]
    assert f'endpoint="{a_label}"' not in text.split(names.ROUTER_REQUESTS_RECEIVED)[0]
    assert f'{names.ROUTER_REQUESTS}{{code="200",endpoint="{a_label}"}} 4.0' in text
    wait_for(lambda: all_idle(router, [a, b, c]), SETTLE_S, what="idle")


async def test_hold_when_full_waits_for_an_endpoint_and_bounds_the_queue(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    path = tmp_path / "endpoints.json"
    write_endpoints(path, [])
    router = start_router(
        procs,
        "--endpoints-file",
        str(path),
        extra=("--hold-when-full", "--max-queue", "1", "--queue-timeout-s", "2",
               "--file-poll-s", "0.2"),
    )  # fmt: skip
    async with aiohttp.ClientSession() as session:
        # A held request times out with 504 when nothing appears.
        held = asyncio.create_task(post(session, router, completion_body(5)))
        await asyncio.to_thread(
            wait_for, lambda: status(router)["queued"] == 1, 10.0, 0.05, "one held"
        )
        assert status(router)["inflight"] == 1  # held requests count in L
        # The queue bound: a second request is refused at once.
        async with session.post(router.url + "/v1/completions", json=completion_body(5)) as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"]
            assert (await resp.json())["error"]["type"] == "router_queue_full"
        code, body = await held
        assert code == 504
        assert json.loads(body)["error"]["type"] == "router_queue_timeout"

        # A held client that gives up leaves the queue and L at once.
        gone = asyncio.create_task(post(session, router, completion_body(5)))
        await asyncio.to_thread(
            wait_for, lambda: status(router)["queued"] == 1, 10.0, 0.05, "one held"
        )
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        await asyncio.to_thread(
            wait_for,
            lambda: status(router)["queued"] == 0 and status(router)["inflight"] == 0,
            SETTLE_S,
            0.05,
            "the held request that left to be forgotten",
        )

        # Scale from zero: a held request completes once an endpoint appears.
        emu = start_emulator(procs)  # started first: its start-up must not eat the 2 s
        held = asyncio.create_task(post(session, router, completion_body(5)))
        await asyncio.to_thread(
            wait_for, lambda: status(router)["queued"] == 1, 10.0, 0.05, "one held"
        )
        write_endpoints(path, [emu.url])
        code, _ = await held
        assert code == 200
    wait_for(lambda: all_idle(router, [emu]), SETTLE_S, what="idle")


async def test_hold_deadline_serves_a_request_still_on_time_before_a_late_one(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    """``--hold-deadline-s``: with no endpoint, "old" is held past the deadline, then "new"
    arrives; when one single-slot endpoint appears, "new" (still on time) is served
    first and "old" after it, and the router counts one late request. Plain FIFO would
    serve "old" first."""
    deadline_s = 3.0
    path = tmp_path / "endpoints.json"
    write_endpoints(path, [])
    emu = start_emulator(procs)
    router = start_router(
        procs,
        "--endpoints-file",
        str(path),
        extra=("--slots-per-endpoint", "1", "--hold-when-full", "--hold-deadline-s",
               str(deadline_s), "--file-poll-s", "0.2"),
    )  # fmt: skip
    done: list[str] = []

    async def send(session: aiohttp.ClientSession, name: str) -> int:
        code, _ = await post(session, router, completion_body(5))
        done.append(name)
        return code

    async with aiohttp.ClientSession() as session:
        old = asyncio.create_task(send(session, "old"))
        await asyncio.to_thread(
            wait_for, lambda: status(router)["queued"] == 1, 10.0, 0.05, "old held"
        )
        held_at = time.monotonic()
        # The deadline is a span of time: wait for the clock itself, nothing else.
        await asyncio.to_thread(
            wait_for, lambda: time.monotonic() - held_at > deadline_s + 0.2, 10.0, 0.05,
            "old to be past the deadline",
        )  # fmt: skip
        new = asyncio.create_task(send(session, "new"))
        await asyncio.to_thread(
            wait_for, lambda: status(router)["queued"] == 2, 10.0, 0.05, "new held"
        )
        write_endpoints(path, [emu.url])  # "new" has waited well under 3 s when it lands
        assert await new == 200 and await old == 200
    assert done == ["new", "old"]
    assert metric_sum(metrics_text(router.url), names.ROUTER_HELD_LATE) == 1.0
    wait_for(lambda: all_idle(router, [emu]), SETTLE_S, what="idle")


async def test_paths_and_methods_outside_openai_routes_never_reach_the_emulator(
    procs: ProcessTracker,
) -> None:
    """Dot-segments (plain or encoded) are 400, paths outside vLLM's OpenAI routes 404,
    other methods 405 with Allow: all answered by the router (its error body, counted at
    endpoint "none"), none forwarded. ``--allow-route`` opens one path, and only it.
    """
    emu = start_emulator(procs)
    router = start_router(procs, "--endpoints", emu.url)
    body = json.dumps(completion_body(3)).encode()
    refused = [
        ("GET", "/v1/../admin", 400, "bad_path"),
        ("POST", "/v1/%2e%2e/admin", 400, "bad_path"),
        ("POST", "/v1/.%2E/completions", 400, "bad_path"),
        ("POST", "/v1/completions/../../metrics", 400, "bad_path"),
        ("POST", "/v1/load_lora_adapter", 404, "route_not_found"),
        ("POST", "/v1/unload_lora_adapter", 404, "route_not_found"),
        ("GET", "/v1/completions", 405, "method_not_allowed"),
        ("DELETE", "/v1/models", 405, "method_not_allowed"),
    ]
    for method, target, code, kind in refused:
        got, headers, payload = await raw_request(router, method, target, body)
        assert (got, json.loads(payload)["error"]["type"]) == (code, kind), (method, target)
        if code == 405:
            # OPTIONS (a CORS preflight) on every route, HEAD wherever GET is (bf34400).
            want = "POST, OPTIONS" if target == "/v1/completions" else "GET, HEAD, OPTIONS"
            assert headers["allow"] == want
    code, _, payload = await raw_request(router, "POST", "/v1/completions", body)
    assert code == 200 and json.loads(payload)["choices"]
    text = metrics_text(router.url)
    emu_label = emu.url.split("://")[1]
    assert f'{names.ROUTER_REQUESTS}{{code="200",endpoint="{emu_label}"}} 1.0' in text
    assert metric_sum(text, names.ROUTER_REQUESTS) == 1 + 6  # GETs are not counted
    for status, n in (("400", 3), ("404", 2), ("405", 1)):
        assert f'{names.ROUTER_REQUESTS}{{code="{status}",endpoint="none"}} {n}.0' in text
    assert router_gauges_zero(router)

    # Opened by the flag: forwarded (the emulator has no such route: its own 404).
    opened = start_router(
        procs, "--endpoints", emu.url, extra=("--allow-route", "POST:/v1/load_lora_adapter")
    )
    code, _, payload = await raw_request(opened, "POST", "/v1/load_lora_adapter", b"{}")
    assert code == 404 and b"route_not_found" not in payload
    text = metrics_text(opened.url)
    assert f'{names.ROUTER_REQUESTS}{{code="404",endpoint="{emu_label}"}} 1.0' in text
    code, _, _ = await raw_request(opened, "POST", "/v1/unload_lora_adapter", b"{}")
    assert code == 404
    assert 'code="404",endpoint="none"} 1.0' in metrics_text(opened.url)
