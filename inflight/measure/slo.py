"""SLO arithmetic for open-loop runs: attainment, latency percentiles, replica-seconds.

Pure: no I/O, no clock. Every time here is in *seed* seconds relative to the run's start
(wall seconds ÷ time-scale, as in :mod:`inflight.measure.stats`). :func:`run_measures` is the one
function both the live bench and the simulator call to judge a run.

Definitions:

* TTFT = first − sent; TPOT = (end − first) / (output_tokens − 1), undefined for a single
  token (such a request meets the TPOT target); E2E = end − sent.
* A request *meets the SLO* when it finished OK with TTFT ≤ ``ttft_s`` and TPOT ≤ ``tpot_s``.
  ``slo_attainment`` is the share of SENT requests that met it (a failed or unfinished
  request counts against it).
* Every sent request that missed is counted once in ``misses``, under the first cause that
  applies: its failure cause (``http_429``, ``http_503``, ``http_<code>``,
  ``error:<ExceptionName>``, ``incomplete_stream``, ``unfinished``), else ``slo_ttft``, else
  ``slo_tpot``. So ``requests_sent − sum(misses) = requests met``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from inflight.measure.records import RequestRecord
from inflight.measure.stats import percentile

PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class SloSpec:
    """Per-request targets in seed seconds: time to first token and time per output token."""

    ttft_s: float
    tpot_s: float

    def __post_init__(self) -> None:
        if not (self.ttft_s > 0 and self.tpot_s > 0):
            raise ValueError(f"SLO targets must be > 0, got ttft {self.ttft_s}, tpot {self.tpot_s}")


DEFAULT_SLO = SloSpec(ttft_s=2.0, tpot_s=0.05)
"""TTFT ≤ 2.0 s and TPOT ≤ 0.05 s, sized on the reference replica (inflight/emulator/profile.py).

