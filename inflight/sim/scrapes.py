"""Prometheus in virtual time: the scraped samples and how PromQL reads them back.

The live stack's Prometheus scrapes the router (and the ready replicas) every
``scrape_interval_s`` and the scaler reads L back with one range query
(``external_scaler.sources.promql.range_query``) evaluated at every step of its span. Here
the simulator records what each scrape would have read (:meth:`Scrapes.scrape`) and
answers the range query as Prometheus evaluates it: at each step time ``T`` a series'
value is its newest sample in ``(T − lookback, T]`` (Prometheus' 5-minute lookback delta;
prometheus/promql/engine.go, v2.42.0, the version installed here, ``vectorSelectorSingle``).
The result is handed, as Prometheus' ``matrix`` JSON would be, to the scaler's own
:func:`external_scaler.sources.prometheus.window_from_matrix`: the simulated window is
built by the live code.

Only the simulated router exists, it is never down and never restarts, so the ``down``
series of the query is always empty and the counter never resets.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

from external_scaler.sources.counters import increase as counter_increase
from external_scaler.sources.promql import (
    SIGNAL_ARRIVALS,
    SIGNAL_INFLIGHT,
    SIGNAL_LABEL,
    SIGNAL_READY,
    SIGNAL_SAMPLED,
    RangeQuery,
)

#: Prometheus' default ``--query.lookback-delta``: an instant vector selector finds a
#: sample up to this old.
LOOKBACK_DELTA_S = 300.0

#: The series the simulated scrapes record (names of the live metrics, summed as the
#: queries sum them: one router, so ``sum`` is the router's own value).
INFLIGHT = "router_inflight_requests"
QUEUED = "router_queued_requests"
RECEIVED = "router_requests_received_total"
READY = 'router_endpoints{state="ready"}'
VLLM_WAITING = "sum(vllm:num_requests_waiting)"  # NaN when no replica is scraped
VLLM_RUNNING = "sum(vllm:num_requests_running)"
SERIES = (INFLIGHT, QUEUED, RECEIVED, READY, VLLM_WAITING, VLLM_RUNNING)


@dataclass
class Scrapes:
    """The scraped samples of each series, in time order."""

    times_s: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SERIES})

    def scrape(self, t_s: float, sample: dict[str, float]) -> None:
        """Record one scrape at ``t_s`` (every series of :data:`SERIES` in ``sample``)."""
        if self.times_s and t_s <= self.times_s[-1]:
            raise ValueError(f"scrape at {t_s} is not after the last one ({self.times_s[-1]})")
        self.times_s.append(t_s)
        for name in SERIES:
            self.values[name].append(sample[name])

    def _index_at(self, t_s: float) -> int | None:
        """Index of the newest sample in ``(t − lookback, t]``, or None."""
        i = bisect.bisect_right(self.times_s, t_s) - 1
        if i < 0 or self.times_s[i] <= t_s - LOOKBACK_DELTA_S:
            return None
        return i

    def instant(self, name: str, t_s: float) -> float | None:
        """The series' value at ``t_s`` as an instant query reads it (None: no sample)."""
        i = self._index_at(t_s)
        if i is None:
            return None
        value = self.values[name][i]
        return None if math.isnan(value) else value  # NaN: no series (a sum over nothing)

    def rate(self, name: str, t_s: float, range_s: float) -> float | None:
        """``rate(name[range])`` at ``t_s``, as Prometheus 2.42 computes it (None: < 2 samples).

        prometheus/promql/functions.go (v2.42.0) ``extrapolatedRate``: the increase
        between the first and last samples of ``[t − range, t]``, extrapolated towards the
        range's ends (by at most half a sample interval where the gap is wider than 1.1
        intervals, and not below zero for a counter), divided by the range.
        """
        lo = bisect.bisect_left(self.times_s, t_s - range_s)
        hi = bisect.bisect_right(self.times_s, t_s)
        if hi - lo < 2:
            return None
        times = self.times_s[lo:hi]
        vals = self.values[name][lo:hi]
        increase = 0.0
        for a, b in itertools.pairwise(vals):
            increase += counter_increase(a, b)  # a drop is a counter reset
        first_t, last_t = times[0], times[-1]
        range_start, range_end = t_s - range_s, t_s
        sampled = last_t - first_t
        to_start = first_t - range_start
        to_end = range_end - last_t
        average = sampled / (len(times) - 1)
        if increase > 0 and vals[0] >= 0:
            to_zero = sampled * (vals[0] / increase)
            to_start = min(to_start, to_zero)
        threshold = average * 1.1
        interval = sampled
        interval += to_start if to_start < threshold else average / 2
        interval += to_end if to_end < threshold else average / 2
        return increase * (interval / sampled) / range_s

    def matrix(self, query: RangeQuery, start_s: float, end_s: float) -> dict[str, Any]:
        """``query_range``'s ``data`` for the scaler's range query over ``[start, end]``.

        The router source's signals: L, the received counter (one router: one series),
        the ready endpoints, and ``sampled`` (``min(timestamp(L))``: the newest sample's
        own time). Steps are ``start + i × step`` as Prometheus takes them (whole ms).
        """
        steps = math.floor((end_s - start_s) / query.step_s + 1e-9) + 1
        names = ((SIGNAL_INFLIGHT, INFLIGHT), (SIGNAL_ARRIVALS, RECEIVED), (SIGNAL_READY, READY))
        series: dict[str, list[list[float]]] = {signal: [] for signal, _ in names}
        sampled: list[list[float]] = []
        for k in range(steps):
            t = round(start_s + k * query.step_s, 3)
            i = self._index_at(t)
            if i is None:
                continue
            for signal, name in names:
                series[signal].append([t, self.values[name][i]])
            sampled.append([t, self.times_s[i]])
        result: list[dict[str, Any]] = [
            {"metric": {SIGNAL_LABEL: signal}, "values": values}
            for signal, values in series.items()
            if values
        ]
        if sampled:
            result.append({"metric": {SIGNAL_LABEL: SIGNAL_SAMPLED}, "values": sampled})
        return {"resultType": "matrix", "result": result}
