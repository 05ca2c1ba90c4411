"""Random workloads for ``inflight sim generalize``: a draw is a pure function of its seed.

A **draw** is one open-loop window a policy is judged on, with everything around it:

* **the traffic's source**: a ServeGen model's production clients (``servegen:m-large``,
  ``m-mid``, ``m-small``, ``deepseek-r1``: :mod:`inflight.workload.servegen`), or a window of
  a trace file given to the command (Azure 2023, Mooncake, inflight JSONL:
  :mod:`inflight.workload.trace_formats`);
* for ServeGen, 1–4 of the model's busiest clients (picked by their share of its
  requests), each sending a renewal process with Gamma inter-arrival times whose CV (the
  client's burstiness) is drawn within the client's published p10–p90, and lengths drawn
  from the client's published length quantiles (inverse CDF, linear between them; a
  prompt capped at 24,576 tokens and prompt + output at the replica's 32,768);
* **a shape** of the window's rate: ``ramp`` (base, up ×2–4 over 10–40 % of the window,
  held), ``step`` (×2–4 at once), ``decline`` (the ramp reversed) or ``burst`` (the base
  with 1–3 bursts ×3–6 each shorter than a replica's start-up); a trace keeps its own shape;
* **the load**: the peak's offered load is 40–90 % of the largest fleet's capacity
  (offered load: arrivals × a request's busy time on one replica of the simulator's
  profile, :func:`busy_s`); a trace window is scaled in time to that;
* **the stack and SLO**: start-up 15, 30, 60 or 120 s; TTFT ≤ 1, 2 or 4 s; TPOT ≤ 50 or 100 ms;
* **warm or cold**: warm, the window follows ``warmup_s`` (300) seconds of history at the
  window's first rate (a trace: its own seconds before the window), replayed unmeasured;
  cold, no history: the stack enters at its minimum, and a burst at the peak's rate ×1–1.3
  lasting 0.5–1.5 start-ups comes at once (extra requests, the source's lengths).

Everything comes from one ``random.Random(seed)`` and the inputs (the statistics file, the
trace files, ``max_replicas``, the window's length if fixed): the same seed gives the same
requests, bit for bit. Warm and cold draws of one seed share their source, shape, load,
stack and SLO.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inflight.emulator.profile import Profile
from inflight.workload.arrivals import RateSchedule, arrival_times
from inflight.workload.servegen import Client, load
from inflight.workload.trace import PlannedRequest
from inflight.workload.trace_formats import TraceWindow, load_trace

SHAPES = ("ramp", "step", "decline", "burst")
DURATIONS_S = (600.0, 900.0, 1200.0)
STARTUPS_S = (15.0, 30.0, 60.0, 120.0)
SLO_TTFT_S = (1.0, 2.0, 4.0)
SLO_TPOT_S = (0.05, 0.1)
PEAK_LOAD = (0.4, 0.9)  # the peak's offered load, a share of max_replicas replicas
WARMUP_S = 300.0
MAX_PROMPT = 24576
MAX_CONTEXT = 32768  # the simulated replica's max_model_len (Profile)
PROFILE = Profile()


@dataclass(frozen=True)
class Draw:
    """One drawn workload, its stack and its SLO (module docstring)."""

    seed: int
    cold: bool
    source: str  # "servegen:<model>" or "trace:<file name>"
    shape: str  # SHAPES, or "trace"
    duration_s: float
    startup_s: float
    slo_ttft_s: float
    slo_tpot_s: float
    max_replicas: int
    peak_load: float  # offered load at the peak, a share of max_replicas replicas
    params: dict[str, Any]  # the shape's, the clients', the trace window's, the burst's
    warmup_s: float
    warmup: tuple[PlannedRequest, ...] = field(repr=False)
    requests: tuple[PlannedRequest, ...] = field(repr=False)

    def describe(self) -> dict[str, Any]:
        """The draw without its requests (for the report)."""
        return {
            "seed": self.seed,
            "cold": self.cold,
            "source": self.source,
            "shape": self.shape,
            "duration_s": self.duration_s,
            "startup_s": self.startup_s,
            "slo": {"ttft_s": self.slo_ttft_s, "tpot_s": self.slo_tpot_s},
            "max_replicas": self.max_replicas,
            "peak_load": round(self.peak_load, 4),
            "params": self.params,
            "warmup_s": self.warmup_s,
            "warmup_requests": len(self.warmup),
            "requests": len(self.requests),
        }


def busy_s(prompt_tokens: float, output_tokens: float, profile: Profile = PROFILE) -> float:
    """A request's share of one replica's time at a full batch: its decode steps over the
    slots, plus its prefill (the emulator's step model, ``inflight.emulator.profile``)."""
    decode = output_tokens * profile.step_full_s / profile.max_num_seqs
    return decode + profile.prefill_s(int(prompt_tokens))


def _cap(prompt: float, output: float) -> tuple[int, int]:
    p = max(1, min(MAX_PROMPT, round(prompt)))
    return p, max(1, min(MAX_CONTEXT - p, round(output)))


def quantile_value(table: Sequence[float], qs: Sequence[float], u: float) -> float:
    """The inverse CDF at ``u``: linear between the table's quantiles ``qs``."""
    i = min(max(bisect.bisect_right(qs, u), 1), len(qs) - 1)
    q0, q1 = qs[i - 1], qs[i]
    w = 0.0 if q1 == q0 else (u - q0) / (q1 - q0)
    return table[i - 1] + (table[i] - table[i - 1]) * w


Lengths = Callable[[random.Random], tuple[int, int]]


def _client_lengths(client: Client, qs: Sequence[float]) -> Lengths:
    def draw(rng: random.Random) -> tuple[int, int]:
        p = quantile_value(client.input_tokens, qs, rng.random())
        o = quantile_value(client.output_tokens, qs, rng.random())
        return _cap(p, o)

    return draw


def _mean_busy(client: Client, qs: Sequence[float], n: int = 400) -> float:
    """E[busy_s] over the client's length tables (midpoint rule on the quantile scale)."""
    us = [(i + 0.5) / n for i in range(n)]
    p = sum(quantile_value(client.input_tokens, qs, u) for u in us) / n
    o = sum(quantile_value(client.output_tokens, qs, u) for u in us) / n
    return busy_s(*_cap(p, o))


# --- the window's rate: relative points (t_s, multiple of the base rate) --------------------
def _shape_points(
    rng: random.Random, shape: str, d: float, startup_s: float
) -> tuple[list[tuple[float, float]], dict[str, Any]]:
    if shape == "burst":
        m = rng.uniform(3.0, 6.0)
        n = rng.randint(1, 3)
        pts: list[tuple[float, float]] = [(0.0, 1.0)]
        bursts = []
        t = 0.05 * d
        for _ in range(n):
            length = rng.uniform(0.3, 0.9) * startup_s
            start = t + rng.uniform(0.0, 0.3 * d)
            if start + length >= 0.95 * d:
                break
            pts += [(start, 1.0), (start, m), (start + length, m), (start + length, 1.0)]
            bursts.append([round(start, 3), round(length, 3)])
            t = start + length + 0.1 * d
        return [*pts, (d, 1.0)], {"factor": round(m, 4), "bursts": bursts}
    m = rng.uniform(2.0, 4.0)
    a = rng.uniform(0.1, 0.4) * d if shape != "step" else rng.uniform(0.2, 0.6) * d
    b = a if shape == "step" else a + rng.uniform(0.1, 0.4) * d
    lo, hi = (1.0, m) if shape != "decline" else (m, 1.0)
    params = {"factor": round(m, 4), "from_s": round(a, 3), "to_s": round(b, 3)}
    return [(0.0, lo), (a, lo), (b, hi), (d, hi)], params


def _gamma_times(
    schedule: RateSchedule, share: float, cv: float, rng: random.Random
) -> list[float]:
    """A renewal process with Gamma(1/cv², cv²) gaps (mean 1, CV ``cv``) in operational
    time, ``share`` × the schedule's cumulative rate, mapped back to seed time."""
    k = 1.0 / (cv * cv)
    segs = schedule.segments()
    out: list[float] = []
    y = rng.gammavariate(k, 1.0 / k)
    acc = 0.0
    for t0, t1, r0, r1 in segs:
        r0, r1 = r0 * share, r1 * share
        mass = (r0 + r1) / 2.0 * (t1 - t0)
        while y < acc + mass:
            need = y - acc  # solve r0·τ + ½·slope·τ² = need
            slope = (r1 - r0) / (t1 - t0)
            if abs(slope) < 1e-12:
                tau = need / r0
            else:
                tau = (-r0 + math.sqrt(max(0.0, r0 * r0 + 2.0 * slope * need))) / slope
            out.append(min(t0 + tau, math.nextafter(t1, t0)))
            y += rng.gammavariate(k, 1.0 / k)
        acc += mass
    return out


def _clients_requests(
    clients: Sequence[Client],
    shares: Sequence[float],
    cvs: Sequence[float],
    points: list[tuple[float, float]],
    rng: random.Random,
) -> tuple[PlannedRequest, ...]:
    """Each client's renewal process on its share of the rate ``points``, merged by time."""
    schedule = RateSchedule(tuple(points))
    qs = load().quantiles
    reqs: list[PlannedRequest] = []
    for client, share, cv in zip(clients, shares, cvs, strict=True):
        lengths = _client_lengths(client, qs)
        reqs += [PlannedRequest(t, *lengths(rng)) for t in _gamma_times(schedule, share, cv, rng)]
    return tuple(sorted(reqs, key=lambda r: r.t_s))


@dataclass(frozen=True)
class _Source:
    name: str
    lengths: Lengths  # the cold burst's lengths
    window: tuple[PlannedRequest, ...]
    warmup: tuple[PlannedRequest, ...]
    warmup_s: float
    peak_rps: float
    params: dict[str, Any]
    shape: str


def _servegen(
    rng: random.Random, model: str, d: float, startup_s: float, cap_rps: float, warm_s: float
) -> _Source:
    stats = load()
    qs = stats.quantiles
    pool = list(stats.models[model])
    chosen: list[Client] = []
    for _ in range(min(rng.randint(1, 4), len(pool))):
        c = rng.choices(pool, weights=[x.share for x in pool])[0]
        pool.remove(c)
        chosen.append(c)
    total = sum(c.share for c in chosen)
    shares = [c.share / total for c in chosen]
    cvs = [rng.uniform(c.cv[0], c.cv[2]) for c in chosen]
    shape = rng.choice(SHAPES)
    rel, params = _shape_points(rng, shape, d, startup_s)
    busy = sum(s * _mean_busy(c, qs) for s, c in zip(shares, chosen, strict=True))
    peak = cap_rps / busy  # requests/s at the peak
    base = peak / max(m for _, m in rel)
    # The window and the warm-up come from streams of their own, so a seed's warm and cold
    # draws have the same window.
    window_rng, warm_rng = random.Random(rng.getrandbits(64)), random.Random(rng.getrandbits(64))
    window = _clients_requests(chosen, shares, cvs, [(t, m * base) for t, m in rel], window_rng)
    warmup: tuple[PlannedRequest, ...] = ()
    if warm_s:
        level = [(0.0, rel[0][1] * base), (warm_s, rel[0][1] * base)]
        warmup = _clients_requests(chosen, shares, cvs, level, warm_rng)
    mix = [_client_lengths(c, qs) for c in chosen]

    def lengths_mix(r: random.Random) -> tuple[int, int]:
        return r.choices(mix, weights=shares)[0](r)

    params["base_rps"] = round(base, 5)
    params["clients"] = [
        {"id": c.client_id, "share": round(s, 4), "cv": round(cv, 4)}
        for c, s, cv in zip(chosen, shares, cvs, strict=True)
    ]
    return _Source(f"servegen:{model}", lengths_mix, window, warmup, warm_s, peak, params, shape)


def _trace(rng: random.Random, path: Path, d: float, cap_rps_busy: float, warm_s: float) -> _Source:
    whole = load_trace(path, TraceWindow()).requests
    span = whole[-1].t_s
    # the window's length in trace seconds depends on its scale; pick the start on the
    # trace's own clock among the starts leaving room for the warm-up and ~d seconds
    start = rng.uniform(min(warm_s, span), max(min(warm_s, span), span - d))
    inside = [r for r in whole if start <= r.t_s < start + d] or list(whole[-1:])
    busy = sum(busy_s(*_cap(r.prompt_tokens, r.max_tokens)) for r in inside) / len(inside)
    rate = len(inside) / d
    scale = min(20.0, max(0.05, cap_rps_busy / busy / rate))
    loaded = load_trace(path, TraceWindow(start, d * scale, scale, warm_s * scale))
    pool = [(r.prompt_tokens, r.max_tokens) for r in inside]

    def lengths(r: random.Random) -> tuple[int, int]:
        return _cap(*r.choice(pool))

    params = {"trace_start_s": round(start, 3), "rate_scale": round(scale, 5)}
    return _Source(
        f"trace:{path.name}",
        lengths,
        loaded.requests,
        loaded.warmup,
        loaded.warmup_s,
        rate * scale,
        params,
        "trace",
    )


def draw(
    seed: int,
    max_replicas: int,
    cold: bool = False,
    traces: Sequence[Path] = (),
    duration_s: float | None = None,
    warmup_s: float = WARMUP_S,
) -> Draw:
    """The draw of ``seed`` (module docstring): the same inputs, the same requests."""
    if max_replicas < 1:
        raise ValueError(f"--max-replicas: must be >= 1, got {max_replicas}")
    rng = random.Random(seed)
    sources = [*(f"servegen:{m}" for m in sorted(load().models)), *(str(p) for p in traces)]
    picked = rng.choice(sources)
    d = float(rng.choice(DURATIONS_S)) if duration_s is None else float(duration_s)
    startup = rng.choice(STARTUPS_S)
    ttft, tpot = rng.choice(SLO_TTFT_S), rng.choice(SLO_TPOT_S)
    load_share = rng.uniform(*PEAK_LOAD)
    cap = load_share * max_replicas  # replica-seconds a second at the peak
    warm = 0.0 if cold else warmup_s
    if picked.startswith("servegen:"):
        src = _servegen(rng, picked.split(":", 1)[1], d, startup, cap, warm)
    else:
        src = _trace(rng, Path(picked), d, cap, warm)
    params = dict(src.params)
    window = list(src.window)
    # Drawn warm or cold alike (the same stream of numbers for both), used when cold.
    burst_s = rng.uniform(0.5, 1.5) * startup
    burst_rps = src.peak_rps * rng.uniform(1.0, 1.3)
    burst_rng = random.Random(rng.getrandbits(64))
    if cold:
        extra = RateSchedule(((0.0, burst_rps), (min(burst_s, d), burst_rps)))
        times = arrival_times(extra, burst_rng)
        window += [PlannedRequest(t, *src.lengths(burst_rng)) for t in times]
        window.sort(key=lambda r: r.t_s)
        params["cold_burst"] = {"seconds": round(burst_s, 3), "rps": round(burst_rps, 5),
                                "requests": len(times)}  # fmt: skip
    return Draw(
        seed=seed,
        cold=cold,
        source=src.name,
        shape=src.shape,
        duration_s=d,
        startup_s=startup,
        slo_ttft_s=ttft,
        slo_tpot_s=tpot,
        max_replicas=max_replicas,
        peak_load=load_share,
        params=params,
        warmup_s=src.warmup_s,
        warmup=src.warmup,
        requests=tuple(window),
    )
