"""The endpoint pool: which replicas exist, their state, and how many requests each holds.

Pure: no I/O, no asyncio, no clock (times come in as ``now_s``). The pool is the single
source of truth for per-endpoint in-flight counts, so the metrics, ``/router/status``
and the dispatch decision all read the same numbers.

Endpoint lifecycle (why it matters: the seed rebuilt its endpoint list every 2 s and lost
the counts):

* an endpoint that stays in the discovered list keeps its count;
* a removed endpoint becomes ``draining``: it gets no new requests, stays visible until
  its last request ends, then disappears;
* a new endpoint starts ``ready`` with 0 in flight;
* a refused/reset connection makes it ``unhealthy`` until a health check passes after
  the back-off (``unhealthy_until_s``).

Dispatch (``choose``): the ready endpoint with the fewest requests in flight, ties broken
at random. With 2 endpoints × 4 slots and 16 concurrent requests this keeps the two
counts within 1 of each other, where ``random.choice`` splits 8/8 only ~20% of the time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

READY = "ready"
DRAINING = "draining"
UNHEALTHY = "unhealthy"
# Serves another model than the pool's (a single-pool router, router/model_check.py): no
# request goes there; only a change of what it serves brings it back.
WRONG_MODEL = "wrong_model"


class EndpointError(ValueError):
    """An endpoint URL is not a usable ``http://host:port`` base URL."""


def normalize_url(url: str) -> str:
    """``http://HOST:PORT[/]`` → ``http://host:port``; rejects paths, queries and users.

    The base URL comes from discovery, never from a request, so nothing a client sends
    can choose or alter the upstream address.

    >>> normalize_url("http://127.0.0.1:8000/")
    'http://127.0.0.1:8000'
    """
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise EndpointError(f"endpoint {url!r}: scheme must be http or https")
    if not parts.hostname or parts.username or parts.password:
        raise EndpointError(f"endpoint {url!r}: expected http://host:port")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise EndpointError(f"endpoint {url!r}: a base URL has no path, query or fragment")
    try:
        port = parts.port
    except ValueError as exc:
        raise EndpointError(f"endpoint {url!r}: bad port") from exc
    host = parts.hostname
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme}://{netloc}"


def endpoint_label(url: str) -> str:
    """The ``endpoint`` metric label: ``host:port`` of a known endpoint."""
    return url.split("://", 1)[-1]


@dataclass(eq=False)
class Endpoint:
    """One upstream replica. Mutable on purpose: the pool owns it and updates it in place,
    so a request holding a reference releases on the same object even after a rediscovery.
    """

    url: str
    label: str
    state: str = READY
    inflight: int = 0
    unhealthy_until_s: float = 0.0
    removed: bool = False  # set once the pool forgot it (drained)
    timeouts: int = 0  # health checks timed out in a row (a passing one resets it)


@dataclass(frozen=True)
class EndpointView:
    """A snapshot row for status and metrics."""

    url: str
    label: str
    state: str
    inflight: int


