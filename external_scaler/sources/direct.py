"""The window of L without Prometheus: poll the routers' ``/metrics`` and keep it in memory.

The no-Prometheus default of ``inflight up``. Unlike the Prometheus source, the window
lives in this process: a restarted scaler starts with an empty window, and two scaler
processes poll at different instants. A tick where some router did not answer records the
sum of those that did, and the routers it missed: the window is then partial
(``Window.partial``), and the policy may raise or keep the count on it, never lower it
(``inflight.control.policy.guard``). A tick where none answered records nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from external_scaler.errors import MetadataError, SourceEmpty, SourceError
from external_scaler.metadata import ScalerSpec
from external_scaler.metrics import ScalerMetrics
from external_scaler.sources import Observed
from external_scaler.sources.counters import increase
from inflight import names
from inflight.control.policy import Partial, Sample, Window


@dataclass(frozen=True)
class RouterReading:
    """One router's ``/metrics`` at one instant (summed/maxed across routers later)."""

    inflight: float
    arrivals_total: float | None
    ready_replicas: float | None


def parse_router_metrics(text: str) -> RouterReading:
    """Pick L, arrivals and ready endpoints out of a router's Prometheus text.

    Raises SourceError when ``router_inflight_requests`` is missing.
    """
    inflight = arrivals = ready = None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == names.ROUTER_INFLIGHT:
                inflight = (inflight or 0.0) + sample.value
            elif sample.name == names.ROUTER_REQUESTS_RECEIVED:
                arrivals = (arrivals or 0.0) + sample.value
            elif sample.name == names.ROUTER_ENDPOINTS and sample.labels.get("state") == "ready":
                ready = (ready or 0.0) + sample.value
    if inflight is None:
        raise SourceError(f"the router's /metrics has no {names.ROUTER_INFLIGHT}")
    return RouterReading(inflight, arrivals, ready)


