"""Active health checks: ``GET <endpoint>/health`` on every known endpoint, periodically.

A failed check (non-2xx, refused, timeout) makes an endpoint ``unhealthy``; a passing
check brings an unhealthy one back once its back-off is over. Health calls go over the
shared session but never through the dispatcher, so they never hold a slot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

import aiohttp

from router.dispatch import Dispatcher
from router.pool import DRAINING

log = logging.getLogger(__name__)


async def probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    """True when ``url``/health answers 2xx within ``timeout_s`` seconds."""
    try:
        async with session.get(
            url + "/health", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            await resp.read()
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def check_once(
    dispatcher: Dispatcher,
    session: aiohttp.ClientSession,
    timeout_s: float,
    backoff_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Probe every non-draining endpoint concurrently and record the results."""
    pool = dispatcher.pool
    urls = [ep.url for ep in pool.endpoints() if ep.state != DRAINING]
    if not urls:
        return
    results = await asyncio.gather(*(probe(session, u, timeout_s) for u in urls))
    now_s = clock()
    changed = False
    for url, ok in zip(urls, results, strict=True):
        ep = pool.get(url)
        before = ep.state if ep is not None else None
        if pool.health_result(url, ok, now_s, backoff_s):
            log.info("endpoint %s is healthy again", url)
            changed = True
        elif ep is not None and before != ep.state:
            log.warning("endpoint %s failed its health check; unhealthy", url)
    if changed:
        dispatcher.pump()


async def run_health_checks(
    dispatcher: Dispatcher | Callable[[], Sequence[Dispatcher]],
    session_getter: Callable[[], aiohttp.ClientSession],
    interval_s: float,
    timeout_s: float,
    backoff_s: float,
) -> None:
    """Loop forever (cancel to stop): one round of checks every ``interval_s`` seconds.

    ``dispatcher``: the pool's, or a function giving every model pool's (:mod:`router.models`:
    a pool discovery adds later is checked from the next round)."""
    while True:
        # Sleep first: endpoints start ready (discovery only lists serving replicas), and
        # a refused connection marks one unhealthy at once anyway.
        await asyncio.sleep(interval_s)
        try:
            each = dispatcher() if callable(dispatcher) else (dispatcher,)
            await asyncio.gather(
                *(check_once(d, session_getter(), timeout_s, backoff_s) for d in each)
            )
        except Exception:  # a bug here must not stop health checking
            log.exception("health check round failed")
