#!/usr/bin/env python
"""Benchmark the router against its peers, side by side, in one run (not a timed test).

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
   loop, from this script's asyncio client: events/s delivered and stream-time p50/p99;
4. balance quality: 2 emulators × 4 slots, 16 closed-loop clients, router with
   least-outstanding against random dispatch: latency p50/p95.

Usage::

    .venv/bin/python scripts/bench_router.py [--duration-s 8] [--out results/local/x.json]

Needs ``wrk`` and ``nginx`` (``apt-get install -y --no-install-recommends wrk nginx``);
a missing peer is skipped and said so. Every process is started in its own process group
on a free port and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from inflight import ready  # noqa: E402
from inflight.procs import ManagedProcess, free_port  # noqa: E402

PY = sys.executable
POST_BODY = b'{"model":"m","prompt":"hi","max_tokens":1}'
INSTANT_BODY = b'{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"ok"}]}'


# =========================================================================================
# Upstream: a lean HTTP/1.1 keep-alive server (asyncio Protocol), so the upstream is not
# what limits the 50 ms and streaming scenarios. Run as ``bench_router.py upstream ...``.
# =========================================================================================
class _UpstreamProtocol(asyncio.Protocol):
    def __init__(self, server: _Upstream) -> None:
        self.server = server
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.events_left = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.streams.discard(self)
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            length = 0
            m = re.search(r"(?im)^content-length:\s*(\d+)", head)
            if m:
                length = int(m.group(1))
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length :]
            self.handle(head.split(" ", 2)[1] if " " in head else "/")

    def handle(self, path: str) -> None:
        s = self.server
        if path.startswith("/health") or path.startswith("/v1/models") or s.mode == "instant":
            self.reply(INSTANT_BODY if not path.startswith("/health") else b"ok")
        elif s.mode == "delay":
            asyncio.get_running_loop().call_later(s.delay_s, self.reply, INSTANT_BODY)
        else:
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            self.events_left = s.events
            s.streams.add(self)

    def reply(self, body: bytes) -> None:
        if self.transport is not None:
            self.transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(body)).encode()
                + b"\r\n\r\n"
                + body
            )

    def tick(self) -> None:
        if self.transport is None:
            return
        # Each event carries the moment it was written (CLOCK_MONOTONIC, shared by every
        # process on this machine), so the client measures each token's delivery delay.
        event = b'data: {"t":%d,"choices":[{"index":0,"text":"tok"}]}\n\n' % time.monotonic_ns()
        self.events_left -= 1
        if self.events_left <= 0:
            event += b"data: [DONE]\n\n"
            self.server.streams.discard(self)
            self.transport.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
        else:
            self.transport.write(b"%x\r\n%s\r\n" % (len(event), event))


@dataclass
class _Upstream:
    mode: str
    delay_s: float
    events: int
    interval_s: float
    streams: set[_UpstreamProtocol] = field(default_factory=set)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            for stream in list(self.streams):
                stream.tick()


async def _serve_upstream(args: argparse.Namespace) -> None:
    up = _Upstream(args.mode, args.delay_s, args.events, args.interval_s)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _UpstreamProtocol(up), "127.0.0.1", args.port, backlog=4096
    )
    if args.ready_file is not None:
        ready.write(args.ready_file, {"http": server.sockets[0].getsockname()[1]})
    ticker = asyncio.create_task(up.ticker())
    async with server:
        await server.serve_forever()
    ticker.cancel()


# =========================================================================================
# Processes
# =========================================================================================
@dataclass
class Stack:
    """Everything this run started; stopped in reverse order, by PID."""

    workdir: Path
    procs: list[ManagedProcess] = field(default_factory=list)

    def start(
        self, argv: list[str], name: str, ready_url: str, env: dict[str, str] | None = None
    ) -> ManagedProcess:
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = ManagedProcess(
            argv, name=name, env=full_env, log_path=self.workdir / f"{name}.log", grace_s=5.0
        )
        self.procs.append(proc)
        proc.start()
        proc.wait_ready(ready_url, timeout_s=60.0)
        return proc

    def start_ours(
        self, argv: list[str], name: str, health_path: str
    ) -> tuple[str, ManagedProcess]:
        """A server of ours, told ``--port 0``: read the port it reports, poll its health;
        returns its base URL. (nginx and vllm-router cannot report: they get free_port.)"""
        ready_file = self.workdir / f"{name}.ready.json"
        proc = ManagedProcess(
            [*argv, "--ready-file", str(ready_file)],
            name=name,
            log_path=self.workdir / f"{name}.log",
            grace_s=5.0,
            ready_file=ready_file,
        )
        self.procs.append(proc)
        proc.start()
        url = f"http://127.0.0.1:{proc.wait_ports(timeout_s=60.0)['http']}"
        proc.wait_ready(url + health_path, timeout_s=60.0)
        return url, proc

    def stop(self, proc: ManagedProcess) -> None:
        proc.stop()
        self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop()
        self.procs.clear()


def start_upstream(stack: Stack, mode: str, **kw: float) -> str:
    argv = [PY, __file__, "upstream", "--port", "0", "--mode", mode]
    for key, value in kw.items():
        argv += ["--" + key.replace("_", "-"), str(value)]
    return stack.start_ours(argv, f"upstream-{mode}-{len(stack.procs)}", "/health")[0]


def _nginx_conf(workdir: Path, port: int, body: str) -> Path:
    temp = workdir / f"nginx-{port}"
    temp.mkdir(parents=True, exist_ok=True)
    conf = temp / "nginx.conf"
    conf.write_text(
        f"""worker_processes 1;
