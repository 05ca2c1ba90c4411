"""Processes we start, and ports we find, without the seed's traps.

Lessons from the seed (docs/workload.md, "Measurement traps"): orphaned workers
kept GPU memory after their parent died, ports drifted, and ``pkill -f`` killed
the shell that ran it. So:

* every child starts in its own session, hence its own process group, and is
  stopped as a group: SIGTERM, then SIGKILL after a grace period;
* processes are addressed by PID / PGID only, never by pattern;
* ports come from the OS: our own servers bind port 0 themselves and report the port
  through a ready file (:mod:`inflight.ready`, :meth:`ManagedProcess.wait_ports`), so no
  port is picked here and handed over (another process could take it in between);
  readiness is polled with a deadline, never assumed after a sleep.

Used by the single-machine stack (``inflight.up``) and by the test fixtures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inflight import ready


class ProcessError(RuntimeError):
    """A managed process failed to start, become ready, or stop."""


def inflight_command(*args: str) -> list[str]:
    """``python -P -m inflight ARGS``: this interpreter running the inflight command line.

    ``-P`` (Python 3.11+) keeps the working directory off ``sys.path``: a child started
    with plain ``-m`` would import a ``bench.py`` or ``inflight.py`` lying where the user
    runs ``inflight up`` instead of the package (``tests/integration/test_up.py``,
    the shadowing test)."""
    return [sys.executable, "-P", "-m", "inflight", *args]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS says is free right now on ``host`` (bind to port 0, close).

    Only for a child that cannot bind port 0 and report (an external ``--replica-cmd``
    such as ``vllm serve``): another process can take the port between this call and the
    child's bind, so the caller must read the child's real port back (from /proc,
    :func:`inflight.ports.listening_ports`) and retry on a clash. Our own servers take
    ``--port 0 --ready-file PATH`` instead (:mod:`inflight.ready`).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing is listening on ``host:port`` (we can bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22)."""
    try:
        rest = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    # rest[0] is field 3 (state); field 22 is rest[19].
    return int(rest[19]) if len(rest) > 19 else None


def process_age_s(pid: int | None = None) -> float:
    """Seconds since process ``pid`` (default: this one) started; 0.0 when unknown."""
    ticks = start_time(os.getpid() if pid is None else pid)
    try:
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    if ticks is None:
        return 0.0
    return max(0.0, uptime_s - ticks / os.sysconf("SC_CLK_TCK"))


