#!/usr/bin/env python
"""Soak the router (opt-in, not a test): clients that leave at random moments.

``inflight router`` in front of 2 emulators × 4 slots; 64 closed-loop clients send
completions (half of them streamed, 5–60 tokens) for ``--seconds``; two requests in three
carry a client-side limit of 10 ms, 50 ms, 0.2 s or 0.5 s, and about a third of all
requests give up before their answer ends (before the first byte, or mid-stream).
Afterwards it checks what the router must not lose or leak:

* the router's L and every endpoint's in-flight count are 0, and both emulators have
  nothing running or waiting (every slot given back, every upstream request aborted);
* the router's open file descriptors are back to what they were before the load (idle
  upstream connections close after 4 s), measured after the first health-check round.

Usage::

    .venv/bin/python scripts/soak_router.py [--seconds 45] [--seed 7]

Exits 1 if a check fails. Every process is started on a free port and stopped by PID.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import aiohttp  # noqa: E402
import bench_router as b  # noqa: E402


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def status(url: str) -> dict:
    with urllib.request.urlopen(url + "/router/status", timeout=5) as resp:
        return json.load(resp)


def emu_counts(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
            out[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
    return out


async def load(url: str, seconds: float, rng: random.Random) -> dict[str, int]:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=45.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
    with tempfile.TemporaryDirectory(prefix="soak-router-") as tmp:
        st = b.Stack(Path(tmp))
        try:
            emus = b.start_emulators(st, 2, time_scale=0.02)
            url, proc = b.start_inflight(st, emus)
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


if __name__ == "__main__":
    raise SystemExit(main())
