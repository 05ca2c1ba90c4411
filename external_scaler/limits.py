"""Bounds on what callers can make the scaler hold: open streams and distinct triggers.

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
