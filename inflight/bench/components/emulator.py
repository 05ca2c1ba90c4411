"""``inflight bench emulator``: one or more emulators' measured throughput against the
model, and their CPU.

Closed loop, like the seed's workload: N workers, each sends its next reference request
(~3,000 prompt tokens, 300 output tokens) when the previous one finishes. For each
concurrency level it prints the measured throughput next to the model's prediction
(slots ÷ service time, both in wall time at ``--time-scale``), the median latency, and the
emulator processes' CPU use (user + system time ÷ wall time, from /proc) and the load
generator's own. ``--replicas 4`` spreads the load over four emulators, as the stack's
bench does, to show what four replicas cost together.

Throughput is measured between two completion instants after a warm-up (so the cold
start and the ramp are excluded), from the end of one burst of completions to the end of
a later one: at a full batch four requests finish within a step of each other, and
counting from the middle of a burst would over-count it.

Not a test: it prints figures; nothing here asserts on speed. (Until 2026-12-01 this was
``scripts/bench_emulator.py``.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from inflight.bench.components.procs import Stack, start_emulators
from inflight.emulator.profile import Profile

PROMPT_TOKENS = 3000
PROMPT = "x" * (4 * PROMPT_TOKENS)  # the emulator estimates 4 characters per token
OUTPUT_TOKENS = 300
MODEL = "bench-model"


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    stream: bool
    completed: int
    errors: int
    measured_rps: float
    predicted_rps: float
    ratio: float
    p50_latency_s: float
    predicted_p50_s: float
    emulator_cpu: float  # all emulators together, fraction of one core
    load_cpu: float  # this load generator, fraction of one core
    wall_s: float


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (from /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    """User + system CPU seconds of this process (the load generator)."""
    t = os.times()
    return t.user + t.system


def steady_throughput(done_s: list[float], warmup_s: float, cluster_gap_s: float) -> float:
    """Completions per second between the ends of two bursts, after ``warmup_s``.

    Worked example: bursts of 4 at t = 1.0, 1.45, 1.90 (warm-up 0.5): from the end of the
    first burst (1.0) to the end of the last (1.90) 8 requests finished: 8 / 0.9 = 8.9/s.
    """
    times = sorted(done_s)
    start = next((i for i, t in enumerate(times) if t >= warmup_s), None)
    if start is None or len(times) - start < 3:
        return float("nan")
    while start + 1 < len(times) and times[start + 1] - times[start] < cluster_gap_s:
        start += 1  # to the end of that burst
    end = len(times) - 1
    if end <= start or times[end] <= times[start]:
        return float("nan")
    return (end - start) / (times[end] - times[start])


async def run_level(
    urls: list[str], model: str, concurrency: int, duration_s: float, stream: bool
) -> tuple[list[float], list[float], int]:
    """Closed loop for ``duration_s``, worker ``i`` on ``urls[i % len(urls)]``.

    Returns (completion times since the start, latencies, errors), in wall seconds.
    """
    import aiohttp

    body = {"model": model, "prompt": PROMPT, "max_tokens": OUTPUT_TOKENS, "stream": stream}
    done_s: list[float] = []
    latencies_s: list[float] = []
    errors = 0
    t0 = time.monotonic()
    stop_at = t0 + duration_s
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(url: str) -> None:
            nonlocal errors
            while time.monotonic() < stop_at:
                start = time.monotonic()
                try:
                    async with session.post(f"{url}/v1/completions", json=body) as resp:
                        if stream:
                            async for _chunk in resp.content.iter_any():
                                pass
                        else:
                            await resp.read()
                        ok = resp.status == 200
                except aiohttp.ClientError:
                    ok = False
                end = time.monotonic()
                if ok:
                    done_s.append(end - t0)
                    latencies_s.append(end - start)
                else:
                    errors += 1

        await asyncio.gather(*(worker(urls[i % len(urls)]) for i in range(concurrency)))
    return done_s, latencies_s, errors


def predicted_rps(profile: Profile, workers: int) -> float:
    """Wall req/s of one replica with ``workers`` closed-loop reference clients.

    With k = min(workers, slots) running in lock-step, one turnover takes k prefills plus
    300 steps of k sequences: k = 4 → 4 / (4 × 0.06 + 300 × 0.0142) = 4 / 4.5 s (scaled).
    """
    k = min(workers, profile.max_num_seqs)
    if k == 0:
        return 0.0
    cycle_s = k * profile.prefill_s(PROMPT_TOKENS) + OUTPUT_TOKENS * profile.step_s(k)
    return k / cycle_s


def predicted_p50_s(profile: Profile, workers: int) -> float:
    """Wall latency of a request with ``workers`` closed-loop clients on one replica."""
    k = min(workers, profile.max_num_seqs)
    return max(1.0, workers / profile.max_num_seqs) * k / predicted_rps(profile, workers)


def _header(args: argparse.Namespace, profile: Profile) -> None:
    print(
        f"{args.replicas} emulator(s): {profile.max_num_seqs} slots, {profile.service_s} s per "
        f"reference request at a full batch, time-scale {args.time_scale} → saturated "
        f"{profile.predicted_throughput_rps:.3f} req/s wall per replica "
        f"({profile.predicted_throughput_rps * args.time_scale:.3f} req/s model time); "
        f"stream={args.stream}",
        flush=True,
    )
    print(
        f"{'conc':>5} {'done':>5} {'err':>4} {'meas rps':>9} {'pred rps':>9} {'ratio':>6} "
        f"{'p50 s':>7} {'pred p50':>8} {'emu CPU':>8} {'load CPU':>8}",
        flush=True,
    )


def main(args: argparse.Namespace) -> int:
    profile = Profile(time_scale=args.time_scale)
    results: list[LevelResult] = []
    service_wall_s = profile.service_s * profile.time_scale
    _header(args, profile)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    stack = Stack(args.log_dir)
    try:
        started = start_emulators(
            stack, args.replicas, args.time_scale, model=MODEL, slots=profile.max_num_seqs
        )
        urls = [url for url, _ in started]
        pids = [proc.pid for _, proc in started]
        # Pay the cold start before measuring (as the seed's warm runs did).
        warm = profile.max_num_seqs * args.replicas
        asyncio.run(run_level(urls, MODEL, warm, 0.01, args.stream))
        for conc in args.levels:
            cpu0, own0, w0 = sum(cpu_seconds(p) for p in pids), own_cpu(), time.monotonic()
            done_s, lat_s, errors = asyncio.run(
                run_level(urls, MODEL, conc, args.level_s, args.stream)
            )
            cpu1, own1, w1 = sum(cpu_seconds(p) for p in pids), own_cpu(), time.monotonic()
            gap_s = 0.25 * service_wall_s / profile.max_num_seqs  # well inside a turnover
            measured = steady_throughput(done_s, args.warmup_s, cluster_gap_s=gap_s)
            per_replica = [len(range(i, conc, args.replicas)) for i in range(args.replicas)]
            predicted = sum(predicted_rps(profile, w) for w in per_replica)
            res = LevelResult(
                concurrency=conc,
                stream=args.stream,
                completed=len(done_s),
                errors=errors,
                measured_rps=measured,
                predicted_rps=predicted,
                ratio=measured / predicted,
                p50_latency_s=statistics.median(lat_s) if lat_s else float("nan"),
                predicted_p50_s=predicted_p50_s(profile, max(per_replica)),
                emulator_cpu=(cpu1 - cpu0) / (w1 - w0),
                load_cpu=(own1 - own0) / (w1 - w0),
                wall_s=w1 - w0,
            )
            results.append(res)
            print(
                f"{conc:>5} {res.completed:>5} {errors:>4} {measured:>9.3f} {predicted:>9.3f} "
                f"{res.ratio:>6.3f} {res.p50_latency_s:>7.3f} {res.predicted_p50_s:>8.3f} "
                f"{res.emulator_cpu * 100:>7.1f}% {res.load_cpu * 100:>7.1f}%",
                flush=True,
            )
    finally:
        stack.stop_all()
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0
