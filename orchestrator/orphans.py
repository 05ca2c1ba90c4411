"""Process groups a killed ``inflight up`` left behind, found again and stopped.

A clean exit stops every group. But ``kill -9`` of ``inflight up`` (or a crash of the
machine's OOM killer) leaves its children running in their own sessions — the seed's
trap 1: orphaned vLLM workers kept GPU memory and the next start failed. So the stack
keeps ``children.json`` in its state dir: one entry per process group it started, with
the leader's start time from /proc. The next ``inflight up`` on the same state dir stops
every group whose leader is still that same process (PID *and* start time match, so a
recycled PID is never touched), by process group, never by pattern.
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

from inflight.procs import ManagedProcess, group_alive

log = logging.getLogger("inflight.up.orphans")


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    # rest[0] is field 3 (state); field 22 is rest[19].
    return int(rest[19]) if len(rest) > 19 else None


def record(path: Path, procs: Iterable[ManagedProcess]) -> None:
    """Write the groups we run now (atomically)."""
    rows = []
    for proc in procs:
        if proc.pgid is None:
            continue
        started = start_time(proc.pgid)
        if started is not None:
            rows.append({"pgid": proc.pgid, "start_time": started, "name": proc.label})
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(rows) + "\n")
    os.replace(tmp, path)


def reap(path: Path, grace_s: float = 10.0) -> list[str]:
    """Stop the groups a previous run recorded and left alive; return what was stopped."""
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    stopped = []
    for row in rows:
        pgid, started = int(row["pgid"]), row.get("start_time")
        if start_time(pgid) != started or not group_alive(pgid):
            continue  # gone, or the PID now belongs to someone else
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
