"""``orphans.reap`` with real process groups: which leftovers are ours, and only those."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

import pytest

from inflight.procs import ManagedProcess, group_alive, pid_alive
from inflight.up import orphans
from tests.support import wait_for

# A leader that starts a child in its own group, writes the child's PID, and exits when
# told (a go-file appears), leaving the child running: a vLLM leader that crashed while
# its workers hold the GPU.
LEADER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
open(sys.argv[1], "w").write(str(child.pid))
while not os.path.exists(sys.argv[2]):
    time.sleep(0.02)
os._exit(0)
"""


@pytest.fixture
def headless_group(tmp_path: Path):
    """(leader process, child pid, children.json recorded while the leader lived); the
    leader has exited and been reaped, its child lives on in the same group."""
    pid_file, go = tmp_path / "child.pid", tmp_path / "go"
    leader = ManagedProcess([sys.executable, "-c", LEADER, str(pid_file), str(go)], name="vllm")
    leader.start()
    child = 0
    try:
        child = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="child"))
        record = tmp_path / "children.json"
        orphans.record(record, [leader])
        go.touch()
        assert leader.popen is not None
        assert leader.popen.wait(timeout=30) == 0  # gone from /proc: no start time to match
        assert pid_alive(child) and group_alive(leader.pid)
        yield leader, child, record
    finally:
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
            wait_for(lambda: not pid_alive(child), what="the child to die")
        leader.stop(grace_s=1)


def test_a_group_whose_leader_died_is_stopped_through_a_live_member(headless_group) -> None:
    leader, child, record = headless_group
    rows = json.loads(record.read_text())
    assert [m[0] for m in rows[0]["members"]] == sorted([leader.pid, child])

    stopped = orphans.reap(record, grace_s=5.0)

    assert stopped == [f"vllm (pgid {leader.pid})"]
    wait_for(lambda: not pid_alive(child), what="the leaderless group's child to be stopped")
    assert not record.exists()


def test_a_member_whose_start_time_differs_is_not_touched(headless_group) -> None:
    """Same PID, different start time: a recycled PID, someone else's process."""
    _leader, child, record = headless_group
    rows = json.loads(record.read_text())
    for row in rows:
        row["members"] = [[pid, started + 1] for pid, started in row["members"]]
    record.write_text(json.dumps(rows))

    assert orphans.reap(record, grace_s=5.0) == []
    assert pid_alive(child)
