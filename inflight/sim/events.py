"""The virtual clock: a queue of timed callbacks, run in time order.

Events at the same instant run by ``priority`` (lower first), then in the order they were
scheduled, so a run is a pure function of its inputs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from itertools import count

Callback = Callable[[], None]


class EventQueue:
    """``at(t, fn)`` schedules; ``run_until(t)`` runs every event up to ``t``; ``now_s`` is
    the time of the event running (or of the last one)."""

    def __init__(self, start_s: float) -> None:
        self.now_s = start_s
        self._heap: list[tuple[float, int, int, Callback]] = []
        self._order = count()

    def at(self, t_s: float, fn: Callback, priority: int = 0) -> None:
        if t_s < self.now_s:
            raise ValueError(f"event at {t_s} is in the past (now {self.now_s})")
        heapq.heappush(self._heap, (t_s, priority, next(self._order), fn))

    def next_s(self) -> float | None:
        return self._heap[0][0] if self._heap else None

    def run_until(self, end_s: float, stop: Callable[[], bool] | None = None) -> None:
        """Run events with ``t ≤ end_s`` in order; stop early when ``stop()`` turns true."""
        heap = self._heap
        while heap and heap[0][0] <= end_s:
            t_s, _, _, fn = heapq.heappop(heap)
            self.now_s = t_s
            fn()
            if stop is not None and stop():
                return
        self.now_s = max(self.now_s, end_s)
