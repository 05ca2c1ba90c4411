"""``inflight bench router``: the router against its peers, side by side, in one run.

Targets, each in front of the same upstream(s):

* ``direct``      – no proxy (the harness's own ceiling);
* ``inflight``    – ``inflight router`` (one process, its default httptools upstream client);
* ``inflight/aiohttp`` – the same with ``--upstream-client aiohttp`` (one shared
  ``aiohttp.ClientSession``), the first design, measured beside it;
* ``nginx``       – Debian's nginx, ``least_conn``, upstream keep-alive, one worker;
* ``vllm-router`` – PyPI's Rust balancer (``--vllm-router-bin``), round robin.

Scenarios (figures printed, and written as JSON to ``--out``):

1. capacity: requests/s at concurrency 64 against an upstream that answers at once
   (nginx ``return 200``), measured with ``wrk`` (so the load generator is not the
   bottleneck);
2. added latency: an upstream answering in 50 ms, concurrency 64 (``wrk --latency``);
3. streaming: 256 concurrent SSE streams of 100 events 10 ms apart (~1 s each), closed
   loop, from this process's asyncio client: events/s delivered and stream-time p50/p99;
4. balance quality: 2 emulators × 4 slots, 16 closed-loop clients, router with
   least-outstanding against random dispatch: latency p50/p95.

``--ab A B`` compares two commits' routers instead, side by side with the peers, in
interleaved rounds (:mod:`inflight.bench.components.ab`).

Needs ``wrk`` and ``nginx`` (``apt-get install -y --no-install-recommends wrk nginx``);
a missing peer is skipped and said so. Every process is started in its own process group
and stopped by PID. (Until 2026-12-01 this was ``scripts/bench_router.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from inflight.bench.components.load import closed_loop, streams
from inflight.bench.components.nginx import nginx_binary, start_nginx_static
from inflight.bench.components.procs import (
    Stack,
    start_emulators,
    start_inflight,
)
from inflight.bench.components.proxies import Start, started_proxies
from inflight.bench.components.upstream import start_upstream
from inflight.bench.components.wrk import run_wrk

Results = dict[str, dict[str, float]]
#: (--scenarios key, name in the JSON); run in this order.
SCENARIOS = (
    ("capacity", "capacity"),
    ("latency", "latency_50ms"),
    ("streaming", "streaming"),
    ("balance", "balance"),
)


@dataclass
class Options:
    duration_s: float
    vllm_router_bin: str | None
    aiohttp_peer: bool
    nginx: bool
    wrk: bool
    emulator_time_scale: float
    balance_requests: int


def proxies(
    stack: Stack, opts: Options, upstreams: list[str]
) -> contextlib.AbstractContextManager[dict[str, str]]:
    """Start every peer in front of ``upstreams``; yield {name: url}; stop them."""
    ours: list[tuple[str, Start]] = [("inflight", lambda: start_inflight(stack, upstreams))]
    if opts.aiohttp_peer:
        ours.append(
            ("inflight/aiohttp", lambda: start_inflight(stack, upstreams, client="aiohttp"))
        )
    return started_proxies(stack, upstreams, ours, opts.nginx, opts.vllm_router_bin)


def scenario_capacity(stack: Stack, opts: Options) -> Results:
    upstream = start_nginx_static(stack) if opts.nginx else start_upstream(stack, "instant")
    out = {}
    with proxies(stack, opts, [upstream]) as urls:
        for name, url in urls.items():
            out[name] = run_wrk(url, 64, opts.duration_s, stack.workdir)
            print(f"  capacity {name:16s} {out[name]['rps']:9.0f} req/s", flush=True)
    return out


def scenario_latency(stack: Stack, opts: Options) -> Results:
    upstream = start_upstream(stack, "delay", delay_s=0.05)
    out = {}
    with proxies(stack, opts, [upstream]) as urls:
        for name, url in urls.items():
            out[name] = run_wrk(url, 64, opts.duration_s, stack.workdir)
            r = out[name]
            print(f"  50ms     {name:16s} p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms",
                  flush=True)  # fmt: skip
    return out


def scenario_streaming(stack: Stack, opts: Options) -> Results:
    upstream = start_upstream(stack, "sse", events=100, interval_s=0.01)
    out = {}
    with proxies(stack, opts, [upstream]) as urls:
        for name, url in urls.items():
            out[name] = asyncio.run(streams(url, 256, opts.duration_s))
            r = out[name]
            print(f"  stream   {name:16s} {r['events_per_s']:8.0f} events/s  event delay p50 "
                  f"{r['event_delay_p50_ms']:6.2f} ms  p99 {r['event_delay_p99_ms']:6.2f} ms  "
                  f"stream p50 {r['p50_ms']:7.1f} ms  fail {r['failures']:.0f}",
                  flush=True)  # fmt: skip
    return out


def scenario_balance(stack: Stack, opts: Options) -> Results:
    emulators = [url for url, _ in start_emulators(stack, 2, opts.emulator_time_scale)]
    body = {"model": "m", "prompt": "summarize the meeting", "max_tokens": 300}
    out = {}
    for dispatch in ("least-outstanding", "random"):
        url, proc = start_inflight(stack, emulators, dispatch=dispatch)
        asyncio.run(closed_loop(url, 8, 16, body))  # warm-up: the emulators' cold start
        out[dispatch] = r = asyncio.run(closed_loop(url, 16, opts.balance_requests, body))
        print(f"  balance  {dispatch:18s} p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms"
              f"  {r['rps']:.1f} req/s", flush=True)  # fmt: skip
        stack.stop(proc)
    return out


RUNNERS: dict[str, Callable[[Stack, Options], Results]] = {
    "capacity": scenario_capacity,
    "latency": scenario_latency,
    "streaming": scenario_streaming,
    "balance": scenario_balance,
}


def print_table(results: dict[str, Results]) -> None:
    print("\n== router benchmark (this machine, one run) ==")
    cap = results.get("capacity", {})
    if cap:
        print("capacity, c=64, upstream answers at once (wrk): requests/s")
        for name, r in cap.items():
            print(f"  {name:16s} {r['rps']:9.0f}   (non-2xx {r['non_2xx']:.0f})")
    lat = results.get("latency_50ms", {})
    if lat:
        base = lat["direct"]
        print("added latency, upstream 50 ms, c=64 (wrk): p50 / p99, added vs direct")
        for name, r in lat.items():
            add50 = r["p50_ms"] - base["p50_ms"]
            add99 = r["p99_ms"] - base["p99_ms"]
            print(f"  {name:16s} p50 {r['p50_ms']:7.2f} ms (+{add50:6.2f})"
                  f"  p99 {r['p99_ms']:7.2f} ms (+{add99:6.2f})")  # fmt: skip
    st = results.get("streaming", {})
    if st:
        base = st["direct"]
        print("streaming, 256 streams x 100 events 10 ms apart: events/s; each event's "
              "delay (upstream write to client arrival), added vs direct; time to first "
              "event; stream time")  # fmt: skip
        for name, r in st.items():
            add50 = r["event_delay_p50_ms"] - base["event_delay_p50_ms"]
            add99 = r["event_delay_p99_ms"] - base["event_delay_p99_ms"]
            t50 = r["ttfb_p50_ms"] - base["ttfb_p50_ms"]
            t99 = r["ttfb_p99_ms"] - base["ttfb_p99_ms"]
            print(f"  {name:16s} {r['events_per_s']:8.0f} ev/s  event p50 "
                  f"{r['event_delay_p50_ms']:6.2f} ms (+{add50:5.2f})  p99 "
                  f"{r['event_delay_p99_ms']:6.2f} ms (+{add99:5.2f})  first event p50 "
                  f"{r['ttfb_p50_ms']:6.1f} ms (+{t50:5.1f})  p99 {r['ttfb_p99_ms']:6.1f} ms "
                  f"(+{t99:5.1f})  stream p50/p99 {r['p50_ms']:5.0f}/{r['p99_ms']:5.0f} ms  "
                  f"failures {r['failures']:.0f}")  # fmt: skip
    bal = results.get("balance", {})
    if bal:
        print("balance, 2 emulators x 4 slots, 16 closed-loop clients: latency")
        for name, r in bal.items():
            print(f"  {name:18s} p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms  "
                  f"{r['rps']:.1f} req/s ({r['requests']:.0f} requests)")  # fmt: skip


def default_out() -> Path:
    """``results/local/bench_router-<UTC time>.json`` under the working directory."""
    return (
        Path("results") / "local" / time.strftime("bench_router-%Y%m%dT%H%M%SZ.json", time.gmtime())
    )


def main(args: argparse.Namespace) -> int:
    have_wrk = shutil.which("wrk") is not None
    have_nginx = nginx_binary() is not None
    vr = (
        args.vllm_router_bin
        if args.vllm_router_bin and Path(args.vllm_router_bin).exists()
        else None
    )
    if not have_nginx:
        print("nginx not installed: skipped (apt-get install -y --no-install-recommends nginx)")
    if vr is None:
        print(
            "vllm-router not found: skipped (python3 -m venv /tmp/vr-venv && "
            "/tmp/vr-venv/bin/pip install vllm-router==0.1.17, or --vllm-router-bin)"
        )
    opts = Options(
        duration_s=args.duration_s,
        vllm_router_bin=vr,
        aiohttp_peer=not args.no_aiohttp_peer,
        nginx=have_nginx,
        wrk=have_wrk,
        emulator_time_scale=args.emulator_time_scale,
        balance_requests=args.balance_requests,
    )
    wanted = set(args.scenarios)
    if getattr(args, "ab", None):
        from inflight.bench.components import ab

        if not have_wrk and wanted & {"capacity", "latency"}:
            print("wrk not installed: capacity and latency skipped "
                  "(apt-get install -y --no-install-recommends wrk)")  # fmt: skip
            args.scenarios = [s for s in args.scenarios if s not in ("capacity", "latency")]
        return ab.main(args, vr, have_nginx)
    if not have_wrk and wanted & {"capacity", "latency"}:
        print("wrk not installed: capacity and latency skipped "
              "(apt-get install -y --no-install-recommends wrk)")  # fmt: skip
        wanted -= {"capacity", "latency"}
    out_path: Path = args.out or default_out()
    if out_path.exists():
        print(f"inflight bench router: error: {out_path} exists; results are never "
              "overwritten (pass another --out)", file=sys.stderr)  # fmt: skip
        return 2
    results: dict[str, Results] = {}
    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp:
        stack = Stack(Path(tmp))
        try:
            for key, name in SCENARIOS:
                if key in wanted:
                    print(f"== {name}", flush=True)
                    results[name] = RUNNERS[key](stack, opts)
                    stack.stop_all()  # upstreams of this scenario
        finally:
            stack.stop_all()
    print_table(results)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"cpus": os.cpu_count(), "duration_s": args.duration_s, "options": asdict(opts),
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    out_path.write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    print(f"\nwritten: {out_path}")
    return 0
