"""The replica count over time, from ``timeline.jsonl`` of ``inflight up``.

The file is read by :func:`inflight.statedir.read_timeline` (the state directory's
format lives there); this module picks the points of a level and the changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from inflight.statedir import TimelinePoint


def in_window(points: Sequence[TimelinePoint], start_t: float, end_t: float) -> list[TimelinePoint]:
    """Points inside [start_t, end_t], plus the last one before (its value held at the start)."""
    before = [p for p in points if p.t <= start_t]
    inside = [p for p in points if start_t < p.t <= end_t]
    return before[-1:] + inside


def changes(
    points: Sequence[TimelinePoint], field: str = "desired"
) -> list[tuple[float, int, int]]:
    """(t, from, to) for every change of ``field`` ("desired" or "ready") along the points."""
    out: list[tuple[float, int, int]] = []
    prev: int | None = None
    for p in points:
        value = int(getattr(p, field))
        if prev is not None and value != prev:
            out.append((p.t, prev, value))
        prev = value
    return out
