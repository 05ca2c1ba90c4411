"""The window of L from Prometheus: one range query per trigger, cached about a second.

Window state lives in Prometheus, not here: two scaler processes, or one just
restarted, read the same samples and answer the same. KEDA calls GetMetricSpec →
GetMetrics → IsActive each poll; the cache (``cache_ttl_s``, keyed by the query) and
the coalescing of concurrent identical queries make that one query.

Why aiohttp and not prometheus-api-client: the servicer is asyncio (grpc.aio) and the
client library is blocking ``requests``; a query must honour the call's deadline, which
aiohttp's per-request timeout does without a thread per call.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from external_scaler.errors import (
    SourceEmpty,
    SourceError,
    SourceRejected,
    SourceTimeout,
)
from external_scaler.limits import QueryRate
from external_scaler.metadata import ScalerSpec
from external_scaler.metrics import ScalerMetrics
from external_scaler.sources import Observed
from external_scaler.sources.counters import counter_total
from external_scaler.sources.promql import (
    MAX_SAMPLE_AGE_SCRAPES,
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
    range_query,
)
from inflight import names
from inflight.control.capacity import KvWindow, token_capacity
from inflight.control.policy import Partial, Sample, Window

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Cached:
    fetched_mono_s: float
    observed: Observed


class BearerToken:
    """A bearer token read from a file, re-read when the file changes (rotated secrets)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mtime_ns = -1
        self._token = ""
        self.header()  # fail at start-up, naming the flag, if the file is unreadable

    def header(self) -> str:
        try:
            mtime = self.path.stat().st_mtime_ns
            if mtime != self._mtime_ns:
                self._token = self.path.read_text().strip()
                self._mtime_ns = mtime
        except OSError as exc:
            raise SourceError(
                f"cannot read --prometheus-bearer-token-file {self.path}: {exc}"
            ) from exc
        return f"Bearer {self._token}"


