"""The replica supervisor: keeps ``desired`` replicas running, healthy and known to the router.

What it guarantees (each one a trap from the seed):

* every replica runs in its own process group and is stopped as a group — SIGTERM, then
  SIGKILL after ``grace_s`` — so no worker outlives it; processes are found by PID only;
* ports come from the OS. A replica command with ``{ready_file}`` (the default emulator)
  is told ``--port 0`` and reports the port it bound in that file (:mod:`inflight.ready`):
  nothing is picked here. A command that cannot report (``vllm serve … --port {port}``)
  gets a port picked here; another process can take it before the replica binds it, so
  the port the replica's group really listens on is read back from /proc before it is
  used (:mod:`inflight.ports`), and a replica that lost its port is restarted on another;
* a replica joins the endpoint file only after its ``/health`` answers 200, and leaves it
  *before* it is stopped: it drains until ``drained(url)`` says the router holds nothing
  for it (or ``drain_timeout_s`` passes);
* a replica that dies (or fails its health check ``unhealthy_after`` times in a row) is
  taken out of the endpoint file at once and replaced after an exponential back-off.

It is driven by :meth:`Supervisor.tick`, called in a loop by one thread; nothing in it
blocks longer than one health check (``health_timeout_s``). The endpoint file is
replaced atomically (temp file + rename) so the router never reads half of it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from inflight import ready
from inflight.ports import listening_ports
from inflight.procs import ManagedProcess, ProcessError, free_port, http_ok

log = logging.getLogger("inflight.up.supervisor")

PORT_PLACEHOLDER = "{port}"
#: In a command of ours (``inflight emulator``): the ready file where it reports its port.
READY_FILE_PLACEHOLDER = "{ready_file}"


class ReplicaPhase(Enum):
    STARTING = "starting"  # process up, /health not yet 200: not in the endpoint file
    READY = "ready"  # in the endpoint file
    DRAINING = "draining"  # out of the endpoint file, waiting for the router to let go
    STOPPING = "stopping"  # SIGTERM sent to the group; SIGKILL at the deadline


@dataclass
class Replica:
    """One replica process and where it is in its life."""

    id: int
    port: int  # 0 until a reporting replica has written its ready file
    process: ManagedProcess
    phase: ReplicaPhase
    started_at_s: float
    ready_at_s: float | None = None
    deadline_s: float = 0.0  # drain or kill deadline, by phase
    health_failures: int = 0
    next_health_s: float = 0.0
    crashed: bool = False  # stopping because it failed, not because we scaled down

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class SupervisorConfig:
    """Timing knobs, in seconds of real time."""

    health_path: str = "/health"
    health_timeout_s: float = 0.5
    health_interval_s: float = 1.0  # how often a READY replica's /health is checked
    unhealthy_after: int = 3  # consecutive failed checks before a ready replica is replaced
    startup_timeout_s: float = 900.0  # a real vLLM loading a big model takes minutes
    drain_timeout_s: float = 120.0
    grace_s: float = 10.0  # SIGTERM -> SIGKILL
    backoff_base_s: float = 0.5  # first restart delay after a crash; doubles per crash
    backoff_max_s: float = 30.0
    stable_s: float = 10.0  # ready this long: the crash counter resets

    def __post_init__(self) -> None:
        for name in (
            "health_timeout_s",
            "health_interval_s",
            "startup_timeout_s",
            "drain_timeout_s",
            "backoff_base_s",
            "backoff_max_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"supervisor {name} must be > 0, got {getattr(self, name)}")
        if self.grace_s < 0 or self.unhealthy_after < 1:
            raise ValueError("supervisor grace_s must be >= 0 and unhealthy_after >= 1")


def check_replica_command(template: Sequence[str]) -> None:
    """A replica command must contain ``{port}`` (we tell it which port to use) or
    ``{ready_file}`` (it binds port 0 and reports the port there)."""
    if not template:
        raise ValueError("--replica-cmd is empty")
    if not any(p in arg for arg in template for p in (PORT_PLACEHOLDER, READY_FILE_PLACEHOLDER)):
        raise ValueError(
            f"--replica-cmd must contain the placeholder {PORT_PLACEHOLDER} "
            f"(e.g. 'vllm serve MODEL --port {{port}}') or {READY_FILE_PLACEHOLDER} "
            f"(a server that reports its port, e.g. 'inflight emulator --port 0 "
            f"--ready-file {{ready_file}}'); got {' '.join(template)!r}"
        )


def reports_port(template: Sequence[str]) -> bool:
    """True when the command reports its own port in ``{ready_file}``."""
    return any(READY_FILE_PLACEHOLDER in arg for arg in template)


def write_endpoints_file(path: Path, urls: Sequence[str]) -> None:
    """Replace the router's endpoint file atomically: a JSON list of base URLs."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(list(urls)) + "\n")
    os.replace(tmp, path)


