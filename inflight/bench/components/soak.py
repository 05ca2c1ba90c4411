"""``inflight bench soak``: the router under clients that leave at random moments.

``inflight router`` in front of 2 emulators × 4 slots; 64 closed-loop clients send
completions (half of them streamed, 5–60 tokens) for ``--seconds``; two requests in three
carry a client-side limit of 10 ms, 50 ms, 0.2 s or 0.5 s, and about a third of all
requests give up before their answer ends (before the first byte, or mid-stream).
Afterwards it checks what the router must not lose or leak:

* the router's L and every endpoint's in-flight count are 0, and both emulators have
  nothing running or waiting (every slot given back, every upstream request aborted);
* the router's open file descriptors are back to what they were before the load (idle
  upstream connections close after 4 s), measured after the first health-check round.

Exits 1 if a check fails. Opt-in, not a test. (Until 2026-12-01 this was
``scripts/soak_router.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from inflight.bench.components.procs import Stack, start_emulators, start_inflight


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/router/status", timeout=5) as resp:
        doc: dict[str, Any] = json.load(resp)
    return doc


def emu_counts(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
            out[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    return out


async def load(url: str, seconds: float, rng: random.Random) -> dict[str, int]:
    import aiohttp

    stats = {"ok": 0, "aborted": 0, "err": 0}
    deadline = time.monotonic() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            stream = rng.random() < 0.5
            body = {
                "model": "m",
                "prompt": "hi",
                "max_tokens": rng.randint(5, 60),
                "stream": stream,
            }
            abort_after = rng.choice([None, None, 0.01, 0.05, 0.2, 0.5])
            try:
                async with asyncio.timeout(abort_after):
                    async with session.post(url + "/v1/completions", json=body) as r:
                        async for _ in r.content.iter_any():
                            pass
                stats["ok"] += 1
            except TimeoutError:
                stats["aborted"] += 1
            except aiohttp.ClientError:
                stats["err"] += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
        await asyncio.gather(*(worker(s) for _ in range(64)))
    return stats


def main(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="soak-router-") as tmp:
        st = Stack(Path(tmp))
        try:
            emus = [u for u, _ in start_emulators(st, 2, time_scale=0.02)]
            url, proc = start_inflight(st, emus)
            time.sleep(3.0)  # one health-check round (2 s): its pooled connections exist
            base_fds = fds(proc.pid)
            stats = asyncio.run(load(url, args.seconds, random.Random(args.seed)))
            print(f"load: {stats}", flush=True)
            deadline = time.monotonic() + 10
            while True:
                s = status(url)
                e = [emu_counts(u) for u in emus]
                idle = s["inflight"] == 0 and all(sum(x.values()) == 0 for x in e)
                if idle or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            print(f"router status: inflight {s['inflight']}, queued {s['queued']}, "
                  f"endpoints {[ep['inflight'] for ep in s['endpoints']]}")  # fmt: skip
            print(f"emulators: {e}")
            time.sleep(5.0)  # idle upstream connections close after 4 s
            after_fds = fds(proc.pid)
            print(f"router open fds: before load {base_fds}, after {after_fds}")
        finally:
            st.stop_all()
    ok = idle and after_fds <= base_fds and stats["err"] == 0
    print("soak: " + ("every check passed" if ok else "FAILED"))
    return 0 if ok else 1
