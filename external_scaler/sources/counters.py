"""Counters across restarts: Prometheus' reset rule, defined once (pure).

Both scaler sources use it, and so does the simulator (its Prometheus' ``rate()``,
``inflight.sim.scrapes``, and the trace rebuilt from scraped counters,
``inflight.sim.trace_rebuild``).

A router that restarts starts its ``router_requests_received_total`` from 0. Summing the
raw counters over routers and subtracting, as the qps baseline once did, reads that drop
as "no arrivals" (or as negative ones). Prometheus' ``increase()`` and ``rate()`` treat a
drop as a reset: the counter restarted from 0, so the new value is all new arrivals.
Here the same rule runs per counter *before* summing, because a reset of one router
cannot be told apart from the others' growth once the counters are added up.

Worked example: router A reads 100, 100, 30 (restarted, 30 new) and router B reads 10,
15, 20. Raw sums 110, 115, 50: "-60 arrivals". Per counter: A adds 0 then 30, B adds 5
then 5, so the total since the first sample is 0, 5, 40, and 40 requests arrived.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from inflight.control.policy import Sample


def is_reset(previous: float, current: float) -> bool:
    """Whether the counter restarted from 0 between two readings: its value fell.

    >>> is_reset(100.0, 30.0), is_reset(100.0, 100.0)
    (True, False)
    """
    return not current >= previous


def increase(previous: float, current: float) -> float:
    """Arrivals between two readings of one counter; a drop means it restarted from 0.

    >>> increase(100.0, 130.0), increase(100.0, 30.0)
    (30.0, 30.0)
    """
    return current if is_reset(previous, current) else current - previous


def running_total(samples: Sequence[Sample]) -> list[Sample]:
    """One counter's increase since its first sample, resets counted as restarts from 0.

    The first sample is the baseline (0), as in Prometheus' ``increase()``: what a counter
    held before the window is not an arrival inside it.
    """
    out: list[Sample] = []
    total = 0.0
    previous: float | None = None
    for sample in sorted(samples, key=lambda s: s.t_s):
        if previous is not None:
            total += increase(previous, sample.value)
        previous = sample.value
        out.append(Sample(sample.t_s, total))
    return out


def counter_total(series: Iterable[Sequence[Sample]]) -> tuple[Sample, ...]:
    """The summed running totals of several counters, at every time any of them has a sample.

    A counter contributes 0 before its first sample and holds its last total after its
    last one (a router that went away keeps the arrivals it counted), so the sum never
    falls. Differences of the result are arrivals, whatever restarted in between.
    """
    totals = [t for t in (running_total(s) for s in series) if t]
    stamps = [[s.t_s for s in total] for total in totals]
    out = []
    for t_s in sorted({t for ts in stamps for t in ts}):
        value = 0.0
        for total, ts in zip(totals, stamps, strict=True):
            i = bisect.bisect_right(ts, t_s)
            if i > 0:
                value += total[i - 1].value
        out.append(Sample(t_s, value))
    return tuple(out)
