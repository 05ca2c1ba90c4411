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
  taken out of the endpoint file at once and replaced after an exponential back-off;
* on a scale-down the ready replica that leaves is the one whose loss costs least
  (:mod:`inflight.control.scale_down`): ``warmth()`` reads, from the router, each endpoint's
  requests in flight and the prefix blocks only it holds, once a replica is surplus.

It is driven by :meth:`Supervisor.tick`, called in a loop by one thread; nothing in it
blocks longer than one health check (``health_timeout_s``). The endpoint file is
replaced atomically (temp file + rename) so the router never reads half of it.

Every decision — when a replica is ready, failed, drained or stopped, which to cancel or
drain on a scale-down, when to start new ones — is :mod:`inflight.control.lifecycle`'s (pure,
also driven by the simulator). This module is its shell: it runs the probes
:func:`~inflight.control.lifecycle.needed` asks for, calls
:func:`~inflight.control.lifecycle.reconcile`, and performs the actions (signals, the endpoint
file, starting and reaping processes) and logs them.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from inflight import ready
from inflight.control import lifecycle
from inflight.control.lifecycle import (
    ACTIVE_PHASES,
    LIVE_PHASES,
    Action,
    Backoff,
    Draining,
    Failed,
    Kill,
    LifecycleConfig,
    ProbeKind,
    Probes,
    Publish,
    Ready,
    Remove,
    ReplicaPhase,
    ReplicaState,
    Reported,
    Terminate,
)
from inflight.control.scale_down import Warmth
from inflight.ports import listening_ports
from inflight.procs import ManagedProcess, ProcessError, free_port, http_ok

log = logging.getLogger("inflight.up.supervisor")

PORT_PLACEHOLDER = "{port}"
#: In a command of ours (``inflight emulator``): the ready file where it reports its port.
READY_FILE_PLACEHOLDER = "{ready_file}"


@dataclass(eq=False)
class Replica:
    """One replica process and its lifecycle state (the state is replaced each tick)."""

    process: ManagedProcess
    state: ReplicaState

    @property
    def id(self) -> int:
        return self.state.id

    @property
    def phase(self) -> ReplicaPhase:
        return self.state.phase

    @property
    def port(self) -> int:
        """0 until a reporting replica has written its ready file."""
        return self.state.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class SupervisorConfig(LifecycleConfig):
    """The lifecycle's timing (:class:`~inflight.control.lifecycle.LifecycleConfig`, seconds
    of real time) and how the health probe is made."""

    health_path: str = "/health"
    health_timeout_s: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.health_timeout_s <= 0:
            raise ValueError(
                f"supervisor health_timeout_s must be > 0, got {self.health_timeout_s}"
            )


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


def _nothing_known() -> Mapping[str, Warmth]:
    return {}