class Pool:
    """Endpoints and their in-flight counts. ``slots`` is vLLM's ``--max-num-seqs``."""

    def __init__(
        self, slots: int, dispatch: str = "least-outstanding", rng: random.Random | None = None
    ) -> None:
        if slots < 1:
            raise ValueError(f"slots per endpoint must be ≥ 1, got {slots}")
        if dispatch not in ("least-outstanding", "random"):
            raise ValueError(f"dispatch must be least-outstanding or random, got {dispatch!r}")
        self.slots = slots
        self.dispatch = dispatch
        self._rng = rng or random.Random()
        self._endpoints: dict[str, Endpoint] = {}
        # Told the URLs each set_endpoints added, before it returns (so before the caller
        # pumps held requests): router.kv_discovery reads their KV capacity at once.
        self.on_added: Callable[[list[str]], None] | None = None

    # --- discovery -------------------------------------------------------------------
    def set_endpoints(self, urls: Iterable[str]) -> tuple[list[str], list[str]]:
        """Apply a discovered list; return (added, removed) URLs. Counts survive."""
        wanted = list(dict.fromkeys(normalize_url(u) for u in urls))
        added: list[str] = []
        removed: list[str] = []
        for url in wanted:
            ep = self._endpoints.get(url)
            if ep is None:
                self._endpoints[url] = Endpoint(url=url, label=endpoint_label(url))
                added.append(url)
            elif ep.state == DRAINING:
                ep.state = READY  # came back before it drained: keep its count
        wanted_set = set(wanted)
        for url, ep in list(self._endpoints.items()):
            if url not in wanted_set and ep.state != DRAINING:
                ep.state = DRAINING
                removed.append(url)
            if ep.state == DRAINING and ep.inflight == 0:
                self._forget(ep)
        if added and self.on_added is not None:
            self.on_added(added)
        return added, removed

    def _forget(self, ep: Endpoint) -> None:
        ep.removed = True
        self._endpoints.pop(ep.url, None)

    # --- the model it serves (router/model_check.py) -----------------------------------
    def set_model_match(self, url: str, ok: bool) -> bool:
        """Whether ``url`` serves the pool's model: out of rotation when not
        (``wrong_model``), back in (``ready``; the health checks go on as usual) when it does
        again. Returns whether its state changed; a draining or unknown endpoint: False."""
        ep = self._endpoints.get(url)
        if ep is None or ep.state == DRAINING:
            return False
        if not ok and ep.state != WRONG_MODEL:
            ep.state = WRONG_MODEL
            return True
        if ok and ep.state == WRONG_MODEL:
            ep.state = READY
            return True
        return False

    # --- health ----------------------------------------------------------------------
    def mark_unhealthy(self, ep: Endpoint, now_s: float, backoff_s: float) -> None:
        """No new requests to ``ep`` until a health check passes after ``backoff_s``."""
        if ep.state == READY or ep.state == UNHEALTHY:
            ep.state = UNHEALTHY
            ep.unhealthy_until_s = max(ep.unhealthy_until_s, now_s + backoff_s)

    def health_result(
        self,
        url: str,
        ok: bool,
        now_s: float,
        backoff_s: float,
        timed_out: bool = False,
        timeouts: int = 1,
    ) -> bool:
        """Record an active health check; True when the endpoint became ready.

        A failed check marks a ready endpoint unhealthy at once, unless it ``timed_out``:
        a busy engine's API server answers late, so only the ``timeouts``-th timeout in a
        row does (``--health-timeouts``). A refusal or an error answer is a dead or failing
        engine and counts at once.
        """
        ep = self._endpoints.get(url)
        if ep is None or ep.state == DRAINING:
            return False
        if not ok:
            ep.timeouts = ep.timeouts + 1 if timed_out else 0
            if timed_out and ep.timeouts < timeouts and ep.state == READY:
                return False
            self.mark_unhealthy(ep, now_s, backoff_s)
            return False
        ep.timeouts = 0
        if ep.state == UNHEALTHY and now_s >= ep.unhealthy_until_s:
            ep.state = READY
            return True
        return False

    # --- dispatch ----------------------------------------------------------------------
    def choose(
        self, below_slots: bool, fits: Callable[[Endpoint], bool] | None = None
    ) -> Endpoint | None:
        """The ready endpoint with the fewest in flight (random among ties), or None.

        ``below_slots``: only endpoints with a free slot (``--hold-when-full``). ``fits``:
        only endpoints it accepts (the dispatcher's token admission, router/dispatch.py).
        """
        best: list[Endpoint] = []
        best_n = 1 << 62
        limit = self.slots if below_slots else best_n
        for ep in self._endpoints.values():
            if ep.state != READY or ep.inflight >= limit:
                continue
            if fits is not None and not fits(ep):
                continue
            if self.dispatch == "random":
                best.append(ep)
            elif ep.inflight < best_n:
                best_n = ep.inflight
                best = [ep]
            elif ep.inflight == best_n:
                best.append(ep)
        if not best:
            return None
        return best[0] if len(best) == 1 else self._rng.choice(best)

    def has_free_slot(self) -> bool:
        """Whether a ready endpoint has a free slot (:meth:`choose` with ``below_slots``,
        without its tie-break draw)."""
        slots = self.slots
        return any(e.state == READY and e.inflight < slots for e in self._endpoints.values())

    def acquire(self, ep: Endpoint) -> None:
        ep.inflight += 1

    def release(self, ep: Endpoint) -> None:
        """Give a slot back (exactly once per acquire); a drained endpoint disappears."""
        if ep.inflight <= 0:
            raise RuntimeError(f"release without acquire on {ep.url}")
        ep.inflight -= 1
        if ep.state == DRAINING and ep.inflight == 0 and not ep.removed:
            self._forget(ep)

    # --- views -------------------------------------------------------------------------
    def get(self, url: str) -> Endpoint | None:
        return self._endpoints.get(url)

    def endpoints(self) -> list[Endpoint]:
        return list(self._endpoints.values())

    def snapshot(self) -> list[EndpointView]:
        return [
            EndpointView(url=e.url, label=e.label, state=e.state, inflight=e.inflight)
            for e in self._endpoints.values()
        ]

    def has_ready(self) -> bool:
        return any(e.state == READY for e in self._endpoints.values())

    def count_by_state(self) -> dict[str, int]:
        counts = {READY: 0, DRAINING: 0, UNHEALTHY: 0, WRONG_MODEL: 0}
        for e in self._endpoints.values():
            counts[e.state] += 1
        return counts
