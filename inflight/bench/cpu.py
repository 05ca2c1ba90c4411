"""CPU accounting: on two shared cores, CPU is the enemy of honest numbers.

The bench reports how much CPU it used itself (process time) and how busy the whole
machine was during each level (``/proc/stat``), so a reader can see whether the load
generator or a saturated machine, rather than the service, limited a result.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuMark:
    """A reading to subtract from a later one."""

    process_s: float  # this process: user + system CPU seconds
    busy_ticks: int  # machine: non-idle jiffies, all cores
    total_ticks: int


def mark() -> CpuMark:
    busy, total = _machine_ticks()
    return CpuMark(process_s=time.process_time(), busy_ticks=busy, total_ticks=total)


def since(before: CpuMark, after: CpuMark) -> tuple[float, float | None]:
    """(process CPU seconds, machine busy fraction 0..1 or None) between two marks."""
    total = after.total_ticks - before.total_ticks
    busy = None if total <= 0 else (after.busy_ticks - before.busy_ticks) / total
    return after.process_s - before.process_s, busy


def _machine_ticks() -> tuple[int, int]:
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return 0, 0
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return sum(values) - idle, sum(values)


def cores() -> int:
    return os.cpu_count() or 1
