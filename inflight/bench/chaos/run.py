"""``inflight bench chaos``: the whole stack under open-loop load, one fault after another.

It starts ``inflight up`` (1 to ``--max-replicas`` emulator replicas, the saturation
policy, ``--time-scale``), then for each fault in ``--faults``:

1. starts the open-loop load (:mod:`inflight.bench.chaos.load`; at ``--surge-base`` ×
   ``--rate`` before a surge fault, which raises it to ``--surge-factor`` × ``--rate``) and
   waits until the stack has settled (ready = desired, unchanged for ``--settle-s`` seed
   seconds);
2. injects the fault (:mod:`inflight.bench.chaos.faults`) and waits until the stack serves as
   before it (``time_to_recover_s``), keeps the load on ``--after-s`` seed seconds more;
3. stops the load, waits for every request to end, and checks that the routers' L and
   every replica's running + waiting are back to 0 (``leaked_slots``; a router or replica
   that does not answer is named, not counted as 0) and that no process of the fault or
   untracked by the stack is left (``orphans``).

A fault fails the bar when it was not tested cleanly, too: the stack had not settled
before it, the leak check could not read a router or replica, requests were still open
after the drain, a scale-down had no evidence, or a surge raised no replica count
(:func:`inflight.bench.chaos.model.bar_failures`).

Then it stops the stack and proves every PID it saw is gone. The figures come from
:mod:`inflight.bench.chaos.model` (pure), the files from :mod:`inflight.bench.chaos.report`:
``DIR/chaos.json``, ``DIR/chaos.md``. Exit code 0 when the bar is met, 1 when it is
missed (the failures are printed), 2 when the run could not be made.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from inflight.bench.chaos import probe
from inflight.bench.chaos.ctx import Ctx
from inflight.bench.chaos.faults import FAULTS, SURGE_FAULTS, FaultError, Injected
from inflight.bench.chaos.load import OpenLoop
from inflight.bench.chaos.model import FaultWindow, Sample, bar_failures, fault_report, scale_downs
from inflight.bench.chaos.report import chaos_json, chaos_markdown
from inflight.bench.stack import Stack, StackError
from inflight.control.trigger import format_overrides
from inflight.measure.results import ResultFileExists, dumps, new_out_dir, write_new
from inflight.planes.policy_catalogue import Policy
from inflight.statedir import read_jsonl, read_timeline
from inflight.workload.meeting import Workload, meeting_transcript


async def _sampler(ctx: Ctx) -> None:
    """L summed over the routers in use, the stack router's ready count, every 0.25 s."""
    while True:
        docs = [
            await probe.router_status(ctx.session, ctx.load.router_urls[i])
            for i in list(ctx.active_routers)
        ]
        first = docs[0] if docs else None
        if first is not None:
            ctx.samples.append(
                Sample(
                    t=time.time(),
                    inflight=sum(int(d.get("inflight", 0)) for d in docs if d)
                    + sum(ctx.frozen.values()),
                    ready=sum(1 for e in first.get("endpoints", []) if e.get("state") == "ready"),
                    slots=int(first.get("slots_per_endpoint", ctx.slots)),
                )
            )
        await asyncio.sleep(0.25)


async def _settle(ctx: Ctx) -> bool:
    """Until ready = desired, unchanged for ``--settle-s`` seed seconds (at least two HPA
    syncs at the default), and the routers hold no more than the capacity (saturation < 1:
    nothing left for the scaler to do); False when ``--settle-timeout-s`` passes first."""
    hold_s = ctx.wall(ctx.args.settle_s)
    deadline = time.monotonic() + ctx.args.settle_timeout_s
    stable_since = time.monotonic()
    last: tuple[int, int] | None = None
    while time.monotonic() < deadline:
        points = read_timeline(ctx.state_dir / "timeline.jsonl")
        desired = points[-1].desired if points else -1
        now = (desired, await ctx.ready())
        sample = ctx.samples[-1] if ctx.samples else None
        saturated = sample is None or sample.inflight >= sample.slots * max(1, sample.ready)
        if now != last or now[0] != now[1] or saturated:
            last, stable_since = now, time.monotonic()
        elif time.monotonic() - stable_since >= hold_s:
            return True
        await asyncio.sleep(0.2)
    return False


