"""A full window of history for ``inflight bench scaler``: the series the default trigger's
range query reads, backfilled into Prometheus' storage before it starts.

A Prometheus started for the benchmark holds seconds of data, so the scaler's range query
(1,810 one-second steps by default) answers a few points a series: that measured
Prometheus evaluating the query, not the scaler reading a full answer, which is what a
deployed scaler does once its Prometheus has run for half an hour. Here every series the
query reads (the router's L, arrivals, ready endpoints and token gauges; vLLM's KV usage,
running, waiting for capacity and cache config; ``up``) gets ``history_s`` of one-second
samples from a seeded, bursty L, written as OpenMetrics and turned into TSDB blocks by
Debian's ``promtool tsdb create-blocks-from openmetrics``. The live target (the benchmark's
``/metrics``) then carries the same series with the same labels, so the history runs into
the scrapes without a seam.
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from inflight import names
from inflight.procs import ProcessError

SLOTS = 4
REPLICAS = 2
BLOCKS, BLOCK_SIZE = 1000, 16  # a replica's KV cache: 16,000 tokens
TOKENS_PER_REQUEST = 1500


@dataclass(frozen=True)
class State:
    """What the router and two vLLM replicas expose at one second."""

    inflight: float
    received: float
    usage: float  # Σ vllm:kv_cache_usage_perc over the replicas (one series each)
    running: float
    waiting: float


def states(seconds: int, seed: int = 1) -> list[State]:
    """A seeded, bursty L second by second: ~3 in flight, a burst to ~20 every 5 minutes
    for 30 s, noise; vLLM runs what its slots take and queues the rest.

    >>> [round(s.inflight) for s in states(40)[::10]]  # a burst, then quiet
    [22, 22, 23, 4]
    """
    rng = random.Random(seed)
    out: list[State] = []
    received = 0.0
    for t in range(seconds):
        level = 20.0 if t % 300 < 30 else 3.0
        inflight = max(0.0, round(level + rng.gauss(0, 1.5)))
        received += max(0.0, rng.gauss(inflight / 2, 1))
        running = min(inflight, SLOTS * REPLICAS)
        tokens = running * TOKENS_PER_REQUEST / (BLOCKS * BLOCK_SIZE)
        out.append(State(inflight, math.floor(received), tokens, running, inflight - running))
    return out


def series(state: State, instance: str) -> Iterator[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every series at one state; ``instance`` is the live
    target's ``host:port`` (job ``router``, as the benchmark's Prometheus scrapes it)."""
    base = {"job": "router", "instance": instance}
    share = 1.0 / REPLICAS
    yield names.ROUTER_INFLIGHT, base, state.inflight
    yield names.ROUTER_REQUESTS_RECEIVED, base, state.received
    yield names.ROUTER_ENDPOINTS, {**base, "state": "ready"}, float(REPLICAS)
    yield "up", base, 1.0
    for r in range(REPLICAS):
        rep = {**base, "engine": str(r), "model_name": "m"}
        yield names.VLLM_KV_CACHE_USAGE, rep, round(state.usage * share, 6)
        yield names.VLLM_RUNNING, rep, state.running * share
        yield names.VLLM_WAITING_BY_REASON, {**rep, "reason": "capacity"}, state.waiting * share
        yield names.VLLM_CACHE_CONFIG_INFO, {**rep, **cache_labels()}, 1.0
        end = {**base, "endpoint": f"replica-{r}"}
        yield names.ROUTER_ENDPOINT_INFLIGHT_TOKENS, end, state.running * share * TOKENS_PER_REQUEST
        yield names.ROUTER_ENDPOINT_KV_TOKENS, end, float(BLOCKS * BLOCK_SIZE)
    yield names.ROUTER_QUEUED_TOKENS, base, state.waiting * TOKENS_PER_REQUEST


def exposition(state: State) -> str:
    """The live target's ``/metrics`` at ``state``: the same series, without the job and
    instance labels Prometheus adds on the scrape (and without ``up``, which it makes)."""
    lines = []
    for name, labels, value in series(state, instance=""):
        if name == "up":
            continue
        own = ",".join(f'{k}="{v}"' for k, v in labels.items() if k not in ("job", "instance"))
        lines.append(f"{name}{{{own}}} {value:g}")
    return "\n".join(lines) + "\n"


def cache_labels() -> dict[str, str]:
    """``vllm:cache_config_info``'s labels the scaler reads (a replica's cache size)."""
    return {
        names.VLLM_CACHE_NUM_BLOCKS_LABEL: str(BLOCKS),
        names.VLLM_CACHE_BLOCK_SIZE_LABEL: str(BLOCK_SIZE),
    }


def openmetrics(history: list[State], end_s: float, instance: str) -> str:
    """OpenMetrics text of ``history``, one sample a second ending at ``end_s`` (unix
    seconds), each family's samples together and in time order, as promtool wants."""
    by_series: dict[tuple[str, tuple[tuple[str, str], ...]], list[str]] = {}
    start = end_s - len(history) + 1
    for i, state in enumerate(history):
        t = start + i
        for name, labels, value in series(state, instance):
            key = (name, tuple(sorted(labels.items())))
            by_series.setdefault(key, []).append(f"{value:g} {t:.3f}")
    lines: list[str] = []
    typed: set[str] = set()
    for key in sorted(by_series, key=lambda k: k[0]):
        name, pairs = key
        family = name.removesuffix("_total")
        if family not in typed:
            kind = "counter" if name.endswith("_total") else "gauge"
            lines.append(f"# TYPE {family} {kind}")
            typed.add(family)
        rendered = ",".join(f'{k}="{v}"' for k, v in pairs)
        lines += [f"{name}{{{rendered}}} {sample}" for sample in by_series[key]]
    return "\n".join([*lines, "# EOF"]) + "\n"


def backfill(tsdb_dir: Path, text: str, promtool: str | None = None) -> None:
    """Write ``text`` (OpenMetrics) into ``tsdb_dir`` as blocks, before Prometheus starts."""
    binary = shutil.which(promtool or "promtool")
    if binary is None:
        raise ProcessError(
            f"{promtool or 'promtool'} is not an executable (Debian's prometheus package has "
            "promtool): apt-get install -y --no-install-recommends prometheus"
        )
    tsdb_dir.mkdir(parents=True, exist_ok=True)
    source = tsdb_dir.parent / "history.om"
    source.write_text(text)
    try:
        done = subprocess.run(
            [binary, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tsdb_dir)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        source.unlink(missing_ok=True)
    if done.returncode != 0:
        raise ProcessError(
            f"promtool could not backfill the history (exit {done.returncode}): "
            f"{(done.stderr or done.stdout)[-500:]}"
        )
