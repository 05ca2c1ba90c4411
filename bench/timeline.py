"""Reads ``timeline.jsonl`` of ``inflight up``: the replica count over time.

One JSON line per change and per poll: ``{"t": unix seconds, "desired": n, "ready": n}``
(docs/ARCHITECTURE.md). Malformed lines are reported with their line number.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from bench.model import TimelinePoint


class TimelineError(ValueError):
    """A timeline line is not what ARCHITECTURE.md says."""


def parse_timeline(text: str, source: str = "timeline.jsonl") -> list[TimelinePoint]:
    points: list[TimelinePoint] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            points.append(
                TimelinePoint(
                    t=float(doc["t"]), desired=int(doc["desired"]), ready=int(doc["ready"])
                )
            )
        except (ValueError, KeyError, TypeError) as exc:
            # The writer may be mid-line when we read: a bad *last* line is skipped.
            if n == len(text.splitlines()) and not text.endswith("\n"):
                break
            raise TimelineError(f"{source}:{n}: {exc}: {line[:200]!r}") from exc
    return points


def read_timeline(path: Path) -> list[TimelinePoint]:
    if not path.exists():
        return []
    return parse_timeline(path.read_text(encoding="utf-8"), str(path))


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
