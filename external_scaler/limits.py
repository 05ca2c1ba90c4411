"""Bounds on what callers can make the scaler hold and ask: open streams, distinct
triggers, and the rate of Prometheus range queries.

The gRPC port is reachable by whoever the network lets through (a NetworkPolicy narrows
that to KEDA's operator, ``manifests/base/networkpolicy.yaml``), and every distinct
trigger spec costs a Prometheus range query per cache miss, a cached window and a
coalescing entry; every ``StreamIsActive`` stream is a loop polling its spec forever.
Without bounds, a misconfigured or hostile caller grows both without limit. Past a
bound the servicer answers RESOURCE_EXHAUSTED naming the bound and its flag, and what
is already admitted keeps working.

A trigger counts from its first call until ``trigger_idle_s`` after its last one (a
stream holds its trigger for as long as it is open). KEDA asks each ScaledObject's
trigger every ``pollingInterval`` (30 s by default) and the HPA every 15 s, so the
default 120 s keeps every live trigger admitted and frees a deleted one's slot after
two minutes. Two specs differing in any metadata value are two triggers.

Each trigger's window is fetched at most once per ``--cache-ttl-s`` (calls within it get
the memoized answer), so admitted triggers alone could still make ``max_triggers``
fetches a second, each one to three HTTP range queries. :class:`QueryRate` bounds the
fetches across all triggers: a bucket of ``max_triggers`` fetches (every admitted
trigger can be fetched at once, as the HPA's sync does) refilled at
``--max-queries-per-s``. An answer from the cache, or a fetch already in flight that a
call joins, costs nothing. Off by default in the binary (``inflight up`` scales its
periods by ``--time-scale``, and ``inflight bench scaler`` runs with no cache, so no one
rate fits them); the manifests set 20 a second, which covers 128 triggers polled at
KEDA's and the HPA's default periods (128/30 + 128/15 = 12.8 a second).
``StreamIsActive`` streams each fetch every ``--stream-interval-s``, so with many streams
raise it to streams ÷ interval.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

from external_scaler.errors import ScalerError
from inflight import names

DEFAULT_MAX_STREAMS = 64
DEFAULT_MAX_TRIGGERS = 128
DEFAULT_TRIGGER_IDLE_S = 120.0
DEFAULT_MAX_QUERIES_PER_S = 0.0  # 0: no bound (the manifests set one)


class LimitExceeded(ScalerError):
    """A bound was reached (→ RESOURCE_EXHAUSTED); the message names it and its flag."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class _Trigger:
    holders: int
    last_used_s: float


class Limits:
    """Admission of streams and triggers; one per servicer. Not thread-safe (asyncio)."""

    def __init__(
        self,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        max_triggers: int = DEFAULT_MAX_TRIGGERS,
        trigger_idle_s: float = DEFAULT_TRIGGER_IDLE_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        for flag, value in (("--max-streams", max_streams), ("--max-triggers", max_triggers)):
            if value < 1:
                raise ValueError(f"{flag} must be >= 1, got {value}")
        if not trigger_idle_s > 0:
            raise ValueError(f"--trigger-idle-s must be > 0, got {trigger_idle_s}")
        self.max_streams = max_streams
        self.max_triggers = max_triggers
        self.trigger_idle_s = trigger_idle_s
        self._monotonic = monotonic
        self._streams = 0
        self._triggers: dict[Hashable, _Trigger] = {}

    @property
    def streams(self) -> int:
        """Streams open now."""
        return self._streams

    def triggers(self) -> int:
        """Distinct triggers admitted now (in use, or used within ``trigger_idle_s``)."""
        return len(self.admitted())

    def admitted(self) -> list[Hashable]:
        """The triggers admitted now (in use, or used within ``trigger_idle_s``)."""
        self._expire(self._monotonic())
        return list(self._triggers)

    @contextlib.contextmanager
    def stream(self) -> Iterator[None]:
        """Hold one of ``max_streams`` stream slots for the ``with`` block."""
        if self._streams >= self.max_streams:
            raise LimitExceeded(
                f"{self._streams} StreamIsActive streams are open, the most this scaler "
                f"serves (--max-streams {self.max_streams}); close one or raise the flag",
                names.SCALER_ERROR_TOO_MANY_STREAMS,
            )
        self._streams += 1
        try:
            yield
        finally:
            self._streams -= 1

    @contextlib.contextmanager
    def trigger(self, key: Hashable) -> Iterator[None]:
        """Admit the trigger ``key`` (a parsed spec) for the ``with`` block, and keep it
        admitted ``trigger_idle_s`` after; a new key past ``max_triggers`` is refused."""
        now = self._monotonic()
        entry = self._triggers.get(key)
        if entry is None:
            self._expire(now)
            if len(self._triggers) >= self.max_triggers:
                raise LimitExceeded(
                    f"{len(self._triggers)} distinct triggers were polled in the last "
                    f"{self.trigger_idle_s:g} s, the most this scaler serves "
                    f"(--max-triggers {self.max_triggers}, --trigger-idle-s "
                    f"{self.trigger_idle_s:g}); this new trigger is refused until one idles",
                    names.SCALER_ERROR_TOO_MANY_TRIGGERS,
                )
            entry = self._triggers[key] = _Trigger(0, now)
        entry.holders += 1
        try:
            yield
        finally:
            entry.holders -= 1
            entry.last_used_s = self._monotonic()

    def _expire(self, now: float) -> None:
        idle = [
            key
            for key, t in self._triggers.items()
            if t.holders == 0 and now - t.last_used_s >= self.trigger_idle_s
        ]
        for key in idle:
            del self._triggers[key]


class QueryRate:
    """A token bucket on Prometheus fetches: ``burst`` at once, refilled at
    ``max_per_s``. Not thread-safe (asyncio)."""

    def __init__(
        self,
        max_per_s: float,
        *,
        burst: int = DEFAULT_MAX_TRIGGERS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not max_per_s > 0:
            raise ValueError(f"--max-queries-per-s must be > 0, got {max_per_s}")
        if burst < 1:
            raise ValueError(f"the query burst must be >= 1, got {burst}")
        self.max_per_s = max_per_s
        self.burst = burst
        self._monotonic = monotonic
        self._tokens = float(burst)
        self._at = monotonic()

    def take(self) -> None:
        """Spend one fetch, or raise LimitExceeded naming ``--max-queries-per-s``."""
        now = self._monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.max_per_s)
        self._at = now
        if self._tokens < 1.0:
            raise LimitExceeded(
                f"Prometheus range queries are limited to {self.max_per_s:g} a second "
                f"after a burst of {self.burst} (--max-queries-per-s {self.max_per_s:g}, "
                "burst = --max-triggers), and that is spent; answers within --cache-ttl-s "
                "of a fetch are free. Retry later or raise the flag",
                names.SCALER_ERROR_TOO_MANY_QUERIES,
            )
        self._tokens -= 1.0