class PrometheusSource:
    """Range queries against ``base_url``'s HTTP API (``/api/v1/query_range``)."""

    def __init__(
        self,
        base_url: str,
        session: aiohttp.ClientSession,
        metrics: ScalerMetrics,
        *,
        bearer_token: BearerToken | None = None,
        cache_ttl_s: float = 1.0,
        query_rate: QueryRate | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session
        self.metrics = metrics
        self.bearer_token = bearer_token
        self.cache_ttl_s = cache_ttl_s
        # Fetches across all triggers (None: unbounded); a cached answer or a joined fetch
        # is free (external_scaler.limits).
        self.query_rate = query_rate
        self._monotonic = monotonic
        self._cache: dict[RangeQuery, _Cached] = {}
        self._pending: dict[RangeQuery, asyncio.Future[Observed]] = {}

    async def observe(self, spec: ScalerSpec, now_s: float, timeout_s: float) -> Observed:
        query = range_query(spec)
        cached = self._cache.get(query)
        if cached is not None and self._monotonic() - cached.fetched_mono_s < self.cache_ttl_s:
            return cached.observed
        task = self._pending.get(query)
        if task is None:
            if self.query_rate is not None:
                self.query_rate.take()  # LimitExceeded → RESOURCE_EXHAUSTED
            # The query runs as its own task, so a caller that gives up (its deadline, or
            # KEDA cancelling) does not cancel it for the callers sharing it. It is bounded
            # by its own HTTP timeout.
            task = asyncio.get_running_loop().create_task(
                self._fetch_and_cache(query, now_s, timeout_s)
            )
            self._pending[query] = task
            task.add_done_callback(functools.partial(self._done, query))
        return await asyncio.wait_for(asyncio.shield(task), timeout_s)

    async def _fetch_and_cache(self, query: RangeQuery, now_s: float, timeout_s: float) -> Observed:
        mono = self._monotonic()
        observed = await self._fetch(query, now_s, timeout_s)
        if self.cache_ttl_s > 0:
            self._evict(mono)
            self._cache[query] = _Cached(mono, observed)
        return observed

    def _done(self, query: RangeQuery, task: asyncio.Task[Observed]) -> None:
        if self._pending.get(query) is task:
            del self._pending[query]
        if not task.cancelled():
            task.exception()  # retrieved here, so an error nobody awaited is not logged

    async def close(self) -> None:
        """Cancel queries in flight and forget cached windows (the session is the caller's)."""
        for task in list(self._pending.values()):
            task.cancel()
        self._pending.clear()
        self._cache.clear()

    def _evict(self, mono: float) -> None:
        expired = [k for k, v in self._cache.items() if mono - v.fetched_mono_s >= self.cache_ttl_s]
        for key in expired:
            del self._cache[key]

    async def _fetch(self, query: RangeQuery, now_s: float, timeout_s: float) -> Observed:
        start_s, end_s = query.bounds(now_s)
        began = time.perf_counter()
        tasks = [
            asyncio.ensure_future(self._range(expr, query, start_s, end_s, timeout_s))
            for expr in query.requests
        ]
        try:
            answers = await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:  # the first failure stands; the others are not left running
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        finally:
            self.metrics.query_duration.observe(time.perf_counter() - began)
        # Each request's series carry their own signal: together they are the whole
        # query's answer (``a or b`` of parts that share no labels is their union).
        data = {**answers[0], "result": [item for a in answers for item in a.get("result", [])]}
        return observed_from_matrix(data, query, start_s, end_s)

    async def _range(
        self, expr: str, query: RangeQuery, start_s: float, end_s: float, timeout_s: float
    ) -> dict[str, Any]:
        """One ``query_range`` request's ``data`` (errors mapped as :func:`_decode` maps them)."""
        params = {
            "query": expr,
            "start": f"{start_s:.3f}",
            "end": f"{end_s:.3f}",
            "step": f"{query.step_s:g}",
            "timeout": f"{max(1, int(timeout_s * 1000))}ms",
        }
        headers = {}
        if self.bearer_token is not None:
            headers["Authorization"] = self.bearer_token.header()
        url = f"{self.base_url}/api/v1/query_range"
        try:
            async with self.session.get(
                url,
                params=params,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                body = await resp.text()
                status = resp.status
        except TimeoutError as exc:
            raise SourceTimeout(
                f"Prometheus at {self.base_url} did not answer within {timeout_s:.2f} s"
            ) from exc
        except aiohttp.ClientError as exc:
            raise SourceError(f"Prometheus at {self.base_url} is unreachable: {exc}") from exc
        return _decode(body, status, self.base_url)


def observed_from_matrix(
    data: dict[str, Any], query: RangeQuery, start_s: float, end_s: float
) -> Observed:
    """What the source observed from the range query's answer over ``[start_s, end_s]``:
    the policy's window (:func:`window_from_matrix`; SourceError and SourceEmpty as it
    raises them) and the KV series (:func:`kv_from_matrix`). Pure: the simulator
    (``inflight/sim/scaler.py``) calls it on its simulated scrapes' matrix, as this
    source does on Prometheus' answer."""
    series = _parse(data)  # once for both: the answer's values are most of the call's cost
    window = _window(series, query, start_s, end_s)
    return Observed(window=window, end_s=end_s, kv=_kv(series))


def kv_from_matrix(data: dict[str, Any]) -> KvWindow:
    """vLLM's KV series and the router's token demand from the range query's answer
    (empty when it has none): the summed usage, running and waiting-for-capacity steps,
    the largest cache size any replica's ``vllm:cache_config_info`` states, and the
    router's tokens in flight, held and per replica. SourceError on a malformed series,
    as :func:`window_from_matrix` (the same parse)."""
    return _kv(_parse(data))


# The answer's series by signal (the value of SIGNAL_LABEL), each as (labels, samples), in
# the answer's order.
_Series = dict[str, list[tuple[dict[str, str], tuple[Sample, ...]]]]


def _samples(values: Any) -> tuple[Sample, ...]:
    """A series' ``[t, "v"]`` pairs as samples, non-finite values left out (each value
    parsed once: over 1,810 steps this is most of a GetMetrics call's own time)."""
    out: list[Sample] = []
    finite = math.isfinite
    for t, v in values:
        value = float(v)
        if finite(value):
            out.append(Sample(float(t), value))
    return tuple(out)


def _parse(data: dict[str, Any]) -> _Series:
    """Every series of the answer by signal; SourceError on a malformed one."""
    series: _Series = {}
    for item in data.get("result", []):
        try:
            labels = {str(k): str(v) for k, v in item["metric"].items()}
            samples = _samples(item["values"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SourceError(f"Prometheus answered a malformed series: {exc!r}") from exc
        series.setdefault(labels.get(SIGNAL_LABEL, ""), []).append((labels, samples))
    return series


def _kv(series: _Series) -> KvWindow:
    """:func:`kv_from_matrix` on parsed series (a summed signal's last series stands)."""
    sums = {signal: found[-1][1] for signal, found in series.items() if signal in _SUMMED}
    tokens = [
        size
        for labels, _ in series.get(SIGNAL_KV_CONFIG, [])
        if (size := token_capacity(labels)) is not None
    ]
    return KvWindow(
        usage=sums.get(SIGNAL_KV_USAGE, ()),
        running=sums.get(SIGNAL_KV_RUNNING, ()),
        waiting_capacity=sums.get(SIGNAL_KV_WAITING, ()),
        tokens_per_replica=max(tokens) if tokens else None,
        router_inflight_tokens=sums.get(SIGNAL_TOK_INFLIGHT, ()),
        router_queued_tokens=sums.get(SIGNAL_TOK_QUEUED, ()),
        router_capacity_tokens=sums.get(SIGNAL_TOK_CAPACITY, ()),
    )


# The range query's signals that are one summed (or averaged) series each.
_SUMMED = frozenset(
    {
        SIGNAL_KV_USAGE,
        SIGNAL_KV_RUNNING,
        SIGNAL_KV_WAITING,
        SIGNAL_TOK_INFLIGHT,
        SIGNAL_TOK_QUEUED,
        SIGNAL_TOK_CAPACITY,
    }
)


def _decode(body: str, status: int, base_url: str) -> dict[str, Any]:
    """Prometheus' JSON envelope → its ``data``; errors mapped to the source error tree."""
    try:
        payload = json.loads(body)
    except ValueError:
        raise SourceError(
            f"Prometheus at {base_url} answered HTTP {status} with a body that is not JSON: "
            f"{body[:200]!r}"
        ) from None
    if not isinstance(payload, dict):
        raise SourceError(f"Prometheus at {base_url} answered HTTP {status} with {body[:200]!r}")
    if payload.get("status") != "success":
        error_type = payload.get("errorType", "")
        message = (
            f"Prometheus rejected the query ({error_type}): {payload.get('error', body[:200])}"
        )
        if error_type == "bad_data":
            raise SourceRejected(message + " (check the selector metadata)")
        if error_type == "timeout":
            raise SourceTimeout(message)
        raise SourceError(message)
    data = payload.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise SourceError(f"Prometheus answered an unexpected result: {body[:200]!r}")
    return data


def window_from_matrix(
    data: dict[str, Any], query: RangeQuery, start_s: float, end_s: float
) -> Window:
    """The policy's window from the range query's series; SourceEmpty when it has no L.

    Pure (it logs a partial L, nothing else): ``data`` is the ``data`` of Prometheus'
    ``query_range`` answer (``resultType: matrix``). The simulator (``inflight/sim/``) evaluates
    the same range query on its simulated scrapes and hands the matrix to this function,
    so simulated and live windows are built by one piece of code.

    Refused only when there is no sample of L at all. What makes L a lower bound is
    returned with the window (``Window.partial``), for the policy to answer with a raise or
    a hold, never a drop (``inflight.control.policy.guard``): a target that feeds L down at
    any step of the decision's span, the window's last ``query.partial_span_s`` (the sum
    missed its share there, perhaps at the peak; a target down only before that span,
    within the floor's longer memory, leaves the window whole); L's
    newest step long before ``end_s`` (its series were marked stale); the newest *sample*
    of L older than ``query.max_sample_age_s`` (a frozen series that Prometheus fills steps
    from for up to 5 minutes; those steps are dropped).
    """
    return _window(_parse(data), query, start_s, end_s)


def _window(series: _Series, query: RangeQuery, start_s: float, end_s: float) -> Window:
    """:func:`window_from_matrix` on parsed series."""

    def one(signal: str) -> tuple[Sample, ...]:
        found = series.get(signal, [])
        return found[0][1] if found else ()

    inflight = one(SIGNAL_INFLIGHT)
    span = end_s - start_s
    if not inflight:
        raise SourceEmpty(
            f"Prometheus has no sample of L in the last {span:g} s "
            f"(is it scraping the router? query: {query.expr.split(' or ')[0]})"
        )
    partial: list[Partial] = []
    at_end = end_s - query.step_s / 2  # a step's timestamp is end_s up to float noise
    # Down at a step the decision rests on; a step's timestamp may sit a float's noise
    # below the span's start.
    span_start = end_s - query.partial_span_s - query.step_s / 2
    down = sorted(
        (_target(labels), samples[-1].t_s)
        for labels, samples in series.get(SIGNAL_DOWN, [])
        if samples and samples[-1].t_s >= span_start
    )
    if down:
        named = ", ".join(
            f"{target} ({'now' if t_s >= at_end else f'until {end_s - t_s:.1f} s ago'})"
            for target, t_s in down
        )
        within = "the window" + (
            "" if math.isinf(query.partial_span_s) else f" (its last {query.partial_span_s:g} s)"
        )
        log.warning("L is partial: targets down in %s: %s", within, named)
        partial.append(
            Partial(
                names.SCALER_ERROR_SOURCE_PARTIAL,
                f"{len(down)} target(s) feeding L were down in {within}, so L missed "
                f"their share: {named}",
            )
        )
    newest = inflight[-1].t_s
    if newest < end_s - 2 * query.step_s:
        partial.append(
            Partial(
                names.SCALER_ERROR_SOURCE_STALE,
                f"the newest sample of L in Prometheus is {end_s - newest:.1f} s old "
                "(the router's series went stale: is its target up?)",
            )
        )
    frozen = one(SIGNAL_FROZEN)
    inflight = _observed_steps(inflight, frozen)
    if frozen and frozen[-1].t_s >= at_end and frozen[-1].value > 0:
        partial.append(
            Partial(
                names.SCALER_ERROR_SOURCE_STALE,
                f"{frozen[-1].value:g} of L's series had no new sample in the "
                f"{query.max_sample_age_s:g} s allowed ({MAX_SAMPLE_AGE_SCRAPES} x metadata "
                f"key {names.META_SCRAPE_INTERVAL_S!r}): Prometheus is filling steps from "
                "a series that stopped updating",
            )
        )
    if not inflight:
        raise SourceEmpty(
            f"Prometheus has no fresh sample of L in the last {span:g} s: "
            + "; ".join(p.detail for p in partial)
        )
    return Window(
        inflight=inflight,
        arrivals_total=counter_total(samples for _, samples in series.get(SIGNAL_ARRIVALS, [])),
        ready_replicas=one(SIGNAL_READY),
        partial=tuple(partial),
    )


def _observed_steps(inflight: tuple[Sample, ...], frozen: tuple[Sample, ...]) -> tuple[Sample, ...]:
    """L's steps less those where some series of L had no sample within the allowed age.

    A target that stopped being scraped without a staleness marker (Prometheus itself
    down, then restarted) leaves its last sample standing for up to 5 minutes: the steps
    of that stretch repeat it. They are not observations of L, so they are dropped; the
    policy then sees the gap and will not scale down on the window.
    """
    if not frozen:
        return inflight
    stale = {s.t_s for s in frozen if s.value > 0}
    return tuple(s for s in inflight if s.t_s not in stale)


def _target(labels: dict[str, str]) -> str:
    """``job/instance`` of a target, for messages and logs."""
    return f"{labels.get('job', '?')}/{labels.get('instance', '?')}"
