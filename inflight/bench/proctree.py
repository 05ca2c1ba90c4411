"""What a stack started, read from ``/proc``: descendants and their CPU (their listening
ports: :func:`inflight.ports.ports_of`).

``inflight up`` puts every replica in its own process group, so its processes are found by
walking parent PIDs from its PID, not by group. The bench snapshots the tree while the
stack runs and, after stopping it, proves every PID is gone and every port is free
(the seed's orphaned vLLM workers kept GPU memory and ports: docs/workload.md, trap 1).
"""

from __future__ import annotations

import os
from pathlib import Path


def _proc_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (ppid, state, utime+stime ticks) for every process we can read."""
    table: dict[int, tuple[int, str, int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            rest = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
            table[int(entry.name)] = (int(rest[1]), rest[0], int(rest[11]) + int(rest[12]))
        except (OSError, IndexError, ValueError):
            continue
    return table


def descendants(root_pid: int, include_root: bool = False) -> set[int]:
    """PIDs of every live (non-zombie) descendant of ``root_pid``, any process group."""
    table = _proc_table()
    found: set[int] = set()
    for pid, (_ppid, state, _cpu) in table.items():
        if state in ("Z", "X"):
            continue
        p = pid
        while p and p != root_pid:
            p = table.get(p, (0, "", 0))[0]
        if p == root_pid and (include_root or pid != root_pid):
            found.add(pid)
    return found


def tree_cpu_s(root_pid: int) -> float:
    """CPU seconds (user + system) of ``root_pid`` and its live descendants.

    Processes that already exited (a replica scaled down) no longer count, so this is a
    lower bound; the machine-wide busy fraction in each level is the upper one.
    """
    table = _proc_table()
    pids = descendants(root_pid, include_root=True)
    ticks = sum(table[p][2] for p in pids if p in table)
    return ticks / os.sysconf("SC_CLK_TCK")


def alive(pids: set[int]) -> set[int]:
    """The subset of ``pids`` still alive (zombies count as gone)."""
    table = _proc_table()
    return {p for p in pids if p in table and table[p][1] not in ("Z", "X")}
