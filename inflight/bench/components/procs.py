"""The processes a component benchmark starts: each in its own process group, on port 0
where it can report its port (``--ready-file``), stopped by PID in reverse order."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from inflight.ports import ports_of
from inflight.procs import ManagedProcess, ProcessError, free_port, inflight_command

PY = sys.executable
INFLIGHT = inflight_command()


@dataclass
class Stack:
    """Everything this run started; stopped in reverse order, by PID."""

    workdir: Path
    procs: list[ManagedProcess] = field(default_factory=list)

    def start(
        self, argv: list[str], name: str, ready_url: str, env: dict[str, str] | None = None
    ) -> ManagedProcess:
        """A third-party server on a port picked for it; poll ``ready_url``."""
        full_env = dict(os.environ)
        full_env.update(env or {})
        proc = ManagedProcess(
            argv, name=name, env=full_env, log_path=self.workdir / f"{name}.log", grace_s=5.0
        )
        self.procs.append(proc)
        proc.start()
        proc.wait_ready(ready_url, timeout_s=60.0)
        return proc

    def start_ours(
        self,
        argv: list[str],
        name: str,
        health_path: str,
        env: dict[str, str] | None = None,
        reports_port: bool = True,
    ) -> tuple[str, ManagedProcess]:
        """A server of ours, told ``--port 0``: read the port it reports, poll its health;
        returns its base URL. (nginx and vllm-router cannot report: they get free_port.)

        ``env``: added to this process's environment (a tree on ``PYTHONPATH``).
        ``reports_port=False``: a router from before ``--ready-file`` (an old commit in
        ``inflight bench router --ab``): its port is read back from /proc."""
        ready_file = self.workdir / f"{name}.ready.json" if reports_port else None
        proc = ManagedProcess(
            [*argv, "--ready-file", str(ready_file)] if ready_file else list(argv),
            name=name,
            env={**os.environ, **(env or {})},
            log_path=self.workdir / f"{name}.log",
            grace_s=5.0,
            ready_file=ready_file,
        )
        self.procs.append(proc)
        proc.start()
        url = f"http://127.0.0.1:{wait_port(proc, timeout_s=60.0)}"
        proc.wait_ready(url + health_path, timeout_s=60.0)
        return url, proc

    def stop(self, proc: ManagedProcess) -> None:
        proc.stop()
        self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            with contextlib.suppress(Exception):
                proc.stop()
        self.procs.clear()


def wait_port(proc: ManagedProcess, timeout_s: float) -> int:
    """The HTTP port of a server of ours started with ``--port 0``: from its ready file,
    or, without one (a router from before ``--ready-file``), read back from /proc
    (:mod:`inflight.ports`)."""
    if proc.ready_file is not None:
        return proc.wait_ports(timeout_s=timeout_s)["http"]
    deadline = time.monotonic() + timeout_s
    while True:
        found = ports_of([proc.pid])
        if found:
            return min(found)
        if proc.poll() is not None or time.monotonic() > deadline:
            raise ProcessError(f"{proc.label} (pid {proc.pid}) listens on no port")
        time.sleep(0.05)


def start_inflight(
    stack: Stack, upstreams: list[str], dispatch: str = "least-outstanding", client: str = ""
) -> tuple[str, ManagedProcess]:
    """``inflight router`` (4 slots per endpoint) in front of ``upstreams``."""
    extra = ["--upstream-client", client] if client else []
    return stack.start_ours(
        [*INFLIGHT, "router", "--host", "127.0.0.1", "--port", "0",
         "--slots-per-endpoint", "4", "--endpoints", ",".join(upstreams),
         "--dispatch", dispatch, *extra],
        f"inflight-{dispatch}-{len(stack.procs)}",
        "/health",
    )  # fmt: skip


def start_emulators(
    stack: Stack, count: int, time_scale: float, model: str = "m", slots: int = 4
) -> list[tuple[str, ManagedProcess]]:
    """``count`` emulators × ``slots`` serving ``model``, ready; (base URL, process) each."""
    out = []
    for i in range(count):
        argv = [*INFLIGHT, "emulator", "--host", "127.0.0.1", "--port", "0",
                "--served-model-name", model, "--max-num-seqs", str(slots),
                "--time-scale", str(time_scale), "--startup-s", "0"]  # fmt: skip
        out.append(stack.start_ours(argv, f"emulator-{i}-{len(stack.procs)}", "/health"))
    return out


def start_vllm_router(
    stack: Stack, binary: str, upstreams: list[str]
) -> tuple[str, ManagedProcess]:
    """PyPI's vllm-router (Rust), round robin, on a picked port (it cannot report one)."""
    port = free_port()  # third-party, cannot report a port
    proc = stack.start(
        [binary, "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *upstreams,
         "--policy", "round_robin", "--log-level", "warning"],
        f"vllm-router-{port}",
        f"http://127.0.0.1:{port}/health",
    )  # fmt: skip
    return f"http://127.0.0.1:{port}", proc
