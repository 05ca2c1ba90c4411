"""The open-loop sender's trace warm-up against a real emulator behind a real router, at a
tiny time-scale: the warm-up's requests reach the replica before the window's and are kept
out of the measured ones; a run cancelled during the warm-up leaves no request open.
No timing assertions: order, counts, and what the router and the emulator saw."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from inflight import names
from inflight.bench.openloop.sender import run_open_loop
from inflight.workload.trace import PlannedRequest
from tests.support import (
    ProcessTracker,
    Server,
    http_text,
    sample_total,
    start_emulator_and_router,
    until,
    wait_for,
)

TIME_SCALE = 0.05


def _inflight(router: Server) -> int:
    return int(json.loads(http_text(router.url + "/router/status"))["inflight"])


# Prompt lengths tell the parts apart in the emulator's prompt-token counter.
WARMUP = (PlannedRequest(0.0, 1000, 4), PlannedRequest(2.0, 2000, 4), PlannedRequest(4.0, 3000, 4))
WINDOW = (PlannedRequest(0.0, 7, 3), PlannedRequest(1.0, 11, 3))


async def test_the_warmup_is_sent_first_and_kept_out_of_the_measured_requests(
    procs: ProcessTracker,
) -> None:
    emu, router = start_emulator_and_router(procs, TIME_SCALE)
    async with aiohttp.ClientSession() as session:
        run = await run_open_loop(session, router.url, "m", WINDOW, time_scale=TIME_SCALE,
                                  drain_s=20.0, sample_interval_s=0.01, warmup=WARMUP,
                                  warmup_s=5.0)  # fmt: skip
    assert [s.planned for s in run.sent] == list(WINDOW)
    assert [s.planned for s in run.warmup] == list(WARMUP) and run.warmup_s == 5.0
    assert all(s.record.ok for s in (*run.warmup, *run.sent))
    # due 5 seed s before the window's start, in order, before any of the window's
    assert [s.due_t for s in run.warmup] == [run.t0 + (p.t_s - 5.0) * TIME_SCALE for p in WARMUP]
    starts = [s.record.start_t for s in (*run.warmup, *run.sent)]
    assert starts == sorted(starts)
    # the replica served every one of them: real requests, exact prompts
    metrics = http_text(emu.url + "/metrics")
    total = sum(p.prompt_tokens for p in (*WARMUP, *WINDOW))
    assert sample_total(metrics, names.VLLM_PROMPT_TOKENS) == total


async def test_a_run_cancelled_during_the_warmup_leaves_nothing_open(
    procs: ProcessTracker,
) -> None:
    _, router = start_emulator_and_router(procs, TIME_SCALE)
    # a warm-up request far longer than the test (20,000 tokens ≈ 178 seed s), then more
    warmup = (PlannedRequest(0.0, 10, 20000), PlannedRequest(50.0, 10, 5))
    async with aiohttp.ClientSession() as session:
        sending = run_open_loop(session, router.url, "m", WINDOW, time_scale=TIME_SCALE,
                                drain_s=5.0, sample_interval_s=0.01, warmup=warmup,
                                warmup_s=60.0)  # fmt: skip
        task = asyncio.create_task(sending)
        await until(lambda: _inflight(router) == 1, "the router to hold the warm-up's request")
        task.cancel()
        await asyncio.wait({task})
        assert task.cancelled()
        # the sender's own tasks (requests, the sampler) are gone with it
        assert asyncio.all_tasks() == {asyncio.current_task()}
    wait_for(lambda: _inflight(router) == 0, timeout_s=10,
             what="the router to release the cancelled warm-up request")  # fmt: skip
