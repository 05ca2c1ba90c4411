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
from inflight.bench.closedloop.runner import build_result, write_result
from inflight.bench.closedloop.sweep import Level, SweepConfig, run_sweep, sweep_levels
from inflight.bench.progress import Bars
from inflight.measure.results import ResultFileExists, RunResult, check_writable
from inflight.procs import pid_alive
from inflight.workload.meeting import DEFAULT_MAX_TOKENS, DEFAULT_PROMPT_TOKENS, Workload


class BenchError(RuntimeError):
    """A run cannot start: the message names the flag or file at fault."""


async def discover_model(session: aiohttp.ClientSession, router_url: str) -> str:
    url = router_url.rstrip("/") + "/v1/models"
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            resp.raise_for_status()
            doc = await resp.json(content_type=None)
        return str(doc["data"][0]["id"])
    except (aiohttp.ClientError, TimeoutError, KeyError, IndexError, TypeError, ValueError) as exc:
        raise BenchError(f"cannot read the model name from {url} ({exc}); pass --model") from exc


def sweep_config(
    args: argparse.Namespace,
    router_url: str,
    model: str,
    levels: Sequence[Level],
    time_scale: float,
    gap_s: float | None = None,
) -> SweepConfig:
    """The sweep the closed-loop flags ``args`` (resolved by :func:`closed_loop_args`) ask
    for: the live bench's and ``inflight sim``'s (``inflight.sim.closed_loop.SweepPlan``) one
    reading. ``gap_s``: an override of ``--gap-s`` (the slowing runs pass 0)."""
    return SweepConfig(
        router_url=router_url,
        workload=Workload(
            model=model,
            endpoint=args.endpoint,
            prompt_tokens=args.prompt_tokens,
            max_tokens=args.max_tokens,
        ),
        levels=tuple(levels),
        time_scale=time_scale,
        warmup_requests=args.warmup,
        warmup_concurrency=args.warmup_concurrency,
        gap_s=args.gap_s if gap_s is None else gap_s,
        sample_interval_wall_s=args.sample_interval_s,
    )


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


def _stack_info(state_dir: Path) -> state.StackInfo:
    """The running stack's ``stack.json``; a file left by a killed run is refused."""
    path = state_dir / state.STACK
    try:
        info = state.read_stack(path)
    except (OSError, ValueError) as exc:
        raise BenchError(
            f"--state-dir: cannot read {path}: {exc} (is `inflight up` running?)"
        ) from exc
    if not pid_alive(info.pid):
        raise BenchError(
            f"--state-dir: {path} was left by an `inflight up` (pid {info.pid}) that is no "
            "longer running; start it again"
        )
    return info


def closed_loop_args(args: argparse.Namespace) -> argparse.Namespace:
    """The closed-loop sweep's view of the flags: ``--prompt-tokens``/``--max-tokens`` are
    one number each there (the open loop also takes distributions); the open-loop-only
    flags are refused."""
    out = argparse.Namespace(**vars(args))
    for flag, attr, default in (("--prompt-tokens", "prompt_tokens", DEFAULT_PROMPT_TOKENS),
                                ("--max-tokens", "max_tokens", DEFAULT_MAX_TOKENS)):  # fmt: skip
        text = getattr(args, attr)
        if text is None:
            setattr(out, attr, default)
            continue
        try:
            value = int(text)
        except ValueError:
            raise BenchError(
                f"{flag}: the closed-loop sweep takes one number, got {text!r} "
                "(distributions need open-loop mode: --arrivals or --trace)"
            ) from None
        if value < 1:
            raise BenchError(f"{flag}: must be >= 1, got {value}")
        setattr(out, attr, value)
    for flag, attr in (("--seed", "seed"), ("--slo-ttft-s", "slo_ttft_s"),
                       ("--slo-tpot-s", "slo_tpot_s"), ("--drain-s", "drain_s")):  # fmt: skip
        if getattr(args, attr, None) is not None:
            raise BenchError(f"{flag}: open-loop only (give --arrivals or --trace)")
    return out


def main(args: argparse.Namespace) -> int:
    from inflight.workload.plan import is_open_loop

    if is_open_loop(args):
        return open_loop_main(args)
    try:
        args = closed_loop_args(args)
        check_writable([args.results_file, args.summary_file], args.force)
        stack = _stack_info(args.state_dir) if args.state_dir else None
        url = args.url or (stack.router_url if stack else None)
        if not url:
            raise BenchError("give --url (the router) or --state-dir (an `inflight up` state dir)")
        time_scale = args.time_scale or (stack.time_scale if stack else 1.0)
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


def open_loop_main(args: argparse.Namespace) -> int:
    """``inflight bench run --arrivals …|--trace …``: one open-loop run, measured."""
    from inflight.bench.openloop.run import (
        read_timeline_rows,
        run_document,
        run_markdown,
        send_plan,
    )
    from inflight.measure.results import dumps, write_new
    from inflight.workload.plan import plan_from_args

    try:
        plan = plan_from_args(args)
        check_writable([args.results_file, args.summary_file], args.force)
        stack = _stack_info(args.state_dir) if args.state_dir else None
        url = args.url or (stack.router_url if stack else None)
        if not url:
            raise BenchError("give --url (the router) or --state-dir (an `inflight up` state dir)")
        time_scale = args.time_scale or (stack.time_scale if stack else 1.0)
        run, model = asyncio.run(
            send_plan(
                router_url=url,
                plan=plan,
                time_scale=time_scale,
                model=args.model,
                sample_interval_s=args.sample_interval_s,
                progress=not args.no_progress,
            )
        )
        rows = read_timeline_rows(args.state_dir / state.TIMELINE if args.state_dir else None)
        doc = run_document(
            run,
            plan,
            rows,
            policy=args.policy or (stack.policy if stack else None),
            frozen=args.frozen,
            url=url,
            model=model,
            created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        write_new(args.results_file, dumps(doc), args.force)
        md = run_markdown(doc)
        if args.summary_file is not None:
            write_new(args.summary_file, md, args.force)
    except (BenchError, ResultFileExists, ValueError) as exc:
        print(f"inflight bench run: {exc}", file=sys.stderr)
        return 2
    if args.plot_dir is not None:
        from inflight.measure.plots import openloop_timeseries_plot

        label = doc.get("policy") or "run"
        openloop_timeseries_plot(
            {label: doc}, args.plot_dir / f"{args.results_file.stem}-timeseries.png"
        )
    print(md)
    return 0 if doc["valid"] else 1