@dataclass
class Supervisor:
    """Keeps ``desired`` replicas of ``command`` (argv with ``{port}`` or ``{ready_file}``)
    running.

    ``drained(url)`` is asked, for a replica already out of the endpoint file, whether
    the router still has requests on it (the stack asks the router's /router/status).
    ``warmth()``: each endpoint URL's requests in flight and unique prefix blocks (the
    router's status too), asked only when a replica may leave. ``clock`` is monotonic
    seconds.
    """

    command: Sequence[str]
    endpoints_file: Path
    log_dir: Path
    config: SupervisorConfig = field(default_factory=SupervisorConfig)
    drained: Callable[[str], bool] = _always_drained
    warmth: Callable[[], Mapping[str, Warmth]] = _nothing_known
    env: dict[str, str] | None = None
    clock: Callable[[], float] = time.monotonic
    desired: int = 0
    replicas: list[Replica] = field(default_factory=list)
    backoff: Backoff = field(default_factory=Backoff)
    ports_used: set[int] = field(default_factory=set)
    all_processes: list[ManagedProcess] = field(default_factory=list)
    _next_id: int = 1
    _published: tuple[str, ...] | None = None
    _warmth: dict[int, Warmth] = field(default_factory=dict)  # this tick's, for the log

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
        return lifecycle.count((r.state for r in self.replicas), ACTIVE_PHASES)

    @property
    def live(self) -> int:
        """Replicas that exist: starting, ready, draining or stopping."""
        return lifecycle.count((r.state for r in self.replicas), LIVE_PHASES)

    @property
    def crashes(self) -> int:
        return self.backoff.crashes

    @property
    def restart_not_before_s(self) -> float:
        return self.backoff.restart_not_before_s

    def set_desired(self, n: int) -> None:
        if n < 0:
            raise ValueError(f"desired replicas must be >= 0, got {n}")
        self.desired = n

    # --- the reconcile loop -----------------------------------------------------------
    def tick(self) -> None:
        """One pass: probe, decide (:func:`~inflight.control.lifecycle.reconcile`), act, start,
        publish."""
        now = self.clock()
        probes = {
            r.id: self._probe(r, lifecycle.needed(r.state, now, self.config)) for r in self.replicas
        }
        self._warmth = self._read_warmth()
        result = lifecycle.reconcile(
            [r.state for r in self.replicas],
            probes,
            self.backoff,
            self.desired,
            now,
            self.config,
            self._warmth,
        )
        by_id = {r.id: r for r in self.replicas}
        for state in result.replicas:
            by_id[state.id].state = state
        self.replicas = [by_id[state.id] for state in result.replicas]
        self.backoff = result.backoff
        for action in result.actions:
            self._perform(action, by_id)
        for _ in range(result.start):
            if not self._start(now):
                break  # it will not start now either: the back-off decides when to retry
        self._publish()

    def _read_warmth(self) -> dict[int, Warmth]:
        """The ready replicas' warmth by id, read only when one may leave (more starting or
        ready than desired: stepping the replicas can only lower that count)."""
        if self.active <= self.desired:
            return {}
        by_url = self.warmth()
        return {
            r.id: by_url[r.url]
            for r in self.replicas
            if r.phase is ReplicaPhase.READY and r.url in by_url
        }

    def _probe(self, r: Replica, kinds: frozenset[ProbeKind]) -> Probes:
        """Run the probes the lifecycle asked for (health only on a known port and a live
        process, the listening ports only after a healthy answer: nothing else reads them)."""
        proc = r.process
        alive = proc.poll() is None if ProbeKind.ALIVE in kinds else None
        group_alive = proc.alive() if ProbeKind.GROUP_ALIVE in kinds else None
        reported_port, report_error = None, None
        if ProbeKind.REPORT in kinds and alive is not False:
            reported_port, report_error = self._read_report(r)
        port = r.port or reported_port or 0
        healthy = None
        if ProbeKind.HEALTH in kinds and port and alive is not False and report_error is None:
            healthy = http_ok(
                f"http://127.0.0.1:{port}{self.config.health_path}", self.config.health_timeout_s
            )
        listening = None
        if ProbeKind.LISTENING in kinds and healthy:
            listening = frozenset(listening_ports(proc.pid))
        drained = self.drained(r.url) if ProbeKind.DRAINED in kinds else None
        return Probes(alive, group_alive, reported_port, report_error, healthy, listening, drained)

    def _read_report(self, r: Replica) -> tuple[int | None, str | None]:
        """The port a reporting replica wrote in its ready file (None while there is none),
        or why the file is unusable."""
        path = Path(r.process.ready_file or "")
        try:
            report = ready.read(path)
        except ready.ReadyFileError as exc:
            return None, str(exc)
        if report is None:
            return None, None
        port = report.ports.get("http")
        if port is None:
            return None, f"{path} names no 'http' port: {dict(report.ports)}"
        return port, None

    def _perform(self, action: Action, by_id: dict[int, Replica]) -> None:
        if isinstance(action, Publish):
            self._publish()
            return
        r = by_id[action.replica_id]
        if isinstance(action, Terminate):
            if action.why == "drain timeout":
                log.warning("replica %d drain timed out; stopping it anyway", r.id)
            elif action.why != "failed":
                log.info("replica %d (%s) stopping: %s", r.id, r.url, action.why)
            r.process.signal_group(signal.SIGTERM)
        elif isinstance(action, Kill):
            log.warning("replica %d ignored SIGTERM; SIGKILL to its group", r.id)
            r.process.signal_group(signal.SIGKILL)
        elif isinstance(action, Remove):
            with contextlib.suppress(Exception):
                r.process.popen.wait(timeout=1.0)  # type: ignore[union-attr]
            r.state = replace(r.state, phase=ReplicaPhase.GONE)
            if r.process in self.all_processes:
                self.all_processes.remove(r.process)
            log.info("replica %d (%s) stopped", r.id, r.url)
        elif isinstance(action, Failed):
            code = r.process.poll()
            log.warning(
                "replica %d (%s, pid %d%s) failed (%s); replacing it in %.1f s (crash %d in a row)",
                r.id,
                r.url,
                r.process.pid,
                f", exit code {code}" if code is not None else "",
                action.why,
                action.delay_s,
                action.crashes,
            )
        elif isinstance(action, Ready):
            log.info("replica %d ready at %s after %.1f s", r.id, r.url, action.after_s)
        elif isinstance(action, Reported):
            self.ports_used.add(action.port)
            log.info("replica %d listens on port %d", r.id, action.port)
        elif isinstance(action, Draining):
            w = self._warmth.get(r.id)
            log.info(
                "replica %d (%s) draining%s",
                r.id,
                r.url,
                f": {w.inflight} in flight, {w.unique_blocks} prefix blocks only it holds"
                if w is not None
                else "",
            )

    def _start(self, now: float) -> bool:
        """Start one replica; False if it could not be started (counted as a crash)."""
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
        try:
            process.start()
        except ProcessError as exc:
            # Not started: nothing to stop; count it as a crash so we back off.
            self.backoff = lifecycle.crashed(self.backoff, now, self.config)
            log.error("replica %d could not start: %s", rid, exc)
            return False
        if port:
            self.ports_used.add(port)
        self.all_processes.append(process)
        self.replicas.append(Replica(process, lifecycle.new_replica(rid, port, now)))
        log.info(
            "replica %d starting on port %s (pid %d): %s",
            rid,
            port or "(reported)",
            process.pid,
            argv,
        )
        return True

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
