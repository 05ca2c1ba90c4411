"""The measuring half of ``inflight bench calibrate-emulator``: one real engine, its scrape,
and streamed requests whose lengths are fixed (a prompt of random token ids, no prefix-cache
hit, except the prefix check's shared prefixes: ``model.prompt_ids``; ``ignore_eos`` so every
answer has its ``max_tokens``).

Times are ``time.monotonic()`` seconds from the start of each measurement. The engine runs
in its own process group (``inflight.procs.ManagedProcess``) and is stopped as a group.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import urllib.request
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from inflight.bench.calibrate.model import Done, Request, TracePoint, prompt_ids
from inflight.engines import vllm_cpu
from inflight.ports import listening_ports
from inflight.procs import ManagedProcess, free_port


class EngineFailed(RuntimeError):
    """The real engine did not start or stopped answering; the message says where to look."""


def start_engine(
    home: Path,
    model: str,
    slots: int,
    engine_args: Seq[str],
    log_path: Path,
    timeout_s: float,
) -> tuple[ManagedProcess, str]:
    """``vllm serve`` through the project's launcher on a free port; (process, base URL)
    once ``/health`` answers 200 from the process group's own port."""
    vllm_cpu.load_install(home).model_dir(model)  # EngineNotReady names make vllm-cpu
    port = free_port()
    argv = vllm_cpu.replica_command(home, model, model, slots, engine_args, port=str(port))
    proc = ManagedProcess(argv, name="vllm", log_path=log_path, grace_s=30.0).start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise EngineFailed(f"vllm serve exited ({proc.poll()}); see {log_path}")
            if _healthy(url) and proc.pgid is not None and port in listening_ports(proc.pgid):
                return proc, url
            if time.monotonic() > deadline:
                raise EngineFailed(
                    f"vllm serve not healthy after {timeout_s:.0f} s; see {log_path}"
                )
            time.sleep(0.5)
    except BaseException:
        stop_engine(proc)
        raise


