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
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from external_scaler.errors import SourceEmpty, SourceError, SourceRejected, SourceTimeout
from external_scaler.metadata import ScalerSpec
from external_scaler.metrics import ScalerMetrics
from external_scaler.policy import Sample, Window
from external_scaler.sources import Observed
from external_scaler.sources.promql import (
    SIGNAL_ARRIVALS,
    SIGNAL_INFLIGHT,
    SIGNAL_LABEL,
    SIGNAL_READY,
    RangeQuery,
    range_query,
)


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
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session
        self.metrics = metrics
        self.bearer_token = bearer_token
        self.cache_ttl_s = cache_ttl_s
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
        params = {
            "query": query.expr,
            "start": f"{start_s:.3f}",
            "end": f"{end_s:.3f}",
            "step": f"{query.step_s:g}",
            "timeout": f"{max(1, int(timeout_s * 1000))}ms",
        }
        headers = {}
        if self.bearer_token is not None:
            headers["Authorization"] = self.bearer_token.header()
        url = f"{self.base_url}/api/v1/query_range"
        began = time.perf_counter()
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
        finally:
            self.metrics.query_duration.observe(time.perf_counter() - began)
        payload = _decode(body, status, self.base_url)
        window = _window(payload, query, start_s, end_s)
        return Observed(window=window, end_s=end_s)


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


def _window(data: dict[str, Any], query: RangeQuery, start_s: float, end_s: float) -> Window:
    series: dict[str, tuple[Sample, ...]] = {}
    for item in data.get("result", []):
        try:
            signal = item["metric"].get(SIGNAL_LABEL, "")
            samples = tuple(
                Sample(float(t), float(v)) for t, v in item["values"] if math.isfinite(float(v))
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SourceError(f"Prometheus answered a malformed series: {exc!r}") from exc
        series[signal] = samples
    inflight = series.get(SIGNAL_INFLIGHT, ())
    span = end_s - start_s
    if not inflight:
        raise SourceEmpty(
            f"Prometheus has no sample of L in the last {span:g} s "
            f"(is it scraping the router? query: {query.expr.split(' or ')[0]})"
        )
    newest = inflight[-1].t_s
    if newest < end_s - 2 * query.step_s:
        raise SourceEmpty(
            f"the newest sample of L in Prometheus is {end_s - newest:.1f} s old "
            "(the router's series went stale: is its target up?)"
        )
    return Window(
        inflight=inflight,
        arrivals_total=series.get(SIGNAL_ARRIVALS, ()),
        ready_replicas=series.get(SIGNAL_READY, ()),
    )