The replica has 4 slots; a reference request (3,000 in, 300 out) takes 4.5 s at a full
batch, so a full replica frees a slot every 4.5 / 4 ≈ 1.1 s on average. A request that gets a
slot at once sees its first token after one prefill (3,000 × 20 ms/1k = 0.06 s) and one
step: ≈ 0.1 s. TTFT ≤ 2.0 s therefore allows about one slot turnover of queueing (plus
margin for a long prompt's prefill) — a request that waits behind a whole batch (4.5 s) misses.
Queueing is what under-provisioning produces, so TTFT is the target autoscaling moves.

A full-batch decode step is 14.2 ms warm and 22.7 ms cold (×1.6); with prefills amortised a
full batch streams one token per 15 ms warm, 24 ms cold. TPOT ≤ 0.05 s is twice the cold
figure: every healthy replica meets it at any batch size, so a TPOT miss means streaming
stalled (an overloaded machine, a buffering hop), not a scaling decision.
"""


@dataclass(frozen=True)
class Outcome:
    """One sent request, in seed seconds from the run's start.

    ``first_s``/``end_s`` are None when the first token / the end never came; ``cause`` is
    None for an OK request, else one of the causes in the module docstring.
    """

    sent_s: float
    first_s: float | None
    end_s: float | None
    output_tokens: int
    ok: bool
    cause: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_s is None else self.first_s - self.sent_s

    @property
    def e2e_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.sent_s

    @property
    def tpot_s(self) -> float | None:
        """(end − first) / (tokens − 1); None with fewer than 2 tokens or no first/end."""
        if self.first_s is None or self.end_s is None or self.output_tokens < 2:
            return None
        return (self.end_s - self.first_s) / (self.output_tokens - 1)


_HTTP = re.compile(r"HTTP (\d{3})\b")
_EXC = re.compile(r"([A-Za-z_][A-Za-z0-9_.]*):")


def cause_of(error: str) -> str:
    """A failed record's error text (inflight/bench/loadgen.py ``send_one``) to a cause.

    >>> cause_of("HTTP 503: no ready endpoint"), cause_of("ClientPayloadError: oops")
    ('http_503', 'error:ClientPayloadError')
    """
    text = error.strip()
    if m := _HTTP.match(text):
        return f"http_{m.group(1)}"
    if text.startswith("stream ended without [DONE]"):
        return "incomplete_stream"
    if m := _EXC.match(text):
        return f"error:{m.group(1)}"
    return "error:unknown"


def outcome_from_record(
    record: RequestRecord, t0_wall: float, time_scale: float, unfinished: bool = False
) -> Outcome:
    """A client record (unix seconds) to an Outcome (seed seconds from ``t0_wall``).

    ``unfinished``: the request was still open at the drain limit; its end is unknown
    (``end_s`` None) and its cause ``unfinished`` whatever the record says.
    """
    if time_scale <= 0:
        raise ValueError(f"time_scale must be > 0, got {time_scale}")

    def seed(t: float) -> float:
        return (t - t0_wall) / time_scale

    first = None if record.first_token_t is None else seed(record.first_token_t)
    if unfinished:
        return Outcome(seed(record.start_t), first, None, record.output_tokens, False, "unfinished")
    if record.ok:
        return Outcome(seed(record.start_t), first, seed(record.end_t), record.output_tokens, True)
    return Outcome(
        seed(record.start_t),
        first,
        seed(record.end_t),
        record.output_tokens,
        False,
        cause_of(record.error),
    )


def _pcts(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {f"p{q}": percentile(values, q) for q in PERCENTILES}


def miss_cause(outcome: Outcome, spec: SloSpec) -> str | None:
    """Why this request missed the SLO (see the precedence above); None when it met it."""
    if not outcome.ok:
        return outcome.cause or "error:unknown"
    ttft = outcome.ttft_s if outcome.ttft_s is not None else outcome.e2e_s
    if ttft is None or ttft > spec.ttft_s:
        return "slo_ttft"
    tpot = outcome.tpot_s
    if tpot is not None and tpot > spec.tpot_s:
        return "slo_tpot"
    return None


def slo_measures(outcomes: Sequence[Outcome], spec: SloSpec) -> dict[str, Any]:
    """Attainment, percentiles over OK requests, and misses by cause (module docstring).

    Keys: requests_sent, requests_ok, requests_met, slo_attainment (None when nothing was
    sent), ttft_s, tpot_s, e2e_s (each {p50, p95, p99} or None), misses, slo.
    """
    ok = [o for o in outcomes if o.ok]
    misses: dict[str, int] = {}
    for o in outcomes:
        cause = miss_cause(o, spec)
        if cause is not None:
            misses[cause] = misses.get(cause, 0) + 1
    met = len(outcomes) - sum(misses.values())
    return {
        "requests_sent": len(outcomes),
        "requests_ok": len(ok),
        "requests_met": met,
        "slo_attainment": met / len(outcomes) if outcomes else None,
        "ttft_s": _pcts([v for o in ok if (v := o.ttft_s) is not None]),
        "tpot_s": _pcts([v for o in ok if (v := o.tpot_s) is not None]),
        "e2e_s": _pcts([v for o in ok if (v := o.e2e_s) is not None]),
        "misses": dict(sorted(misses.items())),
        "slo": asdict(spec),
    }


def _sorted(points: Sequence[tuple[float, int]]) -> list[tuple[float, int]]:
    return sorted(points, key=lambda p: p[0])  # stable: of equal times, the last one wins


def value_at(points: Sequence[tuple[float, int]], t_s: float) -> int:
    """The step function's value at ``t_s``: the last point at or before it, 0 before all."""
    value = 0
    for t, n in _sorted(points):
        if t > t_s:
            break
        value = n
    return value


def replica_seconds(points: Sequence[tuple[float, int]], start_s: float, end_s: float) -> float:
    """∫ n dt over [start_s, end_s] of the step function ``[(t_s, n), ...]``.

    A value holds until the next point; the last point before ``start_s`` carries in; before
    the first point the value is 0. Example: [(0, 2), (10, 3)] over [5, 20] is
    2 × 5 + 3 × 10 = 40.
    """
    if end_s < start_s:
        raise ValueError(f"replica_seconds: window [{start_s}, {end_s}] ends before it starts")
    total = 0.0
    t_prev, n_prev = start_s, value_at(points, start_s)
    for t, n in _sorted(points):
        if t <= start_s:
            continue
        if t >= end_s:
            break
        total += n_prev * (t - t_prev)
        t_prev, n_prev = t, n
    return total + n_prev * (end_s - t_prev)


def changes_and_reversals(points: Sequence[tuple[float, int]]) -> tuple[int, int]:
    """(changes of n, direction reversals between consecutive changes), in time order.

    Example: n = 1, 2, 2, 3, 1, 2 → changes 4 (1→2, 2→3, 3→1, 1→2), reversals 2 (up→down at
    3→1, down→up at 1→2).
    """
    changes = reversals = 0
    last_dir = 0
    values = [n for _, n in _sorted(points)]
    for prev, cur in itertools.pairwise(values):
        if cur == prev:
            continue
        direction = 1 if cur > prev else -1
        changes += 1
        if last_dir and direction != last_dir:
            reversals += 1
        last_dir = direction
    return changes, reversals


def pareto_front(points: Mapping[str, tuple[float, float]]) -> set[str]:
    """Names not dominated: a point is (replica_seconds_ratio ↓ better, slo_attainment ↑ better).

    A dominates B when A is no worse in both and better in one; equal points are both kept.
    """
    front = set()
    for name, (cost, att) in points.items():
        dominated = any(
            c <= cost and a >= att and (c < cost or a > att)
            for other, (c, a) in points.items()
            if other != name
        )
        if not dominated:
            front.add(name)
    return front


def _window(
    points: Sequence[tuple[float, int]], start_s: float, end_s: float
) -> list[tuple[float, int]]:
    """The value carried in at ``start_s`` followed by the points inside (start_s, end_s]."""
    inside = [(t, n) for t, n in _sorted(points) if start_s < t <= end_s]
    return [(start_s, value_at(points, start_s)), *inside]


def run_measures(
    outcomes: Sequence[Outcome],
    live_points: Sequence[tuple[float, int]],
    desired_points: Sequence[tuple[float, int]],
    spec: SloSpec,
    start_s: float,
    end_s: float,
) -> dict[str, Any]:
    """One run's figures: :func:`slo_measures` plus replica-seconds and scaling churn.

    ``replica_seconds`` integrates the *live* replicas (starting, ready, draining, stopping)
    over [start_s, end_s]; ``mean_replicas`` is that ÷ the window; ``changes`` and
    ``reversals`` count the *desired* replica count's moves inside the window (the value at
    ``start_s`` is the baseline, so the initial setting is not a change).
    """
    measures = slo_measures(outcomes, spec)
    rs = replica_seconds(live_points, start_s, end_s)
    changes, reversals = changes_and_reversals(_window(desired_points, start_s, end_s))
    measures.update(
        {
            "replica_seconds": rs,
            "mean_replicas": rs / (end_s - start_s) if end_s > start_s else None,
            "changes": changes,
            "reversals": reversals,
        }
    )
    return measures