class DirectSource:
    """Polls ``router_urls`` every ``poll_interval_s``; keeps ``retention_s`` of samples."""

    def __init__(
        self,
        router_urls: Sequence[str],
        session: aiohttp.ClientSession,
        metrics: ScalerMetrics,
        *,
        poll_interval_s: float = 0.5,
        # More than the default lookback: the floor's 900 s memory + the 10 s smoothing.
        retention_s: float = 1200.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not router_urls:
            raise ValueError("--router-url: at least one router URL is needed")
        self.router_urls = [u.rstrip("/") for u in router_urls]
        self.session = session
        self.metrics = metrics
        self.poll_interval_s = poll_interval_s
        self.retention_s = retention_s
        self._clock = clock
        self._inflight: deque[Sample] = deque()
        self._arrivals: deque[Sample] = deque()
        self._ready: deque[Sample] = deque()
        # Ticks that missed some router: (time, the routers that did not answer).
        self._missed: deque[tuple[float, tuple[str, ...]]] = deque()
        self._last_error = "no poll has completed yet"
        # Arrivals since the first complete poll, each router's counter resets corrected
        # (a restarted router counts from 0 again), and its latest raw reading.
        self._arrivals_total = 0.0
        self._last_counter: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the polling loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="direct-poll")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            began = time.monotonic()
            await self.poll_once()
            await asyncio.sleep(max(0.0, self.poll_interval_s - (time.monotonic() - began)))

    async def poll_once(self) -> None:
        """Read every router once; record one sample when at least one of them answered
        (marked partial when some did not)."""
        t_s = self._clock()
        timeout = aiohttp.ClientTimeout(total=max(0.2, min(2.0, self.poll_interval_s * 2)))
        began = time.perf_counter()
        results = await asyncio.gather(
            *(self._read(url, timeout) for url in self.router_urls), return_exceptions=True
        )
        self.metrics.query_duration.observe(time.perf_counter() - began)
        readings: dict[str, RouterReading] = {}
        missed = []
        for url, result in zip(self.router_urls, results, strict=True):
            if isinstance(result, BaseException):
                self._last_error = f"router {url}: {result}"
                self.metrics.errors.labels(names.SCALER_ERROR_ROUTER_POLL).inc()
                missed.append(url)
            else:
                readings[url] = result
        if not readings:
            return
        if missed:
            self._append_missed(t_s, tuple(missed))
        self._append(self._inflight, Sample(t_s, sum(r.inflight for r in readings.values())))
        if all(r.arrivals_total is not None for r in readings.values()):
            # A router missing from this tick adds its arrivals when it answers again.
            for url, reading in readings.items():
                counter = reading.arrivals_total or 0.0
                if url in self._last_counter:
                    self._arrivals_total += increase(self._last_counter[url], counter)
                self._last_counter[url] = counter
            self._append(self._arrivals, Sample(t_s, self._arrivals_total))
        ready = [r.ready_replicas for r in readings.values() if r.ready_replicas is not None]
        if ready:  # several routers in front of the same replicas: the max, not the sum
            self._append(self._ready, Sample(t_s, max(ready)))

    async def _read(self, url: str, client_timeout: aiohttp.ClientTimeout) -> RouterReading:
        try:
            async with self.session.get(f"{url}/metrics", timeout=client_timeout) as resp:
                if resp.status != 200:
                    raise SourceError(f"GET {url}/metrics answered HTTP {resp.status}")
                text = await resp.text()
        except TimeoutError as exc:
            raise SourceError(f"GET {url}/metrics timed out") from exc
        except aiohttp.ClientError as exc:
            raise SourceError(f"GET {url}/metrics failed: {exc}") from exc
        return parse_router_metrics(text)

    def _append(self, series: deque[Sample], sample: Sample) -> None:
        series.append(sample)
        while series and series[0].t_s < sample.t_s - self.retention_s:
            series.popleft()

    def _append_missed(self, t_s: float, urls: tuple[str, ...]) -> None:
        self._missed.append((t_s, urls))
        while self._missed and self._missed[0][0] < t_s - self.retention_s:
            self._missed.popleft()

    async def observe(self, spec: ScalerSpec, now_s: float, timeout_s: float) -> Observed:
        if spec.source != "router":
            raise MetadataError(
                names.META_SOURCE,
                '"router" (the direct source reads routers; use --prometheus-url for vllm)',
                spec.source,
            )
        if spec.selector:
            raise MetadataError(
                names.META_SELECTOR,
                '"" (the direct source reads its --router-url routers whole; '
                "label selection needs --prometheus-url)",
                spec.selector,
            )
        if spec.model:
            raise MetadataError(
                names.META_MODEL,
                '"" (the direct source reads its --router-url routers whole; one model '
                "pool's L needs --prometheus-url)",
                spec.model,
            )
        start_s = now_s - spec.policy.lookback_s - self.poll_interval_s
        stale_s = max(3 * self.poll_interval_s, 1.0)
        inflight = tuple(s for s in self._inflight if start_s <= s.t_s <= now_s)
        if not inflight:
            raise SourceEmpty(
                f"no poll of the routers answered in the last {now_s - start_s:g} s "
                f"({self._last_error})"
            )
        partial = []
        # Judged over the decision's span, not the floor's longer memory (policy.py).
        span_s = spec.policy.decision_span_s + self.poll_interval_s
        missed = sorted(
            {url for t_s, urls in self._missed if now_s - span_s <= t_s <= now_s for url in urls}
        )
        if missed:
            partial.append(
                Partial(
                    names.SCALER_ERROR_SOURCE_PARTIAL,
                    f"{len(missed)} router(s) missed a poll in the window (its last "
                    f"{span_s:g} s), so L missed their share: {', '.join(missed)}",
                )
            )
        # Decide as of the newest poll while it is fresh: its sample is the L in effect now,
        # and a zero-length window still holds it. Older, decide as of now on what is left.
        end_s = inflight[-1].t_s
        if end_s < now_s - stale_s:
            partial.append(
                Partial(
                    names.SCALER_ERROR_SOURCE_STALE,
                    f"no poll of the routers answered in the last {now_s - end_s:.1f} s "
                    f"(over {stale_s:g} s): {self._last_error}",
                )
            )
            end_s = now_s
        return Observed(
            window=Window(
                inflight=inflight,
                arrivals_total=tuple(s for s in self._arrivals if start_s <= s.t_s <= end_s),
                ready_replicas=tuple(s for s in self._ready if start_s <= s.t_s <= end_s),
                partial=tuple(partial),
            ),
            end_s=end_s,
        )
