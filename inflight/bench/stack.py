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
import re
import signal
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from inflight import statedir as state
from inflight.bench import interrupt, proctree
from inflight.bench.sampler import STATUS_PATH, parse_status
from inflight.names import META_POLICY, META_SLOTS_PER_REPLICA, META_TIME_SCALE, METADATA_DEFAULTS
from inflight.planes.peers.catalog import POLICY_NAMES
from inflight.ports import ports_of
from inflight.procs import ManagedProcess, ProcessError, inflight_command, port_is_free


class StackError(RuntimeError):
    """``inflight up`` did not come up; the message carries its log's tail."""


# The autoscaled policies ``inflight up --policy`` takes: ours, the seed's, and the peers'
# control planes (issue #13).
AUTOSCALED = POLICY_NAMES
_VARIANT = re.compile(r"^saturation\[(?P<settings>[^\]]*)\]$")
_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Policy:
    """A policy of the comparison: ``fixed:N`` (frozen N replicas), or one ``inflight up
    --policy`` runs (:data:`AUTOSCALED`), with optional saturation trigger ``metadata``
    (``saturation[targetSaturation=0.8;scaleDownWindowSeconds=120]``)."""

    name: str
    kind: str  # "fixed" or one of AUTOSCALED
    replicas: int  # start (and, for fixed, the only) replica count
    metadata: tuple[tuple[str, str], ...] = ()  # --scaler-metadata KEY=VALUE overrides

    @property
    def frozen(self) -> bool:
        return self.kind == "fixed"

    @property
    def slug(self) -> str:
        """A file-name-safe name: ``fixed:2`` → ``fixed2``,
        ``saturation[targetSaturation=0.8;…]`` → ``saturation-targetSaturation0.8-…``."""
        text = self.name.replace(":", "").replace("=", "")
        return _SLUG_UNSAFE.sub("-", text).strip("-")

    def up_args(self, max_replicas: int, min_replicas: int | None = None) -> list[str]:
        if self.frozen:
            return ["--replicas", str(self.replicas), "--no-autoscale"]
        args = ["--policy", self.kind]
        if min_replicas is not None:
            args += ["--min-replicas", str(min_replicas)]
        args += ["--replicas", str(self.replicas), "--max-replicas", str(max_replicas)]
        if self.metadata:
            args += ["--scaler-metadata", ",".join(f"{k}={v}" for k, v in self.metadata)]
        return args


def _variant_metadata(raw: str, settings: str) -> tuple[tuple[str, str], ...]:
    """``targetSaturation=0.8;scaleDownWindowSeconds=120`` → pairs; keys from
    inflight/names.py ``METADATA_DEFAULTS``; errors name ``--policies`` and the item."""
    pairs: list[tuple[str, str]] = []
    for item in (x.strip() for x in settings.split(";")):
        key, eq, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key or not value:
            raise ValueError(f"--policies: {raw!r}: expected KEY=VALUE, got {item!r}")
        if key not in METADATA_DEFAULTS or key in _FIXED_METADATA:
            valid = ", ".join(k for k in METADATA_DEFAULTS if k not in _FIXED_METADATA)
            raise ValueError(f"--policies: {raw!r}: unknown setting {key!r}; valid: {valid}")
        if _SLUG_UNSAFE.search(value):
            raise ValueError(
                f"--policies: {raw!r}: the value {value!r} of {key} may hold only letters, "
                "digits, '.', '_' and '-'"
            )
        if key in (k for k, _ in pairs):
            raise ValueError(f"--policies: {raw!r}: {key} given twice")
        pairs.append((key, value))
    try:  # the scaler's own reading of its metadata judges the values
        parse_metadata({**METADATA_DEFAULTS, **dict(pairs)})
    except MetadataError as exc:
        raise ValueError(f"--policies: {raw!r}: {exc}") from None
    return tuple(pairs)


# Keys inflight up sets from its own flags: a variant may not override them.
_FIXED_METADATA = frozenset({META_POLICY, META_TIME_SCALE, META_SLOTS_PER_REPLICA})


def parse_policies(text: str, start_replicas: int = 1) -> list[Policy]:
    """``"fixed:1,fixed:2,qps,saturation,kpa,saturation[targetSaturation=0.8]"`` →
    policies; autoscaled ones start at ``start_replicas``; errors name ``--policies``."""
    out: list[Policy] = []
    for raw in (p.strip() for p in text.split(",")):
        if not raw:
            continue
        if raw in AUTOSCALED:
            out.append(Policy(raw, raw, start_replicas))
        elif (m := _VARIANT.match(raw)) is not None:
            out.append(
                Policy(raw, "saturation", start_replicas, _variant_metadata(raw, m["settings"]))
            )
        elif raw.startswith("fixed:") and raw[6:].isdigit() and int(raw[6:]) >= 1:
            out.append(Policy(raw, "fixed", int(raw[6:])))
        else:
            raise ValueError(
                f"--policies: unknown policy {raw!r}; use fixed:N (N >= 1), "
                f"{', '.join(AUTOSCALED)} or saturation[KEY=VALUE;...]"
            )
    if not out:
        raise ValueError("--policies: no policy given")
    if len({p.name for p in out}) != len(out):
        raise ValueError(f"--policies: a policy is listed twice in {text!r}")
    if len({p.slug for p in out}) != len(out):
        raise ValueError(f"--policies: two policies would share a file name in {text!r}")
    return out


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

        Not cut short by Ctrl-C or SIGTERM (:func:`inflight.bench.interrupt.deferred`): a stop half
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
