"""The direct source (no Prometheus) against router-like loopback servers.

Each ``FakeRouter`` is a real HTTP server exposing the router's metric names from a
prometheus_client registry whose values the test sets. The source is polled by hand
(``poll_once``) with a clock the test steps, so nothing waits on the wall clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client import CollectorRegistry

from external_scaler.errors import SourceEmpty
from external_scaler.metadata import parse_metadata
from external_scaler.metrics import ScalerMetrics
from external_scaler.sources.direct import DirectSource
from inflight import names
from inflight.control.policy import evaluate
from tests.component.test_scaler_servicer import FakeRouter

# The 60 s window is the subject: the floor (its 900 s memory) off.
# A 60 s window: no floor and no late scale-up's excursions (each on by default, 900 s).
SPEC = parse_metadata(
    {
        "scaleUpWindowSeconds": "0",
        "scaleDownWindowSeconds": "60",
        "queueHeadroom": "0",  # the source's figures: L itself
        "floorWindowSeconds": "0",
        "startupSeconds": "0",
    }
)


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_a_poll_missing_one_router_is_a_partial_sample(
    session: aiohttp.ClientSession,
) -> None:
    """Two routers with L 2 and 3: a poll that reaches only one reads 2, a lower bound of
    L. It is recorded, and the window names the router it missed, so the policy may scale
    up on it or hold, never scale down (before: nothing was recorded, and after 3 poll
    intervals every call was UNAVAILABLE, scale-up included). With no router answering,
    the window's samples are answered as stale until they leave it."""
    a, b = FakeRouter(), FakeRouter()
    registry = CollectorRegistry()
    clock = Clock()
    source = DirectSource(
        [a.url, b.url], session, ScalerMetrics(registry), poll_interval_s=0.5, clock=clock
    )
    try:
        a.inflight.set(2)
        b.inflight.set(3)
        await source.poll_once()
        observed = await source.observe(SPEC, clock.now_s, 1.0)
        assert observed.window.inflight[-1].value == 5.0
        assert observed.window.partial == ()
        b.close()  # router b stops answering
        a.inflight.set(30)  # and a surge arrives at router a
        for _ in range(4):
            clock.now_s += 0.5
            await source.poll_once()
        observed = await source.observe(SPEC, clock.now_s, 1.0)
        assert [s.value for s in observed.window.inflight] == [5.0, 30.0, 30.0, 30.0, 30.0]
        [partial] = observed.window.partial
        assert partial.kind == names.SCALER_ERROR_SOURCE_PARTIAL and b.url in partial.detail
        decision = evaluate(observed.window, SPEC.policy, observed.end_s)
        assert (decision.value, decision.desired_replicas) == (30.0, 8)  # up, on a's share
        kind = {"kind": names.SCALER_ERROR_ROUTER_POLL}
        assert registry.get_sample_value(names.SCALER_ERRORS, kind) == 4.0
        a.close()  # no router answers: the window's samples, stale, as of now
        clock.now_s += 2.0
        await source.poll_once()
        observed = await source.observe(SPEC, clock.now_s, 1.0)
        assert observed.end_s == clock.now_s
        assert {p.kind for p in observed.window.partial} == {
            names.SCALER_ERROR_SOURCE_PARTIAL,
            names.SCALER_ERROR_SOURCE_STALE,
        }
        clock.now_s += 61.0  # past the 60 s window: nothing left to answer on
        with pytest.raises(SourceEmpty, match="no poll of the routers answered"):
            await source.observe(SPEC, clock.now_s, 1.0)
    finally:
        await source.close()
        a.close()
        b.close()


async def test_arrivals_count_across_a_router_restart(session: aiohttp.ClientSession) -> None:
    """Router a: 100 → 130 → restarted, 20 since; router b: 10 → 15 → 20. 60 arrivals,
    not the raw sums' 110 → 145 → 40."""
    a, b = FakeRouter(), FakeRouter()
    clock = Clock()
    source = DirectSource(
        [a.url, b.url], session, ScalerMetrics(CollectorRegistry()), poll_interval_s=0.5,
        clock=clock,
    )  # fmt: skip
    try:
        for a_inc, b_inc, reset in ((100, 10, False), (30, 5, False), (20, 5, True)):
            if reset:
                a.received.reset()
            a.received.inc(a_inc)
            b.received.inc(b_inc)
            await source.poll_once()
            clock.now_s += 0.5
        arrivals = (await source.observe(SPEC, clock.now_s, 1.0)).window.arrivals_total
        assert [s.value for s in arrivals] == [0.0, 35.0, 60.0]
    finally:
        await source.close()
        a.close()
        b.close()
