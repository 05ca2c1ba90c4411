"""Process groups a killed ``inflight up`` left behind, found again and stopped.

A clean exit stops every group. But ``kill -9`` of ``inflight up`` (or a crash of the
machine's OOM killer) leaves its children running in their own sessions — the seed's
trap 1: orphaned vLLM workers kept GPU memory and the next start failed. So the stack
keeps ``children.json`` in its state dir: one entry per process group it started, with
the leader's start time from /proc and the PID and start time of every member alive when
it was written (the stack rewrites it as members come and go). The next ``inflight up`` on
the same state dir stops a group, by process group and never by pattern, when it is still
the same group:

* its leader is still that same process (PID *and* start time match, so a recycled PID
  is never touched), or
* the leader is gone but a recorded member lives on, with its recorded start time and
  still in that process group (a vLLM leader that crashed and left its workers holding
  the GPU). A member's PID alone could be recycled too; with its start time it cannot.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from inflight.procs import ManagedProcess, group_alive, group_pids, start_time

log = logging.getLogger("inflight.up.orphans")


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def record(path: Path, procs: Iterable[ManagedProcess]) -> None:
    """Write the groups we run now, each with its live members (atomically)."""
    rows = []
    for proc in procs:
        if proc.pgid is None:
            continue
        started = start_time(proc.pgid)
        members = [[pid, t] for pid in group_pids(proc.pgid) if (t := start_time(pid)) is not None]
        if started is not None or members:
            rows.append(
                {"pgid": proc.pgid, "start_time": started, "name": proc.label, "members": members}
            )
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(rows) + "\n")
    os.replace(tmp, path)


def still_ours(row: dict[str, object]) -> bool:
    """True when the group ``row`` recorded is still that group (see the module doc)."""
    pgid = int(row["pgid"])  # type: ignore[call-overload]
    if not group_alive(pgid):
        return False
    started = row.get("start_time")
    if started is not None and start_time(pgid) == started:
        return True
    members = row.get("members")
    for member in members if isinstance(members, list) else []:
        pid, started = int(member[0]), member[1]
        if start_time(pid) == started and _pgid(pid) == pgid:
            return True
    return False


def reap(path: Path, grace_s: float = 10.0) -> list[str]:
    """Stop the groups a previous run recorded and left alive; return what was stopped."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    stopped = []
    for row in rows:
        pgid = int(row["pgid"])
        if not still_ours(row):
            continue  # gone, or the PID (or group) now belongs to someone else
        log.warning("stopping %s (pgid %d) left behind by a previous run", row.get("name"), pgid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if group_alive(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        stopped.append(f"{row.get('name')} (pgid {pgid})")
    path.unlink(missing_ok=True)
    return stopped
