"""The open-loop sender: every planned request goes out at its time, whatever the system does.

Each :class:`inflight.workload.trace.PlannedRequest` is sent at ``t0 + t_s × time_scale`` (wall),
streaming, through :func:`inflight.bench.loadgen.send_one` (the benchmark's one sender), so a slow
or full system does not slow the arrivals down, as in production (issue #13). The body is a
completion whose ``prompt`` is a list of exactly ``prompt_tokens`` token ids (vLLM and the
emulator count a token-id prompt exactly; text would be an estimate) with ``max_tokens``
and ``ignore_eos`` (vLLM's sampling parameter: the answer has exactly ``max_tokens``
tokens; the emulator always stops at ``max_tokens`` when one is given, and ignores the
field, as vLLM's request models ignore unknown fields).

The end of the traffic is ``end_s`` (the schedule's duration; the last ``t_s`` for a
trace). A request still open ``drain_s`` seed seconds after it is cancelled (the client
closes its connection, so the router frees its slot) and recorded ``unfinished``. Every
request sent is in :attr:`OpenLoopRun.sent`, finished or not: nothing is left out.

While it runs, the router's ``/router/status`` is sampled (:class:`inflight.bench.sampler.
RouterSampler`) for the Little's Law check on open-loop data (:func:`littles_law`).

**A trace window's warm-up** (``--trace-warmup-s``, ``OpenLoopPlan.warmup``): its requests
are sent first, at the same time-scale, over the ``warmup_s`` seed seconds that end at the
window's start (seed 0 = ``t0``): warm-up request ``t`` at ``t0 + (t − warmup_s) ×
time_scale`` (:func:`send_order`). They are real requests to the stack, awaited (or
cancelled at the drain limit) with the window's, and kept apart in
:attr:`OpenLoopRun.warmup`: never among the measured :attr:`OpenLoopRun.sent`
(:mod:`inflight.measure.warmup`). An interrupt at any point cancels every request started,
warm-up's too, and stops the sampler before it propagates.

The aiohttp session is passed in by the wiring site (``inflight.bench.openloop.run``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from inflight.bench.loadgen import send_one
from inflight.bench.sampler import RouterSampler
from inflight.measure.records import RequestRecord, RouterSample
from inflight.measure.stats import littles_law_error, time_average
from inflight.measure.warmup import carried_in_flight_s, window_l
from inflight.workload.trace import PlannedRequest

# A token id every vocabulary has (Qwen's, Llama's, GPT-2's: well below their sizes); the
# prompt's content does not matter to the emulator, and to vLLM only its length does here.
PROMPT_TOKEN_ID = 1000

UNFINISHED_ERROR = "unfinished: still open at the drain limit, cancelled"


def completion_body(model: str, request: PlannedRequest) -> dict[str, Any]:
    """The JSON body for one planned request: exact prompt length, fixed answer length;
    its ``priority`` (vLLM's, the router's ``--priority-class``) when it has one."""
    body = {
        "model": model,
        "prompt": [PROMPT_TOKEN_ID] * request.prompt_tokens,
        "max_tokens": request.max_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.priority:
        body["priority"] = request.priority
    return body


@dataclass(frozen=True)
class SentRequest:
    """One planned request as sent: when it was due (wall) and what the client saw."""

    index: int  # position in the plan
    planned: PlannedRequest
    due_t: float  # unix seconds it was due: t0 + t_s × time_scale
    record: RequestRecord
    unfinished: bool  # still open at the drain limit, cancelled


@dataclass(frozen=True)
class OpenLoopRun:
    """What one open-loop run measured: raw, in wall time (unix seconds)."""

    t0: float  # unix seconds of seed time 0
    time_scale: float
    end_s: float  # seed seconds: the end of the traffic (the drain limit counts from here)
    drain_s: float
    sent: tuple[SentRequest, ...]  # in plan order: the window's, the measured ones
    samples: tuple[RouterSample, ...]
    sample_errors: int
    end_t: float  # unix seconds the window's last request ended (or was cancelled)
    # the trace warm-up's requests (in their plan order; due before t0), not measured
    warmup: tuple[SentRequest, ...] = ()
    warmup_s: float = 0.0  # seed s the warm-up lasted, ending at t0

    @property
    def send_lag_s(self) -> list[float]:
        """Wall seconds each request left after it was due (the sender's own lateness)."""
        return [s.record.start_t - s.due_t for s in self.sent]


def send_order(
    warmup: Sequence[PlannedRequest], requests: Sequence[PlannedRequest], warmup_s: float
) -> list[tuple[float, bool, int]]:
    """When each request is due, seed seconds from the window's start (pure): ``(due_s,
    is_warmup, index)``, the warm-up's first (``t − warmup_s``: from ``−warmup_s`` to 0),
    then the window's (``t_s``), each in its plan order. ValueError for requests out of
    order or a warm-up request outside its ``warmup_s``."""
    if not (warmup_s >= 0):
        raise ValueError(f"--trace-warmup-s: must be >= 0, got {warmup_s}")
    for name, reqs in (("planned", requests), ("warm-up", warmup)):
        if any(b.t_s < a.t_s for a, b in itertools.pairwise(reqs)):
            raise ValueError(f"{name} requests must be in order of t_s")
    if any(not 0.0 <= w.t_s <= warmup_s for w in warmup):
        raise ValueError(f"the warm-up's requests must lie within its {warmup_s:g} s")
    return [(w.t_s - warmup_s, True, i) for i, w in enumerate(warmup)] + [
        (r.t_s, False, i) for i, r in enumerate(requests)
    ]


async def run_open_loop(
    session: aiohttp.ClientSession,
    router_url: str,
    model: str,
    requests: Sequence[PlannedRequest],
    *,
    time_scale: float,
    drain_s: float,
    end_s: float | None = None,
    path: str = "/v1/completions",
    sample_interval_s: float = 0.1,
    on_done: Callable[[RequestRecord], None] | None = None,
    warmup: Sequence[PlannedRequest] = (),
    warmup_s: float = 0.0,
) -> OpenLoopRun:
    """Send ``warmup`` over the ``warmup_s`` seed s before the window (module docstring),
    then every request at its time; wait for the open ones (the warm-up's too) up to
    ``drain_s`` (seed s) after ``end_s`` (default: the last ``t_s``), then cancel them;
    return everything."""
    if time_scale <= 0:
        raise ValueError(f"--time-scale must be > 0, got {time_scale}")
    if drain_s < 0:
        raise ValueError(f"--drain-s must be >= 0, got {drain_s}")
    if not requests:
        raise ValueError("no request to send")
    order = send_order(warmup, requests, warmup_s)
    last_s = requests[-1].t_s
    end = last_s if end_s is None else max(end_s, last_s)
    url = router_url.rstrip("/") + path
    # Long enough that the drain limit, not the client timeout, ends a slow request.
    timeout_s = (warmup_s + end + drain_s) * time_scale + 60.0
    # keys: (is_warmup, index in its plan)
    started: dict[tuple[bool, int], float] = {}
    records: dict[tuple[bool, int], RequestRecord] = {}

    async def one(key: tuple[bool, int], req: PlannedRequest) -> None:
        started[key] = time.time()
        # encoded when sent (a long plan's token-id prompts would take tens of MB at once)
        payload = json.dumps(completion_body(model, req)).encode()
        record = await send_one(session, url, payload, timeout_s)
        records[key] = record
        if on_done is not None:
            on_done(record)

    sampler = RouterSampler(session, router_url, sample_interval_s).start()
    tasks: dict[tuple[bool, int], asyncio.Task[None]] = {}
    t0 = time.time() + warmup_s * time_scale  # seed 0: the window's start
    try:
        for due_s, is_warmup, i in order:
            delay = t0 + due_s * time_scale - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            req = warmup[i] if is_warmup else requests[i]
            tasks[is_warmup, i] = asyncio.create_task(one((is_warmup, i), req))
        deadline = t0 + (end + drain_s) * time_scale
        pending = {t for t in tasks.values() if not t.done()}
        if pending:
            await asyncio.wait(pending, timeout=max(0.0, deadline - time.time()))
    finally:  # also on an interrupt: nothing started is left open
        cancelled_t = time.time()
        for task in tasks.values():
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        await sampler.stop()

    def as_sent(is_warmup: bool, plan: Sequence[PlannedRequest]) -> list[SentRequest]:
        out = []
        shift_s = -warmup_s if is_warmup else 0.0
        for i, req in enumerate(plan):
            due = t0 + (req.t_s + shift_s) * time_scale
            key = (is_warmup, i)
            if key in records:
                out.append(SentRequest(i, req, due, records[key], False))
            elif key in started:  # cancelled at the drain limit
                rec = RequestRecord(started[key], cancelled_t, None, 0, False, UNFINISHED_ERROR)
                out.append(SentRequest(i, req, due, rec, True))
        return out

    sent = as_sent(False, requests)
    end_t = max((s.record.end_t for s in sent), default=t0)
    return OpenLoopRun(
        t0=t0,
        time_scale=time_scale,
        end_s=end,
        drain_s=drain_s,
        sent=tuple(sent),
        samples=tuple(sampler.samples),
        sample_errors=sampler.errors,
        end_t=end_t,
        warmup=tuple(as_sent(True, warmup)),
        warmup_s=warmup_s,
    )


def littles_law(run: OpenLoopRun) -> dict[str, Any]:
    """Router L against the client's λ·W over the window (pure).

    The window is [t0, end of the window's last request], so every measured request sent
    lies inside it: λ counts them all (failed and cancelled ones too: they were in the
    system), W is their mean time in the system, and λ·W is then exactly the client's
    time-averaged number in flight, which the router's time-averaged L must match
    (``inflight.measure.stats``). The router's L also counts the warm-up's requests still
    open after t0; their share (``l_warmup_carried``, :mod:`inflight.measure.warmup`, as the
    simulator takes it out) is taken out of ``l_router``. Seed units.
    """
    s = run.time_scale
    if run.end_t <= run.t0 or not run.sent:
        return {"l_router": None, "lambda_rps": None, "w_s": None, "error": None, "samples": 0}
    window_s = (run.end_t - run.t0) / s
    lam = len(run.sent) / window_s
    w = sum(x.record.latency_s for x in run.sent) / len(run.sent) / s
    l_all = time_average(run.samples, run.t0, run.end_t)
    carried = carried_in_flight_s(
        ((x.record.start_t, x.record.end_t) for x in run.warmup), run.t0, run.end_t
    )
    l_router = window_l(l_all, carried, run.end_t - run.t0)
    inside = sum(1 for x in run.samples if run.t0 <= x.t <= run.end_t)
    err = None if l_router is None else littles_law_error(l_router, lam, w)
    out = {
        "l_router": l_router,
        "lambda_rps": lam,
        "w_s": w,
        "lambda_w": lam * w,
        "error": err,
        "window_s": window_s,
        "samples": inside,
    }
    if run.warmup:
        out["l_warmup_carried"] = carried / (run.end_t - run.t0)
    return out


def replica_points(
    rows: Sequence[Mapping[str, Any]], t0: float, time_scale: float
) -> tuple[list[tuple[float, int]], list[tuple[float, int]], str]:
    """``timeline.jsonl`` rows → (live points, desired points, the field live came from),
    in seed seconds from ``t0``. ``live`` (replicas that exist: starting, ready, draining,
    stopping) is what replica-seconds integrate; a timeline written before it existed has
    only ``ready``, which is then used (and named, so the report says so)."""
    has_live = bool(rows) and all("live" in r for r in rows)
    field = "live" if has_live else "ready"
    live: list[tuple[float, int]] = []
    desired: list[tuple[float, int]] = []
    for r in rows:
        t_s = (float(r["t"]) - t0) / time_scale
        live.append((t_s, int(r[field])))
        desired.append((t_s, int(r["desired"])))
    return live, desired, field
