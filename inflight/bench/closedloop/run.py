"""``inflight bench run``: one sweep against a running router, judged and written to files."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from inflight import statedir as state
from inflight.bench.closedloop.sweep import run_sweep
from inflight.bench.progress import Bars
from inflight.bench.target import BenchError, discover_model, router_target
from inflight.measure.results import ResultFileExists, RunResult, check_writable
from inflight.measure.sweep_result import build_result, write_result
from inflight.workload.sweep import Level, closed_loop_args, sweep_config, sweep_levels


async def sweep_to_result(
    *,
    router_url: str,
    time_scale: float,
    levels: Sequence[Level],
    args: argparse.Namespace,
    frozen: bool,
    policy: str | None,
    timeline_path: Path | None,
    progress_prefix: str = "",
    extra: dict[str, Any] | None = None,
    gap_s: float | None = None,
) -> RunResult:
    """Warm up, run the levels, read the replica timeline, judge: one ``RunResult``."""
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:
        model = args.model or await discover_model(session, router_url)
        cfg = sweep_config(args, router_url, model, levels, time_scale, gap_s)
        bars = Bars(prefix=progress_prefix, enabled=not args.no_progress)
        t0 = time.time()
        try:
            warmup, windows, sampler = await run_sweep(session, cfg, bars)
        finally:
            bars.close()
    timeline = state.read_timeline(timeline_path) if timeline_path else []
    return build_result(
        url=router_url,
        time_scale=time_scale,
        frozen=frozen,
        policy=policy,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=["inflight", *sys.argv[1:]],
        warmup=warmup,
        windows=windows,
        timeline=timeline,
        t0=t0,
        extra={
            "model": model,
            "workload": {
                "endpoint": args.endpoint,
                "prompt_tokens": args.prompt_tokens,
                "max_tokens": args.max_tokens,
                "warmup": args.warmup,
                "gap_s": args.gap_s,
            },
            "router_sample_errors": sampler.errors,
            **(extra or {}),
        },
    )


def main(args: argparse.Namespace) -> int:
    """``inflight bench run`` in closed loop (``--arrivals``/``--trace``:
    :func:`inflight.bench.openloop.run.main`)."""
    try:
        args = closed_loop_args(args)
        check_writable([args.results_file, args.summary_file], args.force)
        url, time_scale, stack = router_target(args)
        timeline_path = args.state_dir / state.TIMELINE if args.state_dir else None
        result = asyncio.run(
            sweep_to_result(
                router_url=url,
                time_scale=time_scale,
                levels=sweep_levels(args.concurrency, args.requests, args.max_tokens),
                args=args,
                frozen=args.frozen,
                policy=args.policy or (stack.policy if stack else None),
                timeline_path=timeline_path,
            )
        )
        doc = write_result(result, args.results_file, args.summary_file, args.force)
    except (BenchError, ResultFileExists, ValueError) as exc:
        print(f"inflight bench run: {exc}", file=sys.stderr)
        return 2
    if args.plot_dir is not None:
        from inflight.measure.plots import sweep_plot, timeseries_plot

        stem = args.results_file.stem
        label = doc.get("policy") or "run"
        sweep_plot({label: doc}, args.plot_dir / f"{stem}-sweep.png")
        timeseries_plot({label: doc}, args.plot_dir / f"{stem}-timeseries.png")
    from inflight.measure.table import run_table

    print(run_table(doc))
    return 0 if result.valid else 1
