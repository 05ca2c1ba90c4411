"""The emulator's hold routes (``--hold-control``) as a test uses them, on a real subprocess:
absent by default; while held, ``/metrics`` and the API answer and nothing advances (a
stream gets no token, a request is queued, not admitted); released, every request is
answered. Nothing here sleeps or asserts on time: "nothing advances" is read as counters
that stay put across reads made while the clock is held."""

from __future__ import annotations

import threading
import urllib.error

import httpx
import pytest

from inflight import names
from inflight.emulator import hold_client
from tests.component.test_emulator_server import (
    MODEL,
    client,
    emulator_argv,
    metric,
    running_waiting,
)
from tests.support import ProcessTracker, wait_for


def test_the_hold_routes_exist_only_with_the_flag(procs: ProcessTracker) -> None:
    server = procs.start_inflight(emulator_argv(), name="emulator")
    with pytest.raises(urllib.error.HTTPError) as err:
        hold_client.hold(server.url)
    assert err.value.code == 404


def test_held_nothing_advances_and_released_everything_is_answered(
    procs: ProcessTracker,
) -> None:
    server = procs.start_inflight(
        emulator_argv("--hold-control", "--cold-start-requests", "0", slots=2), name="emulator"
    )
    sdk = client(server)
    tokens_seen: list[int] = []
    answers: list[str] = []

    def stream() -> None:
        chunks = sdk.completions.create(model=MODEL, prompt="x", max_tokens=2000, stream=True)
        for _ in chunks:
            tokens_seen.append(1)
        answers.append("stream")

    def plain() -> None:
        out = sdk.completions.create(model=MODEL, prompt="x", max_tokens=5)
        answers.append(out.choices[0].finish_reason or "")

    threads = [threading.Thread(target=stream)]
    threads[0].start()
    wait_for(lambda: len(tokens_seen) > 1, 30, what="the stream's first tokens")
    state = hold_client.hold(server.url)
    assert state["held"] and state["running"] == 1
    generated = metric(server, names.VLLM_GENERATION_TOKENS)
    threads += [threading.Thread(target=plain) for _ in range(2)]
    for t in threads[1:]:
        t.start()
    # arrivals are queued while held, none admitted
    wait_for(lambda: running_waiting(server) == (1, 2), 30, what="two queued while held")
    assert hold_client.engine_state(server.url)["admitted"] == 1
    assert metric(server, names.VLLM_GENERATION_TOKENS) == generated  # no token since
    assert httpx.get(f"{server.url}/v1/models", timeout=10).status_code == 200
    # held mid-step: the clock runs to the step's end, whose next step admits one (2 slots)
    hold_client.admit(server.url, 1)
    state = wait_for(
        lambda: (s := hold_client.engine_state(server.url))["held"] and s,
        30,
        what="held again once one more is admitted",
    )
    assert (state["running"], state["waiting"]) == (2, 1)
    generated = metric(server, names.VLLM_GENERATION_TOKENS)  # the stream's step ended
    assert running_waiting(server) == (2, 1)
    assert metric(server, names.VLLM_GENERATION_TOKENS) == generated  # and no step since
    hold_client.release(server.url)
    for t in threads:
        t.join(timeout=60)
    assert sorted(answers) == ["length", "length", "stream"]
    state = hold_client.engine_state(server.url)
    assert (state["running"], state["waiting"]) == (0, 0)
    assert (state["most_running"], state["most_in_engine"]) == (2, 3)
