"""Priority classes live: the router (``--priority-class``) in front of a real emulator,
clients on the real OpenAI SDK (issue 25, item 2).

Overload is made deterministic rather than timed: the router starts with no endpoint, so
every request is held until the test writes the emulator's address into the endpoints file
(a scale from zero); one slot then serves the held requests one at a time, in the hold
order. The sheddable class arrives while nothing is free and is answered 429 at once.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from pathlib import Path

import openai
import pytest

from inflight import names
from tests.integration.test_router_emulator import (
    MODEL,
    SETTLE_S,
    all_idle,
    metric_sum,
    metrics_text,
    start_emulator,
    start_router,
    status,
    write_endpoints,
)
from tests.support import ProcessTracker, wait_for

N = 6  # requests of each held class


async def test_under_overload_the_high_class_goes_first_the_sheddable_gets_429_none_lost(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    path = tmp_path / "endpoints.json"
    write_endpoints(path, [])
    emu = start_emulator(procs)
    router = start_router(
        procs,
        "--endpoints-file",
        str(path),
        extra=("--slots-per-endpoint", "1", "--hold-when-full", "--file-poll-s", "0.2",
               "--priority-class", "high:0:1.5", "--priority-class", "low:10:60",
               "--priority-class", "batch:100:shed", "--max-late-s", "120",
               "--client-priority"),  # the clients' own priorities, trusted
    )  # fmt: skip
    client = openai.AsyncOpenAI(base_url=router.url + "/v1", api_key="unused", max_retries=0)
    ttft_s: dict[str, list[float]] = {"high": [], "low": []}
    order: list[str] = []

    async def stream(name: str, **priority: object) -> None:
        t0 = time.monotonic()
        chunks = await client.completions.create(
            model=MODEL, prompt="summarize the meeting", max_tokens=8, stream=True, **priority
        )  # type: ignore[call-overload]
        first = True
        text = ""
        async for chunk in chunks:
            if first:
                ttft_s[name].append(time.monotonic() - t0)
                order.append(name)
                first = False
            text += chunk.choices[0].text if chunk.choices else ""
        assert text  # the whole stream arrived

    try:
        tasks = []
        for _ in range(N):  # low first each time: FIFO would favour it
            tasks.append(asyncio.create_task(stream("low", extra_body={"priority": 10})))
            tasks.append(
                asyncio.create_task(stream("high", extra_headers={"x-request-priority": "-1"}))
            )
        await asyncio.to_thread(
            wait_for, lambda: status(router)["queued"] == 2 * N, 20.0, 0.05, "all held"
        )
        for _ in range(3):  # saturated: the sheddable class is refused at once, with 429
            with pytest.raises(openai.RateLimitError) as info:
                await client.completions.create(
                    model=MODEL, prompt="x", max_tokens=4, extra_body={"priority": 50}
                )
            assert info.value.response.headers["retry-after"] == "1"
            assert info.value.body["type"] == "router_shed"  # type: ignore[index]
        write_endpoints(path, [emu.url])
        await asyncio.gather(*tasks)  # none lost: every held request completed
    finally:
        await client.close()
    assert order == ["high"] * N + ["low"] * N
    assert statistics.median(ttft_s["high"]) < statistics.median(ttft_s["low"])
    wait_for(lambda: all_idle(router, [emu]), SETTLE_S, what="idle")
    text = metrics_text(router.url)
    held = names.ROUTER_CLASS_HELD
    assert metric_sum(text, held + '{class="batch",outcome="shed"}') == 3.0
    assert metric_sum(text, held + '{class="high",outcome="held"}') == N
    assert metric_sum(text, held + '{class="low",outcome="held"}') == N
    assert metric_sum(text, held + '{class="high",outcome="too_long"}') == 0.0
    assert metric_sum(text, names.ROUTER_CLASS_WAIT + '_count{class="low"}') == N
    assert metric_sum(text, names.ROUTER_CLASS_REQUESTS + '{class="batch"}') == 3.0
    assert metric_sum(text, names.ROUTER_REQUESTS + '{code="429",endpoint="none"}') == 3.0
