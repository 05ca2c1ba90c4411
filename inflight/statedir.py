"""The state directory of ``inflight up`` (layout fixed in docs/ARCHITECTURE.md).

| file | content |
|---|---|
| ``lock`` | PID of the running ``inflight up``; held with ``flock`` so a second one refuses |
| ``stack.json`` | written (atomically) once everything is ready; removed on exit |
| ``timeline.jsonl`` | ``{"t", "desired", "ready", "live"}`` per change and per poll |
| ``decisions.jsonl`` | ``{"t", "L", "capacity", "saturation", "value", "target", "desired",
  "reason"}`` per scaling decision |
| ``endpoints.json`` | the router's endpoint file (written by the supervisor) |
| ``logs/`` | one log per process |
| ``children.json`` | the process groups running now (see :mod:`inflight.up.orphans`) |
| ``restarts.jsonl`` | ``{"t", "process", "event", "code", "failures", "delay_s"}`` per death
  and restart of a core process (Prometheus, scaler, router) |
| ``hold/<name>`` | a control: while this file exists, a dead ``prometheus``, ``scaler`` or
  ``router`` is not restarted (the chaos run keeps Prometheus down this way); created by whoever
  holds it, never by the stack |

``t`` is Unix time in seconds (wall clock: the bench lines it up with its own records).
The format is written and read here only: the bench reads ``stack.json`` and
``timeline.jsonl`` with :func:`read_stack` and :func:`read_timeline`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import IO, Any

LOCK = "lock"
STACK = "stack.json"
TIMELINE = "timeline.jsonl"
DECISIONS = "decisions.jsonl"
ENDPOINTS = "endpoints.json"
LOGS = "logs"
CHILDREN = "children.json"
RESTARTS = "restarts.jsonl"
HOLD_DIR = "hold"
PROMETHEUS_DIR = "prometheus"


class StateDirBusy(RuntimeError):
    """Another ``inflight up`` holds this state directory."""


@dataclass(frozen=True)
class StackInfo:
    """The content of ``stack.json``."""

    pid: int
    router_url: str
    prometheus_url: str | None
    scaler_address: str
    time_scale: float
    policy: str
    started_at: float
    # The trigger settings the stack's scaler runs with, every key resolved
    # (inflight.control.trigger.resolved); None in a stack.json written before it was kept.
    trigger_metadata: dict[str, str] | None = None


@dataclass(frozen=True)
class TimelinePoint:
    """One line of ``timeline.jsonl``: the replica count wanted and ready at ``t``, and
    ``live``: the replicas that exist (starting, ready, draining, stopping), what
    replica-seconds integrate. None in a timeline written before ``live`` was recorded."""

    t: float
    desired: int
    ready: int
    live: int | None = None


@dataclass(frozen=True)
class DecisionRecord:
    """One scaling decision. ``L`` is the router's in-flight count at the time, ``value``
    the metric the scaler returned, ``saturation`` = L ÷ capacity (None at capacity 0)."""

    t: float
    L: float | None
    capacity: int
    saturation: float | None
    value: float | None
    target: float | None
    desired: int
    reason: str


@dataclass(frozen=True)
class RestartRecord:
    """One line of ``restarts.jsonl``: a core process ``died`` (exit ``code``) or was
    ``restarted``; ``failures`` in a row so far, ``delay_s`` until the next attempt."""

    t: float
    process: str
    event: str  # "died" | "restarted" | "start-failed" | "held"
    code: int | None
    failures: int
    delay_s: float | None


def hold_path(root: Path, process: str) -> Path:
    """The control file that keeps ``process`` down while it exists."""
    return root / HOLD_DIR / process


class StateDir:
    """Owns one state directory for the life of one ``inflight up``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock_file: IO[str] | None = None

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def logs(self) -> Path:
        return self.root / LOGS

    def acquire(self) -> None:
        """Take the lock or raise StateDirBusy naming the PID that holds it."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        f = open(self.path(LOCK), "a+")  # noqa: SIM115 - held open for the whole run
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            holder = f.read().strip() or "?"
            f.close()
            raise StateDirBusy(
                f"another 'inflight up' (pid {holder}) is running on state dir {self.root}; "
                "stop it first or pass a different --state-dir"
            ) from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        self._lock_file = f
        # A previous run's files describe that run: start this one's afresh.
        for name in (STACK, TIMELINE, DECISIONS, ENDPOINTS, RESTARTS):
            with contextlib.suppress(FileNotFoundError):
                self.path(name).unlink()
        for hold in self.path(HOLD_DIR).glob("*"):  # a previous controller's holds
            hold.unlink(missing_ok=True)

    @property
    def held(self) -> bool:
        """True between a successful :meth:`acquire` and :meth:`release`."""
        return self._lock_file is not None

    def release(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(STACK).unlink()
        if self._lock_file is not None:
            with contextlib.suppress(FileNotFoundError):
                self.path(LOCK).unlink()
            self._lock_file.close()  # closing drops the flock
            self._lock_file = None

    def write_stack(self, info: StackInfo) -> None:
        self._write_atomic(STACK, json.dumps(asdict(info), indent=2) + "\n")

    def append_timeline(self, point: TimelinePoint) -> None:
        self._append(TIMELINE, asdict(point))

    def append_decision(self, record: DecisionRecord) -> None:
        self._append(DECISIONS, asdict(record))

    def append_restart(self, record: RestartRecord) -> None:
        self._append(RESTARTS, asdict(record))

    def is_held(self, process: str) -> bool:
        """True while ``hold/<process>`` exists (see :func:`hold_path`)."""
        return hold_path(self.root, process).exists()

    def _append(self, name: str, row: dict[str, Any]) -> None:
        with open(self.path(name), "a") as f:
            f.write(json.dumps(row) + "\n")

    def _write_atomic(self, name: str, text: str) -> None:
        tmp = self.path(f".{name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path(name))


class StateFileError(ValueError):
    """A state file is not what docs/ARCHITECTURE.md says (the message names file and line)."""


def read_stack(path: Path) -> StackInfo:
    """``stack.json``; OSError when it cannot be read, StateFileError when it is malformed.

    A run killed with SIGKILL leaves its ``stack.json`` behind: callers compare ``pid``
    with the ``inflight up`` they started (or check that it is alive).
    """
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
        prometheus_url = doc["prometheus_url"]
        return StackInfo(
            pid=int(doc["pid"]),
            router_url=str(doc["router_url"]),
            prometheus_url=None if prometheus_url is None else str(prometheus_url),
            scaler_address=str(doc["scaler_address"]),
            time_scale=float(doc["time_scale"]),
            policy=str(doc["policy"]),
            started_at=float(doc["started_at"]),
            trigger_metadata=_settings(doc.get("trigger_metadata")),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StateFileError(f"{path}: {exc!r}: {text[:200]!r}") from exc


def _settings(value: object) -> dict[str, str] | None:
    """``stack.json``'s trigger settings: a mapping of strings, or None when absent."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"trigger_metadata is not a mapping of strings: {value!r}")
    return dict(value)