async def _until(check: Any, timeout_s: float) -> float | None:
    """Poll the async ``check`` every 0.2 s; the Unix time it first held, or None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await check():
            return time.time()
        await asyncio.sleep(0.2)
    return None


async def _leaks(ctx: Ctx, timeout_s: float) -> tuple[int, dict[str, int], list[str]]:
    """Poll until every router's L and every replica's running + waiting is 0 and each of
    them answered: (the total left, what holds it, what did not answer). A router or
    replica that does not answer is not counted as 0: it is named, and fails the fault."""
    deadline = time.monotonic() + timeout_s
    while True:
        detail: dict[str, int] = {}
        unprobed: list[str] = []
        for i in ctx.active_routers:
            doc = await probe.router_status(ctx.session, ctx.load.router_urls[i])
            if doc is None:
                unprobed.append(f"router-{i} /router/status")
                continue
            detail[f"router-{i} L"] = int(doc.get("inflight", 0))
            for ep in doc.get("endpoints", []):
                label = str(ep["url"]).removeprefix("http://")
                queued = await probe.replica_queue(ctx.session, str(ep["url"]))
                if queued is None:
                    unprobed.append(f"replica {label} /metrics")
                else:
                    detail[f"replica {label}"] = queued
        total = sum(detail.values())
        if (total == 0 and not unprobed) or time.monotonic() >= deadline:
            return total, {k: v for k, v in detail.items() if v}, sorted(set(unprobed))
        await asyncio.sleep(0.2)


async def _phase(ctx: Ctx, name: str, up_pid: int) -> FaultWindow:
    args = ctx.args
    start_t = time.time()
    # A surge needs room to rise: its phase settles at a lower rate first.
    ctx.load.rate_per_s = ctx.rate(args.surge_base if name in SURGE_FAULTS else 1.0)
    print(f"== {name}: load on, settling", file=sys.stderr, flush=True)
    ctx.load.start()
    settled = await _settle(ctx)
    print(f"== {name}: injecting (settled={settled})", file=sys.stderr, flush=True)
    injected: Injected = await FAULTS[name](ctx)
    recovered_t = await _until(injected.recovered, args.recover_timeout_s)
    print(
        f"== {name}: recovered={recovered_t is not None}; load on {args.after_s:g} seed s more",
        file=sys.stderr,
        flush=True,
    )
    if name != "scale-down":
        await asyncio.sleep(ctx.wall(args.after_s))
    await ctx.load.stop()
    notes = list(injected.notes)
    open_after_drain = 0
    if not await ctx.load.drain(args.drain_timeout_s):
        open_after_drain = ctx.load.inflight
        notes.append(f"{open_after_drain} request(s) still open after {args.drain_timeout_s} s")
    leaked, detail, unprobed = await _leaks(ctx, args.leak_timeout_s)
    gone = await _until(lambda: _true(not probe.alive_groups(injected.groups)), args.leak_timeout_s)
    orphans = [] if gone else probe.alive_groups(injected.groups)
    orphans += probe.untracked(up_pid, ctx.state_dir)
    return FaultWindow(
        fault=name,
        start_t=start_t,
        injected_t=injected.injected_t,
        released_t=injected.released_t,
        recovered_t=recovered_t,
        end_t=time.time(),
        faulted_endpoints=injected.endpoints,
        faulted_router=injected.router,
        signalled_t=injected.signalled_t,
        leaked_slots=leaked,
        leaked_detail=detail,
        unprobed=tuple(unprobed),
        open_after_drain=open_after_drain,
        orphans=tuple(orphans),
        notes=tuple(notes),
        settled=settled,
        surge=injected.surge,
    )


async def _true(value: bool) -> bool:
    return value


def parse_faults(text: str) -> list[str]:
    """``"kill-replica,scaler-restart"`` → names; errors name ``--faults``."""
    out = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in out if f not in FAULTS]
    if unknown or not out:
        raise ValueError(f"--faults: unknown {unknown or text!r}; known: {', '.join(FAULTS)}")
    if len(set(out)) != len(out):
        raise ValueError(f"--faults: a fault is listed twice in {text!r}")
    return out


async def _run(args: argparse.Namespace, stack: Stack, faults: list[str]) -> dict[str, Any]:
    ts = args.time_scale
    from inflight.emulator.cli import DEFAULT_MODEL

    workload = Workload(
        model=args.model or DEFAULT_MODEL,
        prompt_tokens=args.prompt_tokens,
        max_tokens=args.max_tokens,
    )
    transcript = meeting_transcript(args.prompt_tokens)
    payload = json.dumps(workload.body(transcript)).encode()
    long_payload = json.dumps(workload.body(transcript, args.long_max_tokens)).encode()
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        load = OpenLoop(
            session, [stack.router_url], payload, args.rate / ts, args.request_timeout_s
        )
        ctx = Ctx(args, stack.info, stack.state_dir, session, load, long_payload, ts, args.slots)
        sampler = asyncio.create_task(_sampler(ctx))
        windows: list[FaultWindow] = []
        try:
            for name in faults:
                windows.append(await _phase(ctx, name, stack.pid))
                stack.snapshot()
        finally:
            await load.stop()
            await load.drain(args.drain_timeout_s)
            sampler.cancel()
            for proc in ctx.extra:
                await asyncio.to_thread(proc.stop)
        end = time.time()
        # Contiguous windows: a scale-down between two faults belongs to the earlier one.
        windows = [
            dataclasses.replace(w, end_t=windows[i + 1].start_t if i + 1 < len(windows) else end)
            for i, w in enumerate(windows)
        ]
    timeline = read_timeline(stack.state_dir / "timeline.jsonl")
    decisions = read_jsonl(stack.state_dir / "decisions.jsonl")
    downs = scale_downs(timeline, decisions, ctx.samples)
    reports = [fault_report(w, load.records, downs, timeline) for w in windows]
    extra_alive = [p.label for p in ctx.extra if p.alive()]
    return {"reports": reports, "extra_alive": extra_alive, "requests": len(load.records)}


def metadata_args(pairs: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """``--scaler-metadata`` for ``inflight up`` (nothing when none).

    >>> metadata_args((("floorWindowSeconds", "300"), ("targetSaturation", "0.9")))
    ('--scaler-metadata', 'floorWindowSeconds=300,targetSaturation=0.9')
    """
    if not pairs:
        return ()
    return ("--scaler-metadata", format_overrides(pairs))


def main(args: argparse.Namespace) -> int:
    try:
        faults = parse_faults(args.faults)
        if SURGE_FAULTS & set(faults) and not args.surge_factor > args.surge_base:
            raise ValueError(
                f"--surge-factor ({args.surge_factor:g}) must be above --surge-base "
                f"({args.surge_base:g}): a surge raises the load"
            )
        out = new_out_dir(args.out_dir, "results", args.force)
        state_dir: Path = args.state_dir or Path("state") / "bench" / f"{out.name}-chaos"
    except (ValueError, ResultFileExists) as exc:
        print(f"inflight bench chaos: {exc}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    t0 = time.monotonic()
    stack = Stack(
        policy=Policy("saturation", "saturation", 1),
        state_dir=state_dir.resolve(),
        time_scale=args.time_scale,
        max_replicas=args.max_replicas,
        extra_args=(
            *("--min-replicas", "1", "--slots-per-replica", str(args.slots)),
            *metadata_args(args.scaler_metadata),
        ),
    )
    try:
        stack.start(args.stack_timeout_s)
    except StackError as exc:
        print(f"inflight bench chaos: {exc}", file=sys.stderr)
        return 2
    result: dict[str, Any] | None = None
    try:
        result = asyncio.run(_run(args, stack, faults))
    except FaultError as exc:
        print(f"inflight bench chaos: {exc}", file=sys.stderr)
    finally:
        stop_report = stack.stop()
    if result is None:
        return 2
    final_orphans = [f"pid {p}" for p in stop_report.get("pids_left_after_stop", [])]
    final_orphans += [f"port {p} busy" for p in stop_report.get("ports_busy_after_stop", [])]
    final_orphans += result["extra_alive"]
    failures = bar_failures(result["reports"], final_orphans)
    meta = {
        "created_at": started.isoformat(timespec="seconds"),
        "command": ["inflight", *sys.argv[1:]],
        "time_scale": args.time_scale,
        "rate_seed_per_s": args.rate,
        "wall_s": round(time.monotonic() - t0, 1),
        "requests": result["requests"],
        "state_dir": str(state_dir),
        "stack_stop": stop_report,
        "units": "time_to_recover_s: wall seconds; --settle-s, --after-s, --hang-s, "
        "--prometheus-down-s, --router-missing-s: seed seconds (wall = seed × time-scale)",
    }
    doc = chaos_json(result["reports"], failures, meta)
    write_new(out / "chaos.json", dumps(doc), args.force)
    md = chaos_markdown(doc)
    write_new(out / "chaos.md", md, args.force)
    print(md)
    if failures:
        print("inflight bench chaos: the bar is MISSED:", file=sys.stderr)
        for why in failures:
            print(f"  - {why}", file=sys.stderr)
        return 1
    return 0
