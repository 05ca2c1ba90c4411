"""One observation of a series (L, the arrivals' running total, the ready count)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sample:
    """One observation: ``value`` at unix time ``t_s`` (seconds)."""

    t_s: float
    value: float