def pid_alive(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie.

    An orphan whose parent died is reparented to PID 1, which in a container may never
    reap it: it stays a zombie (holding nothing: no memory, no port), so it counts as gone.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


@dataclass(frozen=True)
class ProcEntry:
    """One live process as /proc/<pid>/stat shows it."""

    pid: int
    state: str
    ppid: int
    pgid: int


def live_processes() -> list[ProcEntry]:
    """Every live (non-zombie) process on this machine, read from /proc (Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # Fields after the ")" that closes the command: state ppid pgrp ...
            rest = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(rest) >= 3 and rest[0] not in ("Z", "X"):
            found.append(ProcEntry(int(entry.name), rest[0], int(rest[1]), int(rest[2])))
    return found


def group_pids(pgid: int) -> list[int]:
    """PIDs of the live members of process group ``pgid``."""
    return [p.pid for p in live_processes() if p.pgid == pgid]


def live_children(pid: int) -> list[int]:
    """PIDs of the live children of ``pid``."""
    return [p.pid for p in live_processes() if p.ppid == pid]


def group_alive(pgid: int) -> bool:
    """True while any process of process group ``pgid`` exists (zombies excluded)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(…, 0) also succeeds for zombies; look for a live member in /proc.
    if not Path("/proc").exists():
        return True
    return bool(group_pids(pgid))


def http_ok(url: str, timeout_s: float = 1.0) -> bool:
    """True when ``GET url`` answers 2xx within ``timeout_s``."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            status: int = resp.status
            return 200 <= status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


@dataclass
class ManagedProcess:
    """One child process, in its own process group, stopped as a group.

    >>> p = ManagedProcess(["sleep", "60"], name="sleeper").start()
    >>> p.stop()  # SIGTERM to the group, SIGKILL after grace_s
    """

    argv: Sequence[str]
    name: str = ""
    env: Mapping[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None
    log_path: str | os.PathLike[str] | None = None
    grace_s: float = 5.0
    ready_file: Path | None = None  # where the child reports its ports (inflight.ready)
    popen: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    pgid: int | None = field(default=None, init=False)

    @property
    def pid(self) -> int:
        if self.popen is None:
            raise ProcessError(f"{self.label} was never started")
        return self.popen.pid

    @property
    def label(self) -> str:
        return self.name or (self.argv[0] if self.argv else "process")

    def start(self) -> ManagedProcess:
        if self.popen is not None:
            raise ProcessError(f"{self.label} already started (pid {self.popen.pid})")
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if self.ready_file is not None:
            # A report left by an earlier child must never be read as this one's.
            Path(self.ready_file).unlink(missing_ok=True)
        if self.log_path is not None:
            Path(self.log_path).parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log_path, "ab") if self.log_path is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            self.popen = subprocess.Popen(
                list(self.argv),
                env=env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own session => own process group
            )
        except OSError as exc:
            raise ProcessError(f"cannot start {self.label}: {exc}") from exc
        finally:
            if out is not subprocess.DEVNULL:
                out.close()  # type: ignore[union-attr]
        self.pgid = self.popen.pid
        return self

    def poll(self) -> int | None:
        """The exit code if the leader has exited, else None."""
        return None if self.popen is None else self.popen.poll()

    def wait_ready(self, url: str, timeout_s: float = 30.0, interval_s: float = 0.05) -> None:
        """Poll ``url`` until it answers 2xx; fail early if the process exits."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.poll()
            if code is not None:
                raise ProcessError(
                    f"{self.label} exited with code {code} before {url} was ready"
                    + self._log_hint()
                )
            if http_ok(url, timeout_s=min(1.0, max(0.05, deadline - time.monotonic()))):
                return
            if time.monotonic() >= deadline:
                raise ProcessError(
                    f"{self.label} (pid {self.pid}) not ready at {url} after {timeout_s:.1f} s"
                    + self._log_hint()
                )
            time.sleep(interval_s)

    def wait_ports(self, timeout_s: float = 30.0, interval_s: float = 0.02) -> dict[str, int]:
        """Poll ``ready_file`` until the child reports its ports; fail early if it exits.

        The report must come from a member of this process group (a wrapper's child may
        write it); anything else is an error, not a port to trust.
        """
        if self.ready_file is None:
            raise ProcessError(f"{self.label} has no ready file to report its ports in")
        path = Path(self.ready_file)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                report = ready.read(path)
            except ready.ReadyFileError as exc:
                raise ProcessError(f"{self.label}: {exc}") from None
            if report is not None:
                if report.pid != self.pid and report.pid not in group_pids(self.pgid or self.pid):
                    raise ProcessError(
                        f"{self.label} (pid {self.pid}): {path} was written by pid "
                        f"{report.pid}, not by a process of its group"
                    )
                return dict(report.ports)
            code = self.poll()
            if code is not None:
                raise ProcessError(
                    f"{self.label} exited with code {code} before reporting its ports in {path}"
                    + self._log_hint()
                )
            if time.monotonic() >= deadline:
                raise ProcessError(
                    f"{self.label} (pid {self.pid}) did not report its ports in {path} "
                    f"after {timeout_s:.1f} s" + self._log_hint()
                )
            time.sleep(interval_s)

    def _log_hint(self) -> str:
        if self.log_path is None:
            return ""
        try:
            tail = Path(self.log_path).read_text(errors="replace")[-2000:]
        except OSError:
            return ""
        return f"\n--- last lines of {self.log_path} ---\n{tail}"

    def alive(self) -> bool:
        """True while the leader or any other member of its group lives."""
        if self.pgid is None:
            return False
        if self.popen is not None:
            self.popen.poll()  # reap the leader if it exited
        return group_alive(self.pgid)

    def signal_group(self, sig: int) -> None:
        if self.pgid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, sig)

    def stop(self, grace_s: float | None = None) -> int | None:
        """SIGTERM the whole group; SIGKILL it after the grace period; reap the leader.

        Returns the leader's exit code (None if it was never started). Idempotent.
        """
        if self.popen is None or self.pgid is None:
            return None
        grace = self.grace_s if grace_s is None else grace_s
        if self.alive():
            self.signal_group(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while self.alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            if self.alive():
                self.signal_group(signal.SIGKILL)
                deadline = time.monotonic() + 5.0
                while self.alive() and time.monotonic() < deadline:
                    time.sleep(0.02)
        try:
            code = self.popen.wait(timeout=5.0)
        except subprocess.TimeoutExpired as exc:
            raise ProcessError(f"{self.label} (pid {self.pid}) did not exit after SIGKILL") from exc
        if self.alive():
            raise ProcessError(f"process group {self.pgid} of {self.label} survived SIGKILL")
        return code

    def __enter__(self) -> ManagedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