def parse_timeline(text: str, source: str = TIMELINE) -> list[TimelinePoint]:
    """The points of a ``timeline.jsonl`` text; a malformed line raises StateFileError
    naming ``source`` and the line number, except a half-written last line (the writer
    may be mid-line when it is read), which is skipped."""
    points: list[TimelinePoint] = []
    lines = text.splitlines()
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            point = TimelinePoint(
                t=float(doc["t"]), desired=int(doc["desired"]), ready=int(doc["ready"])
            )
            if doc.get("live") is not None:  # absent in timelines written before it was
                point = replace(point, live=int(doc["live"]))
            points.append(point)
        except (ValueError, KeyError, TypeError) as exc:
            if n == len(lines) and not text.endswith("\n"):
                break
            raise StateFileError(f"{source}:{n}: {exc}: {line[:200]!r}") from exc
    return points


def read_timeline(path: Path) -> list[TimelinePoint]:
    """``timeline.jsonl`` (no file yet: no points)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return parse_timeline(text, str(path))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a ``.jsonl`` file (a half-written last line is skipped)."""
    rows = []
    with contextlib.suppress(FileNotFoundError), open(path) as f:
        for line in f:
            with contextlib.suppress(json.JSONDecodeError):
                rows.append(json.loads(line))
    return rows
