"""Active health checks: ``GET <endpoint>/health`` on every known endpoint, periodically.

A failed check (non-2xx, refused, reset) makes an endpoint ``unhealthy``; so does the
``--health-timeouts``-th check in a row that timed out (3 by default, Kubernetes' readiness
``failureThreshold``: a real engine's API server shares its cores with the engine and can
answer late under load, and one late answer would take a busy replica out of rotation,
every request then held); a passing check brings an unhealthy one back once its back-off
is over. Health calls go over the shared session but never through the dispatcher, so they
never hold a slot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import aiohttp

from router.dispatch import Dispatcher
from router.pool import DRAINING, READY

log = logging.getLogger(__name__)


OK, FAILED, TIMED_OUT = "ok", "failed", "timed out"


async def probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str:
    """OK when ``url``/health answers 2xx within ``timeout_s`` seconds; TIMED_OUT when it
    does not answer in time; FAILED on a refusal, a reset or another status."""
    try:
        async with session.get(
            url + "/health", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            await resp.read()
            return OK if 200 <= resp.status < 300 else FAILED
    except TimeoutError:  # aiohttp's timeouts (ServerTimeoutError too) are TimeoutErrors
        return TIMED_OUT
    except (aiohttp.ClientError, OSError):
        return FAILED


async def check_once(
    dispatcher: Dispatcher,
    session: aiohttp.ClientSession,
    timeout_s: float,
    backoff_s: float,
    clock: Callable[[], float] = time.monotonic,
    timeouts: int = 1,
) -> None:
    """Probe every non-draining endpoint concurrently and record the results (``timeouts``:
    the timed-out checks in a row that make an endpoint unhealthy)."""
    pool = dispatcher.pool
    urls = [ep.url for ep in pool.endpoints() if ep.state != DRAINING]
    if not urls:
        return
    results = await asyncio.gather(*(probe(session, u, timeout_s) for u in urls))
    now_s = clock()
    changed = False
    for url, result in zip(urls, results, strict=True):
        ep = pool.get(url)
        before = ep.state if ep is not None else None
        late = result == TIMED_OUT
        if pool.health_result(url, result == OK, now_s, backoff_s, late, timeouts):
            log.info("endpoint %s is healthy again", url)
            changed = True
        elif ep is not None and before != ep.state:
            why = f"{ep.timeouts} health checks in a row timed out" if late else "failed"
            log.warning("endpoint %s unhealthy: %s", url, why)
        elif late and ep is not None and ep.state == READY:
            log.info("endpoint %s: health check timed out (%d in a row)", url, ep.timeouts)
    if changed:
        dispatcher.pump()


async def run_health_checks(
    dispatcher: Dispatcher | Callable[[], Sequence[Dispatcher]],
    session_getter: Callable[[], aiohttp.ClientSession],
    interval_s: float,
    timeout_s: float,
    backoff_s: float,
    timeouts: int = 1,
) -> None:
    """Loop forever (cancel to stop): one round of checks every ``interval_s`` seconds.

    ``dispatcher``: the pool's, or a function giving every model pool's (:mod:`router.model_pools`:
    a pool discovery adds later is checked from the next round)."""
    while True:
        # Sleep first: endpoints start ready (discovery only lists serving replicas), and
        # a refused connection marks one unhealthy at once anyway.
        await asyncio.sleep(interval_s)
        try:
            each = dispatcher() if callable(dispatcher) else (dispatcher,)
            await asyncio.gather(
                *(
                    check_once(d, session_getter(), timeout_s, backoff_s, timeouts=timeouts)
                    for d in each
                )
            )
        except Exception:  # a bug here must not stop health checking
            log.exception("health check round failed")