def stop_engine(proc: ManagedProcess) -> None:
    """Stop the engine's process group and remove its temp dir
    (:func:`inflight.engines.vllm_cpu.sweep_tmp_dirs`)."""
    proc.stop()
    vllm_cpu.sweep_tmp_dirs()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def scrape(
    url: str, only: frozenset[str] | None = None
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``/metrics`` as sample name → [(labels, value)]; with ``only``, just those samples
    (the other lines are not parsed: vLLM's page is mostly histograms, and a full parse
    while streams run delays the burst's samples past short requests)."""
    with urllib.request.urlopen(url + "/metrics", timeout=10.0) as resp:
        text = resp.read().decode()
    if only is not None:
        text = "\n".join(
            line for line in text.splitlines() if line.partition("{")[0].split(" ")[0] in only
        )
        text += "\n"
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def total(samples: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(v for _, v in samples.get(name, []))


def cache_config(url: str) -> dict[str, str]:
    """``vllm:cache_config_info``'s labels."""
    (labels, _), *_ = scrape(url)[names.VLLM_CACHE_CONFIG_INFO]
    return labels


def prefix_totals(url: str) -> tuple[float, float]:
    """The engine's prefix-cache counters, in tokens: (hits, queries)."""
    samples = scrape(
        url, frozenset({names.VLLM_PREFIX_CACHE_HITS, names.VLLM_PREFIX_CACHE_QUERIES})
    )
    return (
        total(samples, names.VLLM_PREFIX_CACHE_HITS),
        total(samples, names.VLLM_PREFIX_CACHE_QUERIES),
    )


# --- requests ----------------------------------------------------------------------------


def body(model: str, req: Request, seed: int) -> dict[str, Any]:
    return {
        "model": model,
        "prompt": prompt_ids(req, seed, len(vllm_cpu.SPECIAL_TOKENS)),
        "max_tokens": req.output_tokens,
        "ignore_eos": True,
        "stream": True,
    }


async def one(
    session: aiohttp.ClientSession, url: str, model: str, req: Request, seed: int, t0: float
) -> Done:
    """Send ``req`` streamed; its send, first-token and finish times from ``t0``."""
    sent = time.monotonic() - t0
    first: float | None = None
    tokens = 0
    async with session.post(url + "/v1/completions", json=body(model, req, seed)) as resp:
        if resp.status != 200:
            raise EngineFailed(f"{resp.status} from the engine: {(await resp.text())[:300]}")
        async for line in resp.content:
            if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                tokens += 1
                if first is None:
                    first = time.monotonic() - t0
    if first is None:
        raise EngineFailed("a stream ended without a token")
    return Done(req, sent, first, time.monotonic() - t0)


def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600))


async def ttft_by_prompt(url: str, model: str, prompts: Seq[int], reps: int) -> dict[int, float]:
    """Median TTFT of lone requests (one output token) for each prompt length."""
    out: dict[int, float] = {}
    async with _session() as s:
        await one(s, url, model, Request(16, 2), 1, time.monotonic())  # warm-up
        for p in prompts:
            ttfts = []
            for r in range(reps):
                t0 = time.monotonic()
                d = await one(s, url, model, Request(p, 1), 10_000 + 97 * p + r, t0)
                ttfts.append(d.ttft_s)
            out[p] = statistics.median(ttfts)
    return out


#: vLLM's decode time a request (first token to last, stamped by the engine core), summed.
DECODE = "vllm:request_decode_time_seconds"
DECODE_SUM = DECODE + "_sum"
DECODE_COUNT = DECODE + "_count"
#: vLLM's latency a request, from its arrival at the API server to its last token.
E2E = "vllm:e2e_request_latency_seconds"
#: vLLM's TTFT a request, from its arrival at the API server to its first token.
TTFT = names.VLLM_TTFT


def histogram_totals(url: str, *families: str) -> dict[str, tuple[float, float] | None]:
    """Each histogram family's (Σ seconds, requests) from one scrape of the engine's
    ``/metrics``; None for a family the engine does not export."""
    wanted = frozenset(f"{f}{tail}" for f in families for tail in ("_sum", "_count"))
    samples = scrape(url, wanted)
    out: dict[str, tuple[float, float] | None] = {}
    for f in families:
        have = f + "_sum" in samples and f + "_count" in samples
        out[f] = (total(samples, f + "_sum"), total(samples, f + "_count")) if have else None
    return out


def decode_totals(url: str) -> tuple[float, float] | None:
    """(Σ decode seconds, requests) from the engine's ``/metrics``; None without them."""
    return histogram_totals(url, DECODE)[DECODE]


def mean_between(
    before: tuple[float, float] | None, after: tuple[float, float] | None, requests: int
) -> float | None:
    """The mean seconds a request of the ``requests`` that finished between two
    :func:`histogram_totals`; None when the engine does not export them or counted other
    requests too.

    >>> round(mean_between((1.0, 10.0), (1.4, 12.0), 2), 6)
    0.2
    """
    if before is None or after is None or after[1] - before[1] != requests:
        return None
    return (after[0] - before[0]) / requests


def engine_tpot(
    before: tuple[float, float] | None,
    after: tuple[float, float] | None,
    requests: int,
    output_tokens: int,
) -> float | None:
    """The mean time per output token (after the first) of the ``requests`` that finished
    between two :func:`decode_totals`, as the engine timed them; None when the engine does
    not export them or counted other requests too.

    >>> round(engine_tpot((1.0, 10.0), (1.4, 12.0), 2, 101), 6)
    0.002
    """
    mean = mean_between(before, after, requests)
    return None if mean is None else mean / (output_tokens - 1)


async def tpot_by_batch(
    url: str, model: str, batches: Seq[int], prompt_tokens: int, output_tokens: int, reps: int = 1
) -> dict[int, float]:
    """Median time per output token (after the first) with ``n`` streams started together,
    over ``reps`` rounds of every batch in turn (a noisy round counts once).

    As the client receives the tokens, but never faster than the engine produced them
    (:func:`engine_tpot`: vLLM's decode time, first token to last as its engine core stamps
    them): the larger of the two. On a busy machine vLLM's API server falls behind its
    engine; it then either sends a stream's tokens in a few merged events, so the client
    saw a 1,000-token stream's tokens arrive together (4 µs a token where the engine took
    4 ms, in a run at dd2a812: the engine's time is the floor), or delivers them later than
    the engine made them, which the phases' clients see too (the client's time counts).
    Without ``vllm:request_decode_time_seconds``, the client's alone."""
    per: dict[int, list[float]] = {n: [] for n in batches}
    async with _session() as s:
        for r in range(reps):
            for n in batches:
                t0 = time.monotonic()
                reqs = [Request(prompt_tokens, output_tokens) for _ in range(n)]
                before = await asyncio.to_thread(decode_totals, url)
                done = await asyncio.gather(
                    *(
                        one(s, url, model, q, 20_000 + 997 * r + 31 * n + i, t0)
                        for i, q in enumerate(reqs)
                    )
                )
                after = await asyncio.to_thread(decode_totals, url)
                seen = statistics.median(
                    (d.finished_s - d.first_token_s) / (output_tokens - 1) for d in done
                )
                timed = engine_tpot(before, after, n, output_tokens)
                per[n].append(seen if timed is None else max(seen, timed))
    return {n: statistics.median(v) for n, v in per.items()}


async def closed_loop(url: str, model: str, requests: Seq[Request], seed: int) -> list[Done]:
    """Each client sends its requests one after another; all clients at once."""
    clients: dict[int, list[Request]] = {}
    for r in requests:
        clients.setdefault(r.client, []).append(r)
    out: list[Done] = []
    async with _session() as s:
        t0 = time.monotonic()

        async def client(queue: list[Request], base: int) -> None:
            for i, r in enumerate(queue):
                out.append(await one(s, url, model, r, base + i, t0))

        await asyncio.gather(*(client(q, seed + 1000 * c) for c, q in clients.items()))
    return out


_BURST_SAMPLES = frozenset(
    {
        names.VLLM_RUNNING,
        names.VLLM_WAITING,
        names.VLLM_PREEMPTIONS,
        names.VLLM_KV_CACHE_USAGE,
        names.VLLM_REQUEST_SUCCESS,
    }
)


async def burst(
    url: str, model: str, requests: Seq[Request], every_s: float, seed: int
) -> tuple[list[Done], list[TracePoint]]:
    """All ``requests`` at once; the engine's scrape every ``every_s`` until they finished."""
    points: list[TracePoint] = []
    base = scrape(url, _BURST_SAMPLES)
    finished0 = total(base, names.VLLM_REQUEST_SUCCESS)
    preempt0 = total(base, names.VLLM_PREEMPTIONS)
    async with _session() as s:
        t0 = time.monotonic()
        tasks = [
            asyncio.ensure_future(one(s, url, model, r, seed + i, t0))
            for i, r in enumerate(requests)
        ]
        while True:
            now = time.monotonic() - t0
            m = await asyncio.to_thread(scrape, url, _BURST_SAMPLES)
            points.append(
                TracePoint(
                    now,
                    int(total(m, names.VLLM_RUNNING)),
                    int(total(m, names.VLLM_WAITING)),
                    int(total(m, names.VLLM_PREEMPTIONS) - preempt0),
                    total(m, names.VLLM_KV_CACHE_USAGE),
                    int(total(m, names.VLLM_REQUEST_SUCCESS) - finished0),
                )
            )
            if all(t.done() for t in tasks):
                break
            await asyncio.sleep(max(0.0, every_s - (time.monotonic() - t0 - now)))
        done = [t.result() for t in tasks]
    return done, points
