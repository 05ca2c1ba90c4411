"""Per-level statistics and Little's Law arithmetic: pure, no I/O, no clock.

Every figure leaving here is in *seed time*: wall seconds ÷ time-scale. At time-scale 0.25 a
level that took 36 wall seconds took 144 seed seconds, and 128 requests in it are
128 / 144 = 0.89 req/s. Little's Law's L is dimensionless, so the time-scale cancels in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from inflight.measure.records import LevelWindow, RouterSample

# A level is invalid when the router's L and the client's λ·W disagree by more than this.
MAX_LITTLES_LAW_ERROR = 0.10


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between order statistics.

    >>> percentile([1.0, 2.0, 3.0, 4.0], 50)
    2.5
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q}")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def littles_law_error(l_measured: float, lambda_rps: float, w_s: float) -> float:
    """|L − λ·W| / L: how far the router's L is from what the client's λ and W imply.

    Worked example: 8 workers, λ = 0.24 req/s, W = 33 s → λ·W = 7.92; the router read
    L = 8.0, so the error is |8.0 − 7.92| / 8.0 = 1%. λ and W must be in the same time unit
    (both seed or both wall). L = 0 with λ·W > 0 is an infinite error; both 0 is 0.
    """
    if l_measured < 0 or lambda_rps < 0 or w_s < 0:
        raise ValueError(f"L, λ and W must be >= 0, got {l_measured}, {lambda_rps}, {w_s}")
    implied = lambda_rps * w_s
    if l_measured == 0:
        return 0.0 if implied == 0 else math.inf
    return abs(l_measured - implied) / l_measured


def time_average(samples: Sequence[RouterSample], start_t: float, end_t: float) -> float | None:
    """Time-weighted mean of ``inflight`` over [start_t, end_t] from the samples inside it.

    Midpoint rule: each sample stands for the time from halfway to its previous sample to
    halfway to its next one; the first and last reach to the window's edges. A sample taken
    just before the window (the idle gap, L = 0) is not used: held into the level it would
    bias L low by one sampling interval. None when no sample lies inside the window.

    >>> time_average([RouterSample(1.0, 4, 0, 1), RouterSample(3.0, 8, 0, 1)], 0.0, 4.0)
    6.0
    """
    if end_t <= start_t:
        raise ValueError(f"empty window [{start_t}, {end_t}]")
    inside = sorted((s for s in samples if start_t <= s.t <= end_t), key=lambda s: s.t)
    if not inside:
        return None
    area = 0.0
    for i, s in enumerate(inside):
        lo = start_t if i == 0 else (inside[i - 1].t + s.t) / 2
        hi = end_t if i == len(inside) - 1 else (s.t + inside[i + 1].t) / 2
        area += s.inflight * (hi - lo)
    return area / (end_t - start_t)


@dataclass(frozen=True)
class LevelStats:
    """One level's figures, in seed time (seconds, requests/s, tokens/s)."""

    concurrency: int
    requests: int
    errors: int
    duration_s: float
    throughput_rps: float
    output_tokens_per_s: float
    e2e_p50_s: float | None
    e2e_p95_s: float | None
    e2e_p99_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_p99_s: float | None
    lambda_rps: float  # client: requests that arrived in the level ÷ its duration
    w_s: float | None  # client: mean end-to-end latency
    l_router: float | None  # router: time-weighted mean of in-flight requests
    router_samples: int
    littles_law_error: float | None
    replicas: tuple[int, ...]  # distinct ready-replica counts seen during the level, sorted
    cpu_loadgen: float  # fraction of one core the bench process used
    cpu_machine_busy: float | None  # fraction of all cores busy
    start_t: float  # unix seconds (wall), for lining up with timelines
    end_t: float


def level_stats(
    window: LevelWindow, time_scale: float, timeline_ready: Sequence[int] = ()
) -> LevelStats:
    """Summarize one level. ``timeline_ready``: ready counts from ``timeline.jsonl`` in the level.

    λ counts every request sent in the level (errors too: they occupied the system),
    W is the mean latency of the same requests, so λ·W is exactly the client's
    time-averaged number in flight over the level, which the router's L must match.
    """
    if time_scale <= 0:
        raise ValueError(f"time-scale must be > 0, got {time_scale}")
    wall_s = window.end_t - window.start_t
    if wall_s <= 0:
        raise ValueError(f"level c={window.concurrency} has no duration")
    seed_s = wall_s / time_scale
    records = window.records
    ok = [r for r in records if r.ok]
    e2e = [r.latency_s / time_scale for r in ok]
    ttft = [t / time_scale for r in ok if (t := r.ttft_s) is not None]
    all_lat = [r.latency_s / time_scale for r in records]
    lam = len(records) / seed_s
    w = sum(all_lat) / len(all_lat) if all_lat else None
    l_router = time_average(window.samples, window.start_t, window.end_t)
    err = None if (l_router is None or w is None) else littles_law_error(l_router, lam, w)
    in_level = [s.ready for s in window.samples if window.start_t <= s.t <= window.end_t]
    replicas = tuple(sorted(set(in_level) | set(timeline_ready)))

    def pct(vals: list[float], q: float) -> float | None:
        return percentile(vals, q) if vals else None

    return LevelStats(
        concurrency=window.concurrency,
        requests=len(records),
        errors=len(records) - len(ok),
        duration_s=seed_s,
        throughput_rps=len(ok) / seed_s,
        output_tokens_per_s=sum(r.output_tokens for r in ok) / seed_s,
        e2e_p50_s=pct(e2e, 50),
        e2e_p95_s=pct(e2e, 95),
        e2e_p99_s=pct(e2e, 99),
        ttft_p50_s=pct(ttft, 50),
        ttft_p95_s=pct(ttft, 95),
        ttft_p99_s=pct(ttft, 99),
        lambda_rps=lam,
        w_s=w,
        l_router=l_router,
        router_samples=len(in_level),
        littles_law_error=err,
        replicas=replicas,
        cpu_loadgen=window.cpu_loadgen_s / wall_s,
        cpu_machine_busy=window.cpu_machine_busy,
        start_t=window.start_t,
        end_t=window.end_t,
    )


def rate_series(
    end_times: Sequence[float], t0: float, t1: float, window_s: float, step_s: float
) -> list[tuple[float, float]]:
    """Completions per second in a trailing window, every ``step_s``: λ over time for plots.

    Times in, rates out, all in the same unit; returns ``(t, rate)`` pairs from t0 to t1.
    """
    if window_s <= 0 or step_s <= 0:
        raise ValueError("window_s and step_s must be > 0")
    ends = sorted(end_times)
    out: list[tuple[float, float]] = []
    t = t0
    lo = 0
    hi = 0
    while t <= t1:
        while hi < len(ends) and ends[hi] <= t:
            hi += 1
        while lo < hi and ends[lo] <= t - window_s:
            lo += 1
        out.append((t, (hi - lo) / window_s))
        t += step_s
    return out