def _always_drained(_url: str) -> bool:
    return True


@dataclass
class Supervisor:
    """Keeps ``desired`` replicas of ``command`` (argv with ``{port}``) running.

    ``drained(url)`` is asked, for a replica already out of the endpoint file, whether
    the router still has requests on it (the stack asks the router's /router/status).
    ``clock`` is monotonic seconds.
    """

    command: Sequence[str]
    endpoints_file: Path
    log_dir: Path
    config: SupervisorConfig = field(default_factory=SupervisorConfig)
    drained: Callable[[str], bool] = _always_drained
    env: dict[str, str] | None = None
    clock: Callable[[], float] = time.monotonic
    desired: int = 0
    replicas: list[Replica] = field(default_factory=list)
    crashes: int = 0
    restart_not_before_s: float = 0.0
    ports_used: set[int] = field(default_factory=set)
    all_processes: list[ManagedProcess] = field(default_factory=list)
    _next_id: int = 1
    _published: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        check_replica_command(self.command)

    # --- queries ------------------------------------------------------------------------
    def ready_urls(self) -> list[str]:
        return [r.url for r in self.replicas if r.phase is ReplicaPhase.READY]

    @property
    def ready(self) -> int:
        return len(self.ready_urls())

    @property
    def active(self) -> int:
        """Replicas counted towards ``desired``: starting or ready."""
        return sum(r.phase in (ReplicaPhase.STARTING, ReplicaPhase.READY) for r in self.replicas)

    def set_desired(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"desired replicas must be >= 0, got {n}")
        self.desired = n

    # --- the reconcile loop -----------------------------------------------------------
    def tick(self) -> None:
        """One pass: watch processes, gate on health, drain, stop, start, publish."""
        now = self.clock()
        for replica in list(self.replicas):
            self._watch(replica, now)
        self._scale(now)
        self._publish()

    def _watch(self, r: Replica, now: float) -> None:
        if r.phase in (ReplicaPhase.STARTING, ReplicaPhase.READY) and r.process.poll() is not None:
            log.warning(
                "replica %d (%s, pid %d) exited with code %s",
                r.id,
                r.url,
                r.process.pid,
                r.process.poll(),
            )
            self._fail(r, now, "exited")
            return
        # A reporting replica: no port until it has written its ready file.
        if r.phase is ReplicaPhase.STARTING and r.port == 0 and not self._read_report(r, now):
            if r.phase is ReplicaPhase.STARTING and (
                now - r.started_at_s > self.config.startup_timeout_s
            ):
                self._fail(r, now, "no port reported before the start-up timeout")
            return
        if r.phase is ReplicaPhase.STARTING:
            if http_ok(r.url + self.config.health_path, self.config.health_timeout_s):
                ports = listening_ports(r.process.pid)
                if r.port not in ports:
                    log.warning(
                        "replica %d answered /health on %d but its group listens on %s: "
                        "another process owns the port; restarting on a new port",
                        r.id,
                        r.port,
                        sorted(ports),
                    )
                    self._fail(r, now, "port taken")
                    return
                r.phase, r.ready_at_s = ReplicaPhase.READY, now
                r.next_health_s = now + self.config.health_interval_s
                log.info("replica %d ready at %s after %.1f s", r.id, r.url, now - r.started_at_s)
            elif now - r.started_at_s > self.config.startup_timeout_s:
                log.warning("replica %d not healthy after %.0f s", r.id, now - r.started_at_s)
                self._fail(r, now, "start-up timeout")
        elif r.phase is ReplicaPhase.READY:
            if r.ready_at_s is not None and now - r.ready_at_s >= self.config.stable_s:
                self.crashes = 0
            if now >= r.next_health_s:
                r.next_health_s = now + self.config.health_interval_s
                if http_ok(r.url + self.config.health_path, self.config.health_timeout_s):
                    r.health_failures = 0
                else:
                    r.health_failures += 1
                    if r.health_failures >= self.config.unhealthy_after:
                        self._fail(r, now, f"{r.health_failures} failed health checks")
        elif r.phase is ReplicaPhase.DRAINING:
            if self.drained(r.url) or now >= r.deadline_s:
                if now >= r.deadline_s:
                    log.warning("replica %d drain timed out; stopping it anyway", r.id)
                self._terminate(r, now)
        elif r.phase is ReplicaPhase.STOPPING:
            if not r.process.alive():
                with contextlib.suppress(Exception):
                    r.process.popen.wait(timeout=1.0)  # type: ignore[union-attr]
                self.replicas.remove(r)
                self.all_processes.remove(r.process)
                log.info("replica %d (%s) stopped", r.id, r.url)
            elif now >= r.deadline_s:
                log.warning("replica %d ignored SIGTERM; SIGKILL to its group", r.id)
                r.process.signal_group(signal.SIGKILL)
                r.deadline_s = now + 3600.0

    def _read_report(self, r: Replica, now: float) -> bool:
        """Take the port a reporting replica wrote in its ready file; False while there is
        none yet (or the report is bad: then the replica is failed)."""
        path = Path(r.process.ready_file or "")
        try:
            report = ready.read(path)
        except ready.ReadyFileError as exc:
            self._fail(r, now, str(exc))
            return False
        if report is None:
            return False
        port = report.ports.get("http")
        if port is None:
            self._fail(r, now, f"{path} names no 'http' port: {dict(report.ports)}")
            return False
        r.port = port
        self.ports_used.add(port)
        log.info("replica %d listens on port %d", r.id, port)
        return True

    def _fail(self, r: Replica, now: float, why: str) -> None:
        """Out of the endpoint file now, stop the group, and back off before replacing."""
        r.crashed = True
        self.crashes += 1
        delay = min(self.config.backoff_base_s * 2 ** (self.crashes - 1), self.config.backoff_max_s)
        self.restart_not_before_s = now + delay
        log.warning(
            "replica %d (%s) failed (%s); replacing it in %.1f s (crash %d in a row)",
            r.id,
            r.url,
            why,
            delay,
            self.crashes,
        )
        self._terminate(r, now)
        self._publish()

    def _terminate(self, r: Replica, now: float) -> None:
        r.phase = ReplicaPhase.STOPPING
        r.deadline_s = now + self.config.grace_s
        r.process.signal_group(signal.SIGTERM)

    def _scale(self, now: float) -> None:
        surplus = self.active - self.desired
        if surplus > 0:
            # Cancel starting replicas first (newest first), then drain ready ones.
            starting = [r for r in self.replicas if r.phase is ReplicaPhase.STARTING]
            ready = [r for r in self.replicas if r.phase is ReplicaPhase.READY]
            for r in (starting[::-1] + ready[::-1])[:surplus]:
                if r.phase is ReplicaPhase.STARTING:
                    self._terminate(r, now)
                else:
                    r.phase = ReplicaPhase.DRAINING
                    r.deadline_s = now + self.config.drain_timeout_s
                    log.info("replica %d (%s) draining", r.id, r.url)
            return
        if surplus < 0 and now >= self.restart_not_before_s:
            for _ in range(-surplus):
                self._start(now)

    def _start(self, now: float) -> Replica:
        rid = self._next_id
        self._next_id += 1
        ready_file: Path | None = None
        if reports_port(self.command):
            # It binds port 0 and writes the port it got; nothing to pick, nothing to lose.
            port = 0
            ready_file = self.log_dir / f"replica-{rid}.ready.json"
        else:
            # An external command (vllm serve) cannot report: pick a port, check it in /proc.
            port = free_port()
        argv = [
            arg.replace(PORT_PLACEHOLDER, str(port)).replace(
                READY_FILE_PLACEHOLDER, str(ready_file)
            )
            for arg in self.command
        ]
        process = ManagedProcess(
            argv,
            name=f"replica-{rid}",
            env=self.env,
            log_path=self.log_dir / f"replica-{rid}.log",
            grace_s=self.config.grace_s,
            ready_file=ready_file,
        )
        replica = Replica(rid, port, process, ReplicaPhase.STARTING, started_at_s=now)
        try:
            process.start()
        except ProcessError as exc:
            # Not started: nothing to stop; count it as a crash so we back off.
            log.error("replica %d could not start: %s", rid, exc)
            self.crashes += 1
            self.restart_not_before_s = now + min(
                self.config.backoff_base_s * 2 ** (self.crashes - 1), self.config.backoff_max_s
            )
            return replica
        if port:
            self.ports_used.add(port)
        self.all_processes.append(process)
        self.replicas.append(replica)
        log.info(
            "replica %d starting on port %s (pid %d): %s",
            rid,
            port or "(reported)",
            process.pid,
            argv,
        )
        return replica

    def _publish(self) -> None:
        urls = tuple(self.ready_urls())
        if urls != self._published:
            write_endpoints_file(self.endpoints_file, urls)
            self._published = urls

    # --- shutdown -----------------------------------------------------------------------
    def stop_all(self) -> list[str]:
        """Empty the endpoint file, stop every replica group; return labels still alive."""
        self.desired = 0
        write_endpoints_file(self.endpoints_file, [])
        self._published = ()
        for r in self.replicas:
            if r.process.alive():
                r.process.signal_group(signal.SIGTERM)
        survivors = []
        for proc in self.all_processes:
            try:
                proc.stop()
            except ProcessError as exc:
                log.error("%s", exc)
            if proc.alive():
                survivors.append(f"{proc.label} (pgid {proc.pgid})")
        self.replicas.clear()
        return survivors
