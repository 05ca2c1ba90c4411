"""The process helper: servers in their own group, stopped as a group, nothing left behind."""

from __future__ import annotations

import os
import signal
import textwrap
from pathlib import Path

import pytest

from inflight.procs import ManagedProcess, ProcessError, group_alive, pid_alive, port_is_free
from tests.support import PYTHON, ProcessTracker

# A server that ignores SIGTERM and has a child that ignores it too: only SIGKILL to the
# whole group ends both. It writes the child's PID to a file so the test can check it, and
# reports its port like our servers do (argv: port 0, pid file, --ready-file PATH).
STUBBORN = textwrap.dedent(
    """
    import http.server, pathlib, signal, subprocess, sys
    from inflight import ready
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    open(sys.argv[2], "w").write(str(child.pid))
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
        def log_message(self, *a): pass
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H)
    ready.write(pathlib.Path(sys.argv[4]), {"http": server.server_address[1]})
    server.serve_forever()
    """
)


def test_stubborn_server_and_its_child_are_killed_as_a_group(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(STUBBORN)
    child_pid_file = tmp_path / "child.pid"
    tracker = ProcessTracker(tmp_path)
    server = tracker.start(
        [PYTHON, str(script), "{port}", str(child_pid_file)],
        name="stubborn",
        ready_path="/",
        grace_s=0.5,
    )
    child_pid = int(child_pid_file.read_text())
    assert pid_alive(child_pid)
    assert server.process.pgid == server.process.pid
    assert os.getpgid(child_pid) == server.process.pgid

    survivors = tracker.stop_all()

    assert survivors == []
    assert not group_alive(server.process.pid)
    assert not pid_alive(child_pid)
    assert port_is_free(server.port)
    # The leader died of SIGKILL: SIGTERM was ignored.
    assert server.process.poll() == -signal.SIGKILL


def test_polite_server_stops_on_sigterm(tmp_path: Path) -> None:
    proc = ManagedProcess([PYTHON, "-c", "import time; time.sleep(600)"], name="sleeper")
    with proc.start():
        assert proc.alive()
    assert not proc.alive()
    assert proc.poll() == -signal.SIGTERM


def test_wait_ready_fails_fast_when_the_process_exits(tmp_path: Path) -> None:
    proc = ManagedProcess(
        [PYTHON, "-c", "import sys; print('boom: bad flag'); sys.exit(3)"],
        name="crasher",
        log_path=tmp_path / "crasher.log",
    ).start()
    with pytest.raises(ProcessError, match=r"exited with code 3[\s\S]*boom: bad flag"):
        proc.wait_ready("http://127.0.0.1:9/health", timeout_s=30)
    proc.stop()


def test_stop_is_idempotent_and_start_twice_refused(tmp_path: Path) -> None:
    proc = ManagedProcess([PYTHON, "-c", "import time; time.sleep(600)"], name="twice").start()
    with pytest.raises(ProcessError, match="already started"):
        proc.start()
    proc.stop()
    proc.stop()
    assert not proc.alive()
