"""Helpers every test uses: polling with a deadline, servers on ports they report, Prometheus.

Written once here; tests get them through the fixtures in ``tests/conftest.py``.
Nothing here sleeps to wait for a condition it could poll for.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

from inflight.procs import ManagedProcess
from inflight.procs import live_children as procs_live_children

T = TypeVar("T")

# The Python of the test run, so subprocesses use the same virtual environment.
PYTHON = sys.executable
INFLIGHT = [PYTHON, "-m", "inflight"]


class WaitTimeout(AssertionError):
    """A polled condition did not hold before its deadline."""


def wait_for(
    probe: Callable[[], T | bool | None],
    timeout_s: float = 10.0,
    interval_s: float = 0.05,
    what: str = "condition",
) -> T:
    """Call ``probe`` until it returns something truthy; return that value.

    Raises WaitTimeout naming ``what`` and the last value seen.
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while True:
        last = probe()
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"timed out after {timeout_s} s waiting for {what}; last={last!r}")
        time.sleep(interval_s)


async def until(probe: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``probe`` on the running loop (for servers that run on it too) until it holds;
    AssertionError naming ``what`` after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not probe():
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        await asyncio.sleep(0.005)


@dataclass
class Server:
    """A subprocess server started by a test, with the ports it reported (by name)."""

    process: ManagedProcess
    ports: dict[str, int]
    port_key: str | None = None

    @property
    def port(self) -> int:
        """Its HTTP port: ``port_key``'s, else ``http``'s, else ``metrics``' (the scaler)."""
        for key in (self.port_key, "http", "metrics"):
            if key is not None and key in self.ports:
                return self.ports[key]
        raise AssertionError(f"{self.process.label} reported no HTTP port: {self.ports}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class ProcessTracker:
    """Starts servers for one test and proves, at teardown, that none is left alive."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[ManagedProcess] = []

    def start(
        self,
        argv: Sequence[str],
        *,
        name: str,
        ready_path: str | None = "/health",
        ready_timeout_s: float = 30.0,
        env: dict[str, str] | None = None,
        grace_s: float = 5.0,
        port_placeholder: str | None = "{port}",
        port_key: str | None = None,
        cwd: Path | None = None,
    ) -> Server:
        """Start a server of ours on port 0 and read the ports it reports; poll ``ready_path``.

        ``port_placeholder`` in ``argv`` becomes ``0`` and ``--ready-file PATH`` is appended:
        the server binds and reports its own ports (:mod:`inflight.ready`), so no port is
        picked here that another process could take first. ``port_placeholder=None`` passes
        ``argv`` as it is and reads no report: for a command that does not serve itself
        (``inflight up``, whose ``{port}`` in ``--replica-cmd`` is the stack's own).
        """
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        index = len(self.processes)
        ready_file = None
        if port_placeholder is not None:
            ready_file = self.log_dir / f"{name}-{index}.ready.json"
            argv = [a.replace(port_placeholder, "0") for a in argv]
            argv = [*argv, "--ready-file", str(ready_file)]
        proc = ManagedProcess(
            argv,
            name=name,
            env=full_env,
            log_path=self.log_dir / f"{name}-{index}.log",
            grace_s=grace_s,
            ready_file=ready_file,
            cwd=cwd,
        )
        self.processes.append(proc)
        proc.start()
        ports = {} if ready_file is None else proc.wait_ports(timeout_s=ready_timeout_s)
        server = Server(process=proc, ports=ports, port_key=port_key)
        if ready_path is not None:
            proc.wait_ready(f"{server.url}{ready_path}", timeout_s=ready_timeout_s)
        return server

    def start_inflight(self, subcommand: Sequence[str], **kwargs: object) -> Server:
        """``python -m inflight <subcommand …>`` (use ``{port}`` for the listen port)."""
        return self.start([*INFLIGHT, *subcommand], **kwargs)  # type: ignore[arg-type]

    def stop_all(self) -> list[str]:
        """Stop every process (reverse start order); return the labels still alive."""
        survivors = []
        for proc in reversed(self.processes):
            with contextlib.suppress(Exception):
                proc.stop()
            if proc.alive():
                survivors.append(f"{proc.label} (pgid {proc.pgid})")
        return survivors


def start_kv_bound_emulator(
    procs: ProcessTracker, *, model: str, slots: int, time_scale: float | None = None
) -> Server:
    """The emulator in vllm-cpu's KV-bound configuration (docs/capacity.md): 40 blocks of
    128 tokens (one is vLLM's null block), ``--max-model-len 2048``, ``slots`` sequences;
    ``time_scale`` sets how long requests stay in flight (None: the emulator's default)."""
    scale = [] if time_scale is None else ["--time-scale", str(time_scale)]
    return procs.start_inflight(
        ["emulator", "--host", "127.0.0.1", "--port", "{port}",
         "--served-model-name", model, "--max-num-seqs", str(slots),
         "--num-gpu-blocks", "40", "--block-size", "128", "--max-model-len", "2048",
         *scale, "--startup-s", "0"],
        name="emulator",
    )  # fmt: skip


def start_emulator_and_router(procs: ProcessTracker, time_scale: float) -> tuple[Server, Server]:
    """One emulator (model "m", no start-up) at ``time_scale`` behind one router."""
    emu = procs.start_inflight(
        ["emulator", "--port", "{port}", "--time-scale", str(time_scale), "--startup-s", "0",
         "--served-model-name", "m"],
        name="emulator",
    )  # fmt: skip
    router = procs.start_inflight(
        ["router", "--port", "{port}", "--endpoints", emu.url],
        name="router",
        ready_path="/router/status",
    )
    return emu, router


def engine_leftovers(folder: Path) -> set[str]:
    """What a vLLM engine leaves directly in ``folder`` when it writes to the temp dir (its
    IPC sockets, its ``vllm_dist_*`` file store; ``inflight.engines.vllm_cpu.TMP_DIR_PREFIX``
    says why it should not): the socket files and file stores there."""
    return {p.name for p in folder.iterdir() if p.is_socket() or p.name.startswith("vllm_dist_")}


def assert_engines_left_nothing(folder: Path, before: set[str]) -> None:
    """Nothing of a stopped vLLM engine's is left: no new :func:`engine_leftovers` in
    ``folder`` since ``before``, and no stopped replica's own temp dir
    (``inflight.engines.vllm_cpu.sweep_tmp_dirs`` finds none to remove)."""
    from inflight.engines import vllm_cpu

    left = engine_leftovers(folder) - before
    assert not left, f"left in {folder}: {sorted(left)}"
    assert vllm_cpu.sweep_tmp_dirs() == [], "a stopped replica's temp dir was left"


def http_text(url: str) -> str:
    """A GET's body as text."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        return str(resp.read().decode())


def sample_total(metrics: str, name: str) -> float:
    """The sum of an exposition page's samples named ``name`` (any labels)."""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def assert_capacity_verdict(out: Path, summary: dict[str, Any], capacity: str, slots: int) -> None:
    """``python -m experiments.capacity_live``'s verdict under its KV-bound load (issue
    23), read from its ``--out-dir`` ``out`` and ``summary.json``: with ``capacity`` auto the
    scaler asked for a second replica, the KV dimension binding, at a value above the
    ``slots`` target; with ``requests`` it never asked, and every decision under load (at
    least two) was one replica at L ≤ ``slots``."""
    if capacity == "auto":
        asked = summary["asked"]
        assert asked["desired"] == 2 and asked["binding"] == "kv_tokens", asked
        assert asked["value"] > slots == asked["target"], asked
        return
    assert summary["asked"] is None, summary["asked"]
    decisions = [json.loads(x) for x in (out / "decisions.jsonl").read_text().splitlines()]
    under_load = [d for d in decisions if d["value"] is not None and d["t_s"] > 0]
    assert len(under_load) >= 2, decisions
    assert all(d["desired"] == 1 and d["value"] <= slots for d in under_load), decisions


@contextlib.contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port where a connection is refused, for as long as the block runs.

    The port is bound (from the OS) but not listening: connecting gets RST, and no other
    process can bind it meanwhile (a port picked and released could be taken by then).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def live_children(pid: int | None = None) -> list[int]:
    """PIDs of live (non-zombie) children of ``pid`` (default: this process)."""
    return procs_live_children(os.getpid() if pid is None else pid)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that does not log, with a one-call response writer."""

    def respond(
        self, body: bytes, content_type: str = "application/json", status: int = 200
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class LoopbackHTTPServer:
    """A threaded HTTP server on 127.0.0.1, port from the OS, for a stand-in peer that
    cannot run for real here (say so in the test). ``close()`` stops and unbinds it."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    def __enter__(self) -> LoopbackHTTPServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def openssl(*args: str, cwd: Path) -> None:
    """Run the openssl command line in ``cwd``; fail the test naming what went wrong."""
    import pytest

    exe = shutil.which("openssl")
    if exe is None:
        pytest.fail("openssl not found: install Debian's openssl to run the TLS tests")
    proc = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"openssl {' '.join(args)}:\n{proc.stderr}"


class ClosedLoop:
    """``workers`` clients on ``url``, each sending its next completion when the previous
    one ends, until the ``with`` block exits. ``codes`` holds every answer's status; a
    worker whose request fails at the connection (a killed router) records the error in
    ``errors`` and stops, the others go on."""

    def __init__(self, url: str, workers: int, body: dict[str, object]) -> None:
        self.url = url
        self.workers = workers
        self.body = body
        self.stop = threading.Event()
        self.codes: list[int] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        import aiohttp

        async with aiohttp.ClientSession() as session:

            async def worker() -> None:
                while not self.stop.is_set():
                    try:
                        async with session.post(
                            self.url + "/v1/completions", json=self.body
                        ) as resp:
                            await resp.read()
                            self.codes.append(resp.status)
                    except aiohttp.ClientError as exc:
                        self.errors.append(repr(exc))
                        return

            await asyncio.gather(*(worker() for _ in range(self.workers)))

    def __enter__(self) -> ClosedLoop:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "load generator did not stop"


def open_loop_args(**overrides: Any) -> argparse.Namespace:
    """The open-loop workload flags as ``inflight.workload.plan.plan_from_args`` reads them,
    every one not given (None), with ``overrides`` on top."""
    base: dict[str, Any] = dict.fromkeys(
        (
            "scenario", "arrivals", "trace", "prompt_tokens", "max_tokens", "seed",
            "slo_ttft_s", "slo_tpot_s", "drain_s", "min_replicas", "max_replicas", "startup_s",
        )
    )  # fmt: skip
    return argparse.Namespace(**{**base, **overrides})