daemon off;
pid {temp}/nginx.pid;
error_log {temp}/error.log warn;
events {{ worker_connections 16384; }}
http {{
  access_log off;
  client_body_temp_path {temp}/body; proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fcgi; uwsgi_temp_path {temp}/uwsgi; scgi_temp_path {temp}/scgi;
  keepalive_requests 1000000;
{body}
}}
"""
    )
    return conf


def start_nginx_static(stack: Stack) -> str:
    """The 'answers at once' upstream: nginx returning a fixed completion."""
    port = free_port()  # third-party, cannot report a port
    body = f"""  server {{ listen 127.0.0.1:{port} backlog=4096; default_type application/json;
    location / {{ return 200 '{INSTANT_BODY.decode()}'; }} }}"""
    conf = _nginx_conf(stack.workdir, port, body)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    stack.start(
        [nginx, "-c", str(conf), "-p", str(conf.parent)],
        f"nginx-static-{port}",
        f"http://127.0.0.1:{port}/health",
    )
    return f"http://127.0.0.1:{port}"


def start_nginx_proxy(stack: Stack, upstreams: list[str]) -> tuple[str, ManagedProcess]:
    port = free_port()  # third-party, cannot report a port
    servers = "".join(f"    server {u.split('://')[1]};\n" for u in upstreams)
    body = f"""  upstream backends {{
    least_conn;
{servers}    keepalive 512;
  }}
  server {{ listen 127.0.0.1:{port} backlog=4096;
    location = /nginx-health {{ return 200 'ok'; }}
    location / {{
      proxy_pass http://backends;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 300s;
    }}
  }}"""
    conf = _nginx_conf(stack.workdir, port, body)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = stack.start(
        [nginx, "-c", str(conf), "-p", str(conf.parent)],
        f"nginx-proxy-{port}",
        f"http://127.0.0.1:{port}/nginx-health",
    )
    return f"http://127.0.0.1:{port}", proc


def start_inflight(
    stack: Stack, upstreams: list[str], dispatch: str = "least-outstanding", client: str = ""
) -> tuple[str, ManagedProcess]:
    extra = ["--upstream-client", client] if client else []
    return stack.start_ours(
        [PY, "-m", "inflight", "router", "--host", "127.0.0.1", "--port", "0",
         "--slots-per-endpoint", "4", "--endpoints", ",".join(upstreams),
         "--dispatch", dispatch, *extra],
        f"inflight-{dispatch}-{len(stack.procs)}",
        "/health",
    )  # fmt: skip


def start_vllm_router(
    stack: Stack, binary: str, upstreams: list[str]
) -> tuple[str, ManagedProcess]:
    port = free_port()  # third-party, cannot report a port
    proc = stack.start(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *upstreams,
         "--policy", "round_robin", "--log-level", "warning"],
        f"vllm-router-{port}",
        f"http://127.0.0.1:{port}/health",
    )  # fmt: skip
    return f"http://127.0.0.1:{port}", proc


# =========================================================================================
# Load
# =========================================================================================
_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def _wrk_seconds(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text.strip())
    if not m:
        raise ValueError(f"cannot read wrk duration {text!r}")
    return float(m.group(1)) * _UNITS_S[m.group(2)]


def run_wrk(url: str, concurrency: int, duration_s: float, workdir: Path) -> dict[str, float]:
    """POST /v1/completions with wrk; requests/s, p50/p99 (ms) and non-2xx count."""
    script = workdir / "post.lua"
    script.write_text(
        'wrk.method = "POST"\n'
        f"wrk.body = '{POST_BODY.decode()}'\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    out = subprocess.run(
        ["wrk", "-t1", f"-c{concurrency}", f"-d{duration_s:g}s", "--latency", "-s", str(script),
         url + "/v1/completions"],
        capture_output=True, text=True, timeout=duration_s + 60, check=True,
    ).stdout  # fmt: skip
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    pct = dict(re.findall(r"^\s+(50|99)(?:\.000)?%\s+(\S+)", out, re.M))
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    return {
        "rps": rps,
        "p50_ms": _wrk_seconds(pct["50"]) * 1e3,
        "p99_ms": _wrk_seconds(pct["99"]) * 1e3,
        "non_2xx": float(bad.group(1)) if bad else 0.0,
        "socket_errors": 0.0 if errors is None else 1.0,
    }


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


_EVENT_STAMP = re.compile(rb'"t":(\d+)')


async def _streams(url: str, concurrency: int, duration_s: float) -> dict[str, float]:
    """Closed-loop SSE streams; per-event delivery delay (write at the upstream to arrival
    here), stream time and TTFB. The client is the router's own httptools client
    (``router.upstream``): the same, light load generator for every target, so on two
    cores the client is not what limits the figures (aiohttp's parsing of ~20,000
    events/s took most of a core).
    """
    from router.upstream import HttpToolsUpstream, UpstreamFailure

    base = url
    delays_ns: list[int] = []
    durations: list[float] = []
    ttfbs: list[float] = []
    events = 0
    failures = 0
    deadline = time.monotonic() + duration_s
    body = json.dumps({"model": "m", "prompt": "hi", "stream": True}).encode()
    headers = [(b"content-type", b"application/json")]
    client = HttpToolsUpstream(connect_timeout_s=5.0, keepalive_s=30.0)
    find = _EVENT_STAMP.findall
    now_ns = time.monotonic_ns

    async def worker() -> None:
        nonlocal events, failures
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            first = None
            try:
                resp = await client.open(base, b"POST", b"/v1/completions", headers, body)
                ok = resp.status == 200
                async for chunk in resp:
                    arrived = now_ns()
                    if first is None:
                        first = time.monotonic()
                    stamps = find(chunk)
                    events += len(stamps)
                    delays_ns.extend(arrived - int(t) for t in stamps)
                resp.release()
            except UpstreamFailure:
                ok = False
            if not ok:
                failures += 1
                continue
            end = time.monotonic()
            durations.append(end - t0)
            ttfbs.append((first or end) - t0)

    start = time.monotonic()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await client.close()
    elapsed = time.monotonic() - start
    delays_ms = [d / 1e6 for d in delays_ns]
    return {
        "events_per_s": events / elapsed,
        "streams": float(len(durations)),
        "failures": float(failures),
        "event_delay_p50_ms": _percentile(delays_ms, 0.50),
        "event_delay_p99_ms": _percentile(delays_ms, 0.99),
        "p50_ms": _percentile(durations, 0.50) * 1e3,
        "p99_ms": _percentile(durations, 0.99) * 1e3,
        "ttfb_p50_ms": _percentile(ttfbs, 0.50) * 1e3,
        "ttfb_p99_ms": _percentile(ttfbs, 0.99) * 1e3,
    }


async def _closed_loop(url: str, concurrency: int, requests: int, body: dict) -> dict[str, float]:
    import aiohttp

    latencies: list[float] = []
    remaining = requests
    failures = 0

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal remaining, failures
        while remaining > 0:
            remaining -= 1
            t0 = time.monotonic()
            async with session.post(url + "/v1/completions", json=body) as resp:
                await resp.read()
                if resp.status != 200:
                    failures += 1
                    continue
            latencies.append(time.monotonic() - t0)

    start = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    elapsed = time.monotonic() - start
    return {
        "requests": float(len(latencies)),
        "failures": float(failures),
        "rps": len(latencies) / elapsed,
        "p50_ms": _percentile(latencies, 0.50) * 1e3,
        "p95_ms": _percentile(latencies, 0.95) * 1e3,
        "p99_ms": _percentile(latencies, 0.99) * 1e3,
    }


# =========================================================================================
# Scenarios
# =========================================================================================
@dataclass
class Options:
    duration_s: float
    vllm_router_bin: str | None
    aiohttp_peer: bool
    nginx: bool
    wrk: bool
    emulator_time_scale: float
    balance_requests: int


@contextlib.contextmanager
def proxies(stack: Stack, opts: Options, upstreams: list[str]) -> Iterator[dict[str, str]]:
    """Start every peer in front of ``upstreams``; yield {name: url}; stop them."""
    started: list[ManagedProcess] = []
    urls = {"direct": upstreams[0]}
    try:
        url, proc = start_inflight(stack, upstreams)
        urls["inflight"] = url
        started.append(proc)
        if opts.aiohttp_peer:
            url, proc = start_inflight(stack, upstreams, client="aiohttp")
            urls["inflight/aiohttp"] = url
            started.append(proc)
        if opts.nginx:
            url, proc = start_nginx_proxy(stack, upstreams)
            urls["nginx"] = url
            started.append(proc)
        if opts.vllm_router_bin:
            url, proc = start_vllm_router(stack, opts.vllm_router_bin, upstreams)
            urls["vllm-router"] = url
            started.append(proc)
        yield urls
    finally:
        for proc in started:
            stack.stop(proc)


def scenario_capacity(stack: Stack, opts: Options) -> dict[str, dict[str, float]]:
    upstream = start_nginx_static(stack) if opts.nginx else start_upstream(stack, "instant")
    out = {}
    with proxies(stack, opts, [upstream]) as urls:
        for name, url in urls.items():
            out[name] = run_wrk(url, 64, opts.duration_s, stack.workdir)
            print(f"  capacity {name:16s} {out[name]['rps']:9.0f} req/s", flush=True)
    return out


def scenario_latency(stack: Stack, opts: Options) -> dict[str, dict[str, float]]:
    upstream = start_upstream(stack, "delay", delay_s=0.05)
    out = {}
    with proxies(stack, opts, [upstream]) as urls:
        for name, url in urls.items():
            out[name] = run_wrk(url, 64, opts.duration_s, stack.workdir)
            r = out[name]
            print(f"  50ms     {name:16s} p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms",
                  flush=True)  # fmt: skip
    return out


def scenario_streaming(stack: Stack, opts: Options) -> dict[str, dict[str, float]]:
    upstream = start_upstream(stack, "sse", events=100, interval_s=0.01)
    out = {}
    with proxies(stack, opts, [upstream]) as urls:
        for name, url in urls.items():
            out[name] = asyncio.run(_streams(url, 256, opts.duration_s))
            r = out[name]
            print(f"  stream   {name:16s} {r['events_per_s']:8.0f} events/s  event delay p50 "
                  f"{r['event_delay_p50_ms']:6.2f} ms  p99 {r['event_delay_p99_ms']:6.2f} ms  "
                  f"stream p50 {r['p50_ms']:7.1f} ms  fail {r['failures']:.0f}",
                  flush=True)  # fmt: skip
    return out


def start_emulators(stack: Stack, count: int, time_scale: float) -> list[str]:
    """``count`` emulators × 4 slots serving model ``m``, ready; their base URLs."""
    urls = []
    for i in range(count):
        url, _proc = stack.start_ours(
            [PY, "-m", "inflight", "emulator", "--host", "127.0.0.1", "--port", "0",
             "--served-model-name", "m", "--max-num-seqs", "4",
             "--time-scale", str(time_scale), "--startup-s", "0"],
            f"emulator-{i}-{len(stack.procs)}",
            "/health",
        )  # fmt: skip
        urls.append(url)
    return urls


def scenario_balance(stack: Stack, opts: Options) -> dict[str, dict[str, float]]:
    emulators = start_emulators(stack, 2, opts.emulator_time_scale)
    body = {"model": "m", "prompt": "summarize the meeting", "max_tokens": 300}
    out = {}
    for dispatch in ("least-outstanding", "random"):
        url, proc = start_inflight(stack, emulators, dispatch=dispatch)
        asyncio.run(_closed_loop(url, 8, 16, body))  # warm-up: the emulators' cold start
        out[dispatch] = r = asyncio.run(_closed_loop(url, 16, opts.balance_requests, body))
        print(f"  balance  {dispatch:18s} p50 {r['p50_ms']:7.1f} ms  p95 {r['p95_ms']:7.1f} ms"
              f"  {r['rps']:.1f} req/s", flush=True)  # fmt: skip
        stack.stop(proc)
    return out


def print_table(results: dict[str, dict[str, dict[str, float]]]) -> None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    up = sub.add_parser("upstream", help="(internal) serve a synthetic upstream")
    up.add_argument("--port", type=int, required=True)
    ready.add_argument(up)
    up.add_argument("--mode", choices=("instant", "delay", "sse"), required=True)
    up.add_argument("--delay-s", type=float, default=0.05)
    up.add_argument("--events", type=int, default=100)
    up.add_argument("--interval-s", type=float, default=0.01)
    parser.add_argument("--duration-s", type=float, default=8.0, help="per target and scenario")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON results (default results/local/bench_router-<UTC time>.json)",
    )
    parser.add_argument(
        "--vllm-router-bin",
        default=shutil.which("vllm-router") or "/tmp/vr-venv/bin/vllm-router",
        help="the vllm-router executable (PyPI vllm-router, in its own venv)",
    )
    parser.add_argument(
        "--no-aiohttp-peer",
        action="store_true",
        help="leave out the 'inflight/aiohttp' row (the router with --upstream-client aiohttp)",
    )
    parser.add_argument(
        "--scenarios", default="capacity,latency,streaming,balance", help="comma-separated"
    )
    parser.add_argument("--emulator-time-scale", type=float, default=0.02)
    parser.add_argument("--balance-requests", type=int, default=480)
    args = parser.parse_args(argv)
    if args.cmd == "upstream":
        asyncio.run(_serve_upstream(args))
        return 0

    have_wrk = shutil.which("wrk") is not None
    have_nginx = bool(shutil.which("nginx")) or Path("/usr/sbin/nginx").exists()
    vr = (
        args.vllm_router_bin
        if args.vllm_router_bin and Path(args.vllm_router_bin).exists()
        else None
    )
    if not have_nginx:
        print("nginx not installed: skipped (apt-get install -y --no-install-recommends nginx)")
    if vr is None:
        print("vllm-router not found: skipped (pip install vllm-router in a separate venv)")
    opts = Options(
        duration_s=args.duration_s,
        vllm_router_bin=vr,
        aiohttp_peer=not args.no_aiohttp_peer,
        nginx=have_nginx,
        wrk=have_wrk,
        emulator_time_scale=args.emulator_time_scale,
        balance_requests=args.balance_requests,
    )
    wanted = set(args.scenarios.split(","))
    if not have_wrk and wanted & {"capacity", "latency"}:
        print("wrk not installed: capacity and latency skipped "
              "(apt-get install -y --no-install-recommends wrk)")  # fmt: skip
        wanted -= {"capacity", "latency"}
    out_path = args.out or ROOT / "results" / "local" / time.strftime(
        "bench_router-%Y%m%dT%H%M%SZ.json", time.gmtime()
    )
    if out_path.exists():
        print(f"bench_router: error: {out_path} exists; results are never overwritten "
              "(pass another --out)", file=sys.stderr)  # fmt: skip
        return 2
    results: dict[str, dict[str, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-router-") as tmp:
        stack = Stack(Path(tmp))
        try:
            for key, name, fn in (
                ("capacity", "capacity", scenario_capacity),
                ("latency", "latency_50ms", scenario_latency),
                ("streaming", "streaming", scenario_streaming),
                ("balance", "balance", scenario_balance),
            ):
                if key in wanted:
                    print(f"== {name}", flush=True)
                    results[name] = fn(stack, opts)
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


if __name__ == "__main__":
    raise SystemExit(main())
