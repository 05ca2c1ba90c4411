"""One sweep against a running router: warm-up, then closed-loop levels with idle gaps
(what to send: :mod:`inflight.workload.sweep`).

The imperative shell around the pure parts: it runs the load generator and the router
sampler in one event loop, marks CPU, and returns raw ``LevelWindow`` values; figures are
computed by ``stats`` and judged by ``validity``. All configured durations are *seed*
seconds and are multiplied by the time-scale here, at the edge.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from inflight.bench import cpu
from inflight.bench.loadgen import LevelPlan, closed_loop
from inflight.bench.sampler import RouterSampler
from inflight.measure.records import LevelWindow, RequestRecord, WarmupResult
from inflight.workload.meeting import meeting_transcript
from inflight.workload.sweep import Level, SweepConfig

ProgressFactory = Callable[[str, int | None], Callable[[RequestRecord], None]]


def _no_progress(_label: str, _total: int | None) -> Callable[[RequestRecord], None]:
    return lambda _r: None


async def run_sweep(
    session: aiohttp.ClientSession,
    cfg: SweepConfig,
    progress: ProgressFactory = _no_progress,
) -> tuple[WarmupResult | None, list[LevelWindow], RouterSampler]:
    """Warm up (unmeasured), then run each level; the sampler polls L throughout."""
    url = cfg.router_url.rstrip("/") + cfg.workload.path
    transcript = meeting_transcript(cfg.workload.prompt_tokens)
    timeout = max(30.0, cfg.wall(cfg.request_timeout_s))
    sampler = RouterSampler(session, cfg.router_url, cfg.sample_interval_wall_s).start()
    try:
        warmup = None
        if cfg.warmup_requests:
            plan = LevelPlan(
                concurrency=min(cfg.warmup_concurrency, cfg.warmup_requests),
                requests=cfg.warmup_requests,
                body=cfg.workload.body(transcript),
                timeout_s=timeout,
            )
            recs = await closed_loop(session, url, plan, progress("warm-up", cfg.warmup_requests))
            ok = sum(1 for r in recs if r.ok)
            warmup = WarmupResult(
                requested=cfg.warmup_requests,
                completed=ok,
                failed=len(recs) - ok,
                finished=len(recs) == cfg.warmup_requests,
            )
            await asyncio.sleep(cfg.wall(cfg.gap_s))
        windows: list[LevelWindow] = []
        for i, level in enumerate(cfg.levels):
            if i:
                await asyncio.sleep(cfg.wall(cfg.gap_s))
            windows.append(
                await _run_level(session, url, cfg, level, transcript, timeout, sampler, progress)
            )
        return warmup, windows, sampler
    finally:
        await sampler.stop()


async def _run_level(
    session: aiohttp.ClientSession,
    url: str,
    cfg: SweepConfig,
    level: Level,
    transcript: str,
    request_timeout_wall_s: float,
    sampler: RouterSampler,
    progress: ProgressFactory,
) -> LevelWindow:
    level_t0 = time.time()
    stop_after = None if level.duration_s is None else level_t0 + cfg.wall(level.duration_s)
    plan = LevelPlan(
        concurrency=level.concurrency,
        requests=level.requests,
        body=cfg.workload.body(transcript, level.max_tokens),
        timeout_s=request_timeout_wall_s,
        stop_after_t=stop_after,
        schedule=tuple(
            (level_t0 + cfg.wall(offset_s), cfg.workload.body(transcript, max_tokens))
            for offset_s, max_tokens in level.schedule
        ),
    )
    label = f"c={level.concurrency}" + (
        f" max_tokens={level.max_tokens}" if level.max_tokens != cfg.workload.max_tokens else ""
    )
    before = cpu.mark()
    records = await closed_loop(session, url, plan, progress(label, level.requests))
    after = cpu.mark()
    # A last sample after the final completion closes the window on the router side too.
    await asyncio.sleep(min(cfg.sample_interval_wall_s * 2, 0.5))
    start_t = min(r.start_t for r in records)
    end_t = max(r.end_t for r in records)
    proc_s, busy = cpu.since(before, after)
    return LevelWindow(
        concurrency=level.concurrency,
        start_t=start_t,
        end_t=end_t,
        records=tuple(records),
        samples=sampler.between(start_t, end_t),
        cpu_loadgen_s=proc_s,
        cpu_machine_busy=busy,
    )
