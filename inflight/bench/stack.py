"""One ``inflight up`` per policy: start it, wait for ``stack.json``, stop it, prove it is gone.

``inflight up`` runs as a subprocess in its own process group (``ManagedProcess``) and is
stopped by PID: SIGTERM to its group, SIGKILL after a grace period. Its replicas live in
their own groups, so while it runs the bench snapshots every descendant PID and every
port they listen on; after the stop it waits (with a deadline) for each PID to be gone
and each port to be free, and reports any survivor instead of hiding it. Survivors are
then killed by PID so one policy's leftovers cannot skew the next one's numbers.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inflight import interrupt
from inflight import statedir as state
from inflight.bench import proctree
from inflight.bench.sampler import STATUS_PATH, parse_status
from inflight.planes.policy_catalogue import Policy
from inflight.ports import ports_of
from inflight.procs import ManagedProcess, ProcessError, inflight_command, port_is_free


class StackError(RuntimeError):
    """``inflight up`` did not come up; the message carries its log's tail."""


def _router_ready(router_url: str) -> int:
    """Ready endpoints the router reports at /router/status (0 when it does not answer)."""
    try:
        with urllib.request.urlopen(router_url.rstrip("/") + STATUS_PATH, timeout=2.0) as resp:
            doc = json.loads(resp.read())
        return parse_status(doc, 0.0).ready
    except (OSError, ValueError):
        return 0


@dataclass
class Stack:
    """A running ``inflight up`` for one policy."""

    policy: Policy
    state_dir: Path
    time_scale: float
    max_replicas: int
    extra_args: tuple[str, ...] = ()
    min_replicas: int | None = None  # --min-replicas of an autoscaled policy (None: up's default)
    process: ManagedProcess | None = None
    info: dict[str, Any] = field(default_factory=dict)
    seen_pids: set[int] = field(default_factory=set)
    seen_ports: set[int] = field(default_factory=set)
    started_wall_s: float = 0.0

    def start(self, timeout_s: float) -> Stack:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # --port 0: the router binds a port from the OS; its URL is read from stack.json.
        argv = [
            *inflight_command("up"),
            "--state-dir", str(self.state_dir), "--port", "0",
            "--time-scale", str(self.time_scale),
            *self.policy.up_args(self.max_replicas, self.min_replicas), *self.extra_args,
        ]  # fmt: skip
        t = time.monotonic()
        with interrupt.deferred():  # a signal waits until we hold its handle to stop it by
            self.process = ManagedProcess(
                argv, name=f"inflight up ({self.policy.name})",
                log_path=self.state_dir / "up.log", grace_s=20.0,
            ).start()  # fmt: skip
        try:
            self._wait_ready(timeout_s)
            self.started_wall_s = time.monotonic() - t
            self.snapshot()
        except BaseException:
            # A timeout, an ``inflight up`` that died, Ctrl-C or SIGTERM: its children run in
            # their own sessions, so stop it (and every process of it seen so far) first.
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        """Until our own ``stack.json`` is there and the router reports the replicas ready."""
        assert self.process is not None
        stack_json = self.state_dir / state.STACK
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            with contextlib.suppress(OSError, ValueError):
                info = state.read_stack(stack_json)
                # A run killed with SIGKILL leaves its stack.json behind: wait for our own.
                if info.pid == self.process.pid:
                    self.info = asdict(info)
                    break
            if time.monotonic() > deadline:
                raise StackError(f"no {stack_json} after {timeout_s:.0f} s" + self._tail())
            time.sleep(0.1)
        # stack.json can appear before the router has read the endpoint file (it polls it
        # about once a second): wait until the router itself reports the replicas ready.
        want = self.policy.replicas
        while _router_ready(self.router_url) < want:
            self._check_alive()
            if time.monotonic() > deadline:
                raise StackError(
                    f"router {self.router_url} did not report {want} ready replica(s) "
                    f"within {timeout_s:.0f} s" + self._tail()
                )
            time.sleep(0.1)

    def _check_alive(self) -> None:
        """Raise if ``inflight up`` exited; else remember what it runs so far."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise StackError(f"inflight up exited with {self.process.poll()}" + self._tail())
        self.snapshot()

    def _tail(self) -> str:
        try:
            text = (self.state_dir / "up.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""
        return f"\n--- {self.state_dir / 'up.log'} ---\n{text}"

    @property
    def router_url(self) -> str:
        return str(self.info["router_url"])

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def snapshot(self) -> None:
        """Remember every process and listening port of the stack seen so far."""
        if self.process is None or self.process.poll() is not None:
            return
        pids = proctree.descendants(self.pid, include_root=True)
        self.seen_pids |= pids
        self.seen_ports |= ports_of(pids)

    def stop(self, check_timeout_s: float = 30.0) -> dict[str, Any]:
        """Stop by PID; wait for every seen PID to exit and every seen port to be free.

        Not cut short by Ctrl-C or SIGTERM (:func:`inflight.interrupt.deferred`): a stop half
        done would leave the processes it has not reached yet."""
        with interrupt.deferred():
            return self._stop(check_timeout_s)

    def _stop(self, check_timeout_s: float) -> dict[str, Any]:
        if self.process is None:
            return {}
        self.snapshot()
        code: int | None = None
        error = ""
        try:
            code = self.process.stop()
        except ProcessError as exc:
            error = str(exc)
        deadline = time.monotonic() + check_timeout_s
        left = proctree.alive(self.seen_pids)
        busy = {p for p in self.seen_ports if not port_is_free(p)}
        while (left or busy) and time.monotonic() < deadline:
            time.sleep(0.2)
            left = proctree.alive(self.seen_pids)
            busy = {p for p in self.seen_ports if not port_is_free(p)}
        for pid in left:  # never leave them to skew the next policy
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return {
            "exit_code": code,
            "stop_error": error,
            "pids_seen": len(self.seen_pids),
            "ports_seen": sorted(self.seen_ports),
            "pids_left_after_stop": sorted(left),
            "ports_busy_after_stop": sorted(busy),
            "clean": not left and not busy and not error,
            "start_wall_s": round(self.started_wall_s, 2),
        }
