"""A trace window's warm-up, measured out: the one place the simulator and the live bench
keep the warm-up's requests out of a run's figures (issue #24).

A run with a warm-up (``--trace-warmup-s``, :mod:`inflight.workload.trace_formats`) sends the
trace's requests before the window first, ending at the window's start (seed 0), then the
window's. Only the window is measured, alike in ``inflight sim`` (``inflight.sim.core``,
``inflight.sim.report``) and the live bench (``inflight.bench.openloop.run``):

* SLO attainment, latencies and misses: over the window's requests only. Both keep the
  warm-up's requests apart from the start (the simulator's ``SimResult.warmup``, the
  sender's ``OpenLoopRun.warmup``) and hand :func:`inflight.measure.slo.run_measures` the
  window's outcomes;
* replica-seconds, changes and reversals: over [0, end of the traffic]
  (``run_measures(…, 0.0, end_s)``); the replicas at 0 are those the warm-up left;
* Little's Law: the router's L counts every request in flight, so a warm-up request still
  open after 0 is in it. :func:`carried_in_flight_s` is their share of ∫ L dt over the
  window, which both take out before comparing L with the window's λ·W.

Pure: no I/O, no clock; any time unit, as long as it is one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from inflight.measure.slo import value_at


def carried_in_flight_s(
    spans: Iterable[tuple[float, float | None]], start: float, end: float
) -> float:
    """∫ over [start, end] of how many of these requests were in flight: each span is
    (sent, ended), ``ended`` None for a request still open at ``end``.

    >>> carried_in_flight_s([(-5.0, 3.0), (-2.0, None), (-4.0, -1.0)], 0.0, 10.0)
    13.0
    """
    if end < start:
        raise ValueError(f"the window ends ({end}) before it starts ({start})")
    total = 0.0
    for sent, ended in spans:
        stop = end if ended is None else min(ended, end)
        total += max(0.0, stop - max(sent, start))
    return total


def window_l(mean_l: float | None, carried: float, window: float) -> float | None:
    """The router's time-averaged L over a window (``mean_l``, every request in flight) less
    the warm-up's requests still in flight in it (``carried``: :func:`carried_in_flight_s`
    over the same window, ``window`` long); never below 0 (sampling noise)."""
    if mean_l is None:
        return None
    if window <= 0:
        return mean_l
    return max(0.0, mean_l - carried / window)


def warmup_summary(
    planned: int,
    sent: int,
    ok: int,
    unfinished: int,
    duration_s: float,
    live_points: Sequence[tuple[float, int]],
    carried_s: float,
) -> dict[str, Any]:
    """A run's ``warmup`` entry: what was replayed before the window (not measured), and the
    replicas that existed at the window's start (seed 0) after it."""
    return {
        "duration_s": duration_s,
        "requests_planned": planned,
        "requests_sent": sent,
        "ok": ok,
        "unfinished": unfinished,
        "live_replicas_at_window_start": value_at(live_points, 0.0) if live_points else None,
        "in_flight_carried_s": round(carried_s, 4),
    }
