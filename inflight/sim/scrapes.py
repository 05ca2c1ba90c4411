"""Prometheus in virtual time: the scraped samples and how PromQL reads them back.

The live stack's Prometheus scrapes the router (and the ready replicas) every
``scrape_interval_s`` and the scaler reads L back with one range query
(``external_scaler.sources.promql.range_query``) evaluated at every step of its span. Here
the simulator records what each scrape would have read (:meth:`Scrapes.scrape`) and
answers the range query as Prometheus evaluates it: at each step time ``T`` a series'
value is its newest sample in ``[T − lookback, T]`` (Prometheus' 5-minute lookback delta;
prometheus/promql/engine.go, v2.42.0, the version installed here, ``vectorSelectorSingle``:
a sample exactly ``lookback`` old is still read; checked against the real binary by
``tests/integration/test_prometheus_contract.py``).
The result is handed, as Prometheus' ``matrix`` JSON would be, to the scaler's own
:func:`external_scaler.sources.prometheus.window_from_matrix`: the simulated window is
built by the live code.

Router targets that are down. The simulated stack has one router, but Prometheus may
see it as ``routers`` targets that share its load evenly (each exposes ``1/routers`` of
L, of the queue and of the received counter, and the ready count, which every router
sees whole). A :class:`RouterDown` span makes one target's scrapes fail while the router
goes on serving: a router whose ``/metrics`` times out (SIGSTOPped, overloaded), a
network partition, a pod scraped but not ready. Prometheus then does what it does live:

* the failed scrape writes ``up == 0`` and a staleness marker in each of the target's
  series, so an instant query (``sum(router_inflight_requests)``, what a peer reads) sums
  the other targets only: L reads low, or is absent when no router target is up;
* a range selector (``rate()``) skips the stale points; the counter goes on counting
  while it is not scraped, so its next sample carries the increase;
* the scaler's range query has a ``down`` series for the target at the steps whose newest
  ``up`` is 0, if the target exposed L in the last :data:`TARGET_MEMORY_S`
  (``inflight.names.PROMQL_ROUTERS_DOWN``), and the window is built by the live code,
  which marks it partial.

Every target is scraped at the same instant (live, Prometheus spreads them over the
interval). Without a span, one target, never down, the counter never resets: the
simulator as it was.

vLLM's KV series (docs/capacity.md). Each scrape also records what the serving replicas'
engines (``inflight.emulator.engine.Engine``, the emulator's vLLM KV-block model) expose:
Σ ``vllm:kv_cache_usage_perc``, Σ ``vllm:num_requests_waiting_by_reason{reason="capacity"}``
(the emulator defers nothing: every waiting request waits for capacity) and the cache size
``vllm:cache_config_info`` states (``kv_cache_size_tokens``). When the scaler's range query
asks for them (trigger ``capacity`` ``auto``), :meth:`Scrapes.matrix` answers its
``kv_usage``, ``kv_running``, ``kv_waiting`` and ``kv_config`` series from them, as
Prometheus would from the replicas' own scrapes, and the scaler decides on them as it does
live (``external_scaler.decision``). A sum over no replica is no series (NaN here).

The router's token demand (its token admission, docs/capacity.md). Each scrape also
records the simulated router's ``router_endpoint_inflight_tokens`` (summed),
``router_queued_tokens`` and the mean ``router_endpoint_kv_tokens`` over the endpoints with
a known capacity (:func:`router_tokens`, read from the same dispatcher the live router's
``/metrics`` reads); the range query's ``tok_*`` series are answered from them, so the KV
dimension reads the router's exact demand in the simulator as it does live.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from external_scaler.sources.counters import increase as counter_increase
from external_scaler.sources.promql import (
    SIGNAL_ARRIVALS,
    SIGNAL_DOWN,
    SIGNAL_FROZEN,
    SIGNAL_INFLIGHT,
    SIGNAL_KV_CONFIG,
    SIGNAL_KV_RUNNING,
    SIGNAL_KV_USAGE,
    SIGNAL_KV_WAITING,
    SIGNAL_LABEL,
    SIGNAL_READY,
    SIGNAL_TOK_CAPACITY,
    SIGNAL_TOK_INFLIGHT,
    SIGNAL_TOK_QUEUED,
    RangeQuery,
    asks,
)
from inflight import names
from router.dispatch import Dispatcher

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
#: vLLM's KV series (NaN when no replica is scraped; optional in :meth:`Scrapes.scrape`).
KV_USAGE = "sum(vllm:kv_cache_usage_perc)"
KV_WAITING = 'sum(vllm:num_requests_waiting_by_reason{reason="capacity"})'
KV_CACHE_TOKENS = "max(vllm:cache_config_info{kv_cache_size_tokens})"  # the label, as a value
KV_SERIES = (KV_USAGE, KV_WAITING, KV_CACHE_TOKENS)
#: vLLM's prefix-cache counters (tokens), summed over the scraped replicas (prefix caching
#: on; optional). A counter's sum falls when a replica leaves: read it with increase().
PREFIX_QUERIES = "sum(" + names.VLLM_PREFIX_CACHE_QUERIES + ")"
PREFIX_HITS = "sum(" + names.VLLM_PREFIX_CACHE_HITS + ")"
PREFIX_SERIES = (PREFIX_QUERIES, PREFIX_HITS)
#: The router's token demand (optional in :meth:`Scrapes.scrape`; :func:`router_tokens`).
TOK_INFLIGHT = "sum(" + names.ROUTER_ENDPOINT_INFLIGHT_TOKENS + ")"
TOK_QUEUED = "sum(" + names.ROUTER_QUEUED_TOKENS + ")"
TOK_CAPACITY = "avg(" + names.ROUTER_ENDPOINT_KV_TOKENS + " > 0)"  # NaN: none known
TOK_SERIES = (TOK_INFLIGHT, TOK_QUEUED, TOK_CAPACITY)
OPTIONAL_SERIES = frozenset({*KV_SERIES, *TOK_SERIES, *PREFIX_SERIES})
SERIES = (
    INFLIGHT,
    QUEUED,
    RECEIVED,
    READY,
    VLLM_WAITING,
    VLLM_RUNNING,
    *KV_SERIES,
    *TOK_SERIES,
    *PREFIX_SERIES,
)
#: The router targets' series (the rest are the replicas'). Each target exposes its share
#: of these, but of READY and the capacity, which every router exposes whole (the query
#: takes their max, their mean).
ROUTER_SERIES = frozenset({INFLIGHT, QUEUED, RECEIVED, READY, *TOK_SERIES})
SHARED_SERIES = frozenset({INFLIGHT, QUEUED, RECEIVED, TOK_INFLIGHT, TOK_QUEUED})

#: ``inflight.names.TARGET_MEMORY`` (1h): a target down longer is no longer known as a router.
TARGET_MEMORY_S = 3600.0
ROUTER_JOB = "router"


@dataclass(frozen=True)
class RouterDown:
    """Router target ``router`` (0-based) fails its scrapes in ``[from_s, to_s)``."""

    from_s: float
    to_s: float
    router: int = 0

    def covers(self, router: int, t_s: float) -> bool:
        return router == self.router and self.from_s <= t_s < self.to_s


def check_routers(routers: int, down: Sequence[RouterDown], flag: str = "--router-down") -> None:
    """ValueError naming ``flag`` (or ``--routers``) for a span that cannot be."""
    if routers < 1:
        raise ValueError(f"--routers must be ≥ 1, got {routers}")
    for d in down:
        if not (math.isfinite(d.from_s) and math.isfinite(d.to_s) and d.from_s < d.to_s):
            raise ValueError(f"{flag}: FROM must be before TO, got {d.from_s:g}:{d.to_s:g}")
        if not 0 <= d.router < routers:
            raise ValueError(f"{flag}: router {d.router} of --routers {routers} (0-based)")


@dataclass
class Scrapes:
    """The scraped samples of each series, in time order.

    ``values`` holds what the router (all its targets together) and the replicas exposed
    at each scrape, scraped or not; ``up`` which router targets answered it."""

    routers: int = 1
    down: tuple[RouterDown, ...] = ()
    times_s: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in SERIES})
    up: list[tuple[bool, ...]] = field(default_factory=list)
    # per scrape, per target: when it last answered (None: never), for the target memory
    last_up_s: list[tuple[float | None, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.down = tuple(self.down)
        check_routers(self.routers, self.down)

    def scrape(self, t_s: float, sample: dict[str, float]) -> None:
        """Record one scrape at ``t_s`` (every series of :data:`SERIES` in ``sample``; those
        of :data:`KV_SERIES` and :data:`TOK_SERIES` may be left out: no such series, as from
        a replica or a router without them)."""
        if self.times_s and t_s <= self.times_s[-1]:
            raise ValueError(f"scrape at {t_s} is not after the last one ({self.times_s[-1]})")
        self.times_s.append(t_s)
        for name in SERIES:
            self.values[name].append(
                sample.get(name, math.nan) if name in OPTIONAL_SERIES else sample[name]
            )
        up = tuple(not any(d.covers(k, t_s) for d in self.down) for k in range(self.routers))
        before = self.last_up_s[-1] if self.last_up_s else (None,) * self.routers
        self.up.append(up)
        self.last_up_s.append(tuple(t_s if u else b for u, b in zip(up, before, strict=True)))

    def _router_value(self, name: str, i: int) -> float | None:
        """``sum`` (``max`` for READY) over the router targets that answered scrape ``i``
        of their share of ``name``; None when none did (every one's series stale)."""
        n_up = sum(self.up[i])
        if n_up == 0:
            return None
        value = self.values[name][i]
        return value if name not in SHARED_SERIES else value * n_up / self.routers

    def _known_down(self, i: int, t_s: float) -> list[int]:
        """Targets down at scrape ``i`` that exposed L within the target memory of ``t_s``."""
        return [
            k
            for k, (up, last) in enumerate(zip(self.up[i], self.last_up_s[i], strict=True))
            if not up and last is not None and last > t_s - TARGET_MEMORY_S
        ]

    def _index_at(self, t_s: float) -> int | None:
        """Index of the newest sample in ``[t − lookback, t]``, or None."""
        i = bisect.bisect_right(self.times_s, t_s) - 1
        if i < 0 or self.times_s[i] < t_s - LOOKBACK_DELTA_S:
            return None
        return i

    def instant(self, name: str, t_s: float) -> float | None:
        """The series' value at ``t_s`` as an instant query reads it (None: no sample)."""
        i = self._index_at(t_s)
        if i is None:
            return None
        if name in ROUTER_SERIES:
            found = self._router_value(name, i)
            if found is None:
                return None
            value = found
        else:
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
        if name not in ROUTER_SERIES:
            return _extrapolated_rate(self.times_s[lo:hi], self.values[name][lo:hi], t_s, range_s)
        # sum(rate(...)): one series per router target, its stale points skipped
        total: float | None = None
        share = 1.0 if name not in SHARED_SERIES else 1.0 / self.routers
        for k in range(self.routers):
            kept = [j for j in range(lo, hi) if self.up[j][k]]
            one = _extrapolated_rate(
                [self.times_s[j] for j in kept],
                [self.values[name][j] * share for j in kept],
                t_s,
                range_s,
            )
            if one is not None:
                total = one if total is None else total + one
        return total

    def matrix(self, query: RangeQuery, start_s: float, end_s: float) -> dict[str, Any]:
        """``query_range``'s ``data`` for the scaler's range query over ``[start, end]``.

        The router source's signals: L (summed over the router targets up), the received
        counter (one series per target), the ready endpoints (their max), the targets
        ``down`` (``up == 0``, known as routers), and ``frozen`` (how many of L's series
        had no sample within ``query.max_sample_age_s``, where any had none: the routers
        that answered the newest scrape, which is that old). Steps are ``start + i × step``
        as Prometheus takes them (whole ms).
        """
        steps = math.floor((end_s - start_s) / query.step_s + 1e-9) + 1
        inflight: list[list[float]] = []
        ready: list[list[float]] = []
        frozen: list[list[float]] = []
        arrivals: list[list[list[float]]] = [[] for _ in range(self.routers)]
        down: list[list[list[float]]] = [[] for _ in range(self.routers)]
        share = 1.0 / self.routers
        for k in range(steps):
            t = round(start_s + k * query.step_s, 3)
            i = self._index_at(t)
            if i is None:
                continue
            for r in self._known_down(i, t):
                down[r].append([t, 0.0])  # `up == 0` keeps up's value
            value = self._router_value(INFLIGHT, i)
            if value is None:
                continue
            inflight.append([t, value])
            ready.append([t, self.values[READY][i]])
            if t - self.times_s[i] > query.max_sample_age_s:
                frozen.append([t, float(sum(self.up[i]))])
            for r, up in enumerate(self.up[i]):
                if up:
                    arrivals[r].append([t, self.values[RECEIVED][i] * share])
        result: list[dict[str, Any]] = []
        for signal, values in ((SIGNAL_INFLIGHT, inflight), (SIGNAL_READY, ready)):
            if values:
                result.append({"metric": {SIGNAL_LABEL: signal}, "values": values})
        for signal, per_target in ((SIGNAL_ARRIVALS, arrivals), (SIGNAL_DOWN, down)):
            for r, values in enumerate(per_target):
                if values:
                    labels = {SIGNAL_LABEL: signal, "job": ROUTER_JOB, "instance": f"router-{r}"}
                    result.append({"metric": labels, "values": values})
        if frozen:
            result.append({"metric": {SIGNAL_LABEL: SIGNAL_FROZEN}, "values": frozen})
        # the KV series: the query has them when the trigger's ``capacity`` is auto
        if asks(query, SIGNAL_KV_USAGE):
            result.extend(self._kv_matrix(query, start_s, steps))
        if asks(query, SIGNAL_TOK_INFLIGHT):
            result.extend(self._tok_matrix(query, start_s, steps))
        return {"resultType": "matrix", "result": result}

    def _tok_matrix(self, query: RangeQuery, start_s: float, steps: int) -> list[dict[str, Any]]:
        """The range query's router token series: at each step the router targets' newest
        scrape (summed over those up, as L is), where the router exposed them; the capacity
        only where an endpoint's is known."""
        series: dict[str, list[list[float]]] = {
            SIGNAL_TOK_INFLIGHT: [],
            SIGNAL_TOK_QUEUED: [],
            SIGNAL_TOK_CAPACITY: [],
        }
        for k in range(steps):
            t = round(start_s + k * query.step_s, 3)
            i = self._index_at(t)
            if i is None:
                continue
            for signal, name in (
                (SIGNAL_TOK_INFLIGHT, TOK_INFLIGHT),
                (SIGNAL_TOK_QUEUED, TOK_QUEUED),
                (SIGNAL_TOK_CAPACITY, TOK_CAPACITY),
            ):
                value = self._router_value(name, i)
                if value is not None and not math.isnan(value):
                    series[signal].append([t, value])
        return [
            {"metric": {SIGNAL_LABEL: signal}, "values": values}
            for signal, values in series.items()
            if values
        ]

    def _kv_matrix(self, query: RangeQuery, start_s: float, steps: int) -> list[dict[str, Any]]:
        """The range query's KV series (trigger ``capacity`` ``auto``): at each step the
        replicas' newest scrape in the lookback, where any replica was scraped (a sum over
        no series is no sample). ``kv_config``: one series (the replicas are alike), its
        ``kv_cache_size_tokens`` label the cache size, its value 1 as vLLM's info metric."""
        series: dict[str, list[list[float]]] = {
            SIGNAL_KV_USAGE: [],
            SIGNAL_KV_RUNNING: [],
            SIGNAL_KV_WAITING: [],
        }
        config: list[list[float]] = []
        tokens = math.nan
        for k in range(steps):
            t = round(start_s + k * query.step_s, 3)
            i = self._index_at(t)
            if i is None or math.isnan(self.values[KV_USAGE][i]):
                continue
            series[SIGNAL_KV_USAGE].append([t, self.values[KV_USAGE][i]])
            series[SIGNAL_KV_RUNNING].append([t, self.values[VLLM_RUNNING][i]])
            waiting = self.values[KV_WAITING][i]
            if not math.isnan(waiting):
                series[SIGNAL_KV_WAITING].append([t, waiting])
            size = self.values[KV_CACHE_TOKENS][i]
            if not math.isnan(size):
                config.append([t, 1.0])
                tokens = size
        out = [
            {"metric": {SIGNAL_LABEL: signal}, "values": values}
            for signal, values in series.items()
            if values
        ]
        if config:
            labels = {
                SIGNAL_LABEL: SIGNAL_KV_CONFIG,
                names.VLLM_CACHE_SIZE_TOKENS_LABEL: f"{tokens:.0f}",
            }
            out.append({"metric": labels, "values": config})
        return out


def router_tokens(dispatcher: Dispatcher) -> dict[str, float]:
    """What the router's ``/metrics`` exposes of its token demand (``router/metrics.py``),
    as the range query aggregates it: Σ tokens in flight over its endpoints, the tokens
    held, and the mean capacity over the endpoints with one known (NaN: none)."""
    urls = [view.url for view in dispatcher.pool.snapshot()]
    known = [c for c in (dispatcher.kv_capacity(u) or 0 for u in urls) if c > 0]
    return {
        TOK_INFLIGHT: float(sum(dispatcher.tokens_in_flight(u) for u in urls)),
        TOK_QUEUED: float(dispatcher.queued_tokens),
        TOK_CAPACITY: sum(known) / len(known) if known else math.nan,
    }


def _extrapolated_rate(
    times: Sequence[float], vals: Sequence[float], t_s: float, range_s: float
) -> float | None:
    """``rate()`` of one series' samples in ``[t − range, t]`` (None: fewer than two)."""
    if len(times) < 2:
        return None
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
