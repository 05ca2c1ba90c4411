"""Ctrl-C (SIGINT) and SIGTERM stop `inflight bench compare` cleanly: real processes.

The bench runs in its own process group; each policy's `inflight up` and its replicas, router,
scaler and Prometheus run in sessions of their own, so nobody but the bench can stop them.
A tiny open-loop compare is started, the test waits until a policy's stack is up and its
router has received requests, records every process and listening port of that stack (from
its state dir and /proc), signals the bench, and then asserts: exit code 130 (SIGINT) / 143
(SIGTERM), a line saying it was interrupted, no process or port of the stack left, a
finished policy's run file kept, the interrupted policy's not written, no comparison.json.

The hardest case is first: SIGINT to the bench's PID alone, with SIGINT ignored when it
started, as a shell that starts a command in the background leaves it (`cmd &` in a
script): Python then never turns SIGINT into KeyboardInterrupt, which is why Ctrl-C
was ignored before.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inflight import statedir as state
from inflight.bench import proctree
from inflight.measure.results import read_json
from inflight.ports import ports_of
from inflight.procs import pid_alive, port_is_free
from tests.support import INFLIGHT, wait_for

# 0.5 requests per seed second for 80 seed s, at time-scale 0.05: 4 wall seconds of traffic.
ARGS = (
    "bench", "compare", "--no-progress", "--arrivals", "poisson:0:0.5,80:0.5",
    "--prompt-tokens", "500", "--max-tokens", "50", "--seed", "3", "--drain-s", "20",
    "--time-scale", "0.05", "--startup-s", "0", "--max-replicas", "2",
    "--min-replicas", "1", "--sample-interval-s", "0.05",
)  # fmt: skip


def _received(router_url: str) -> float:
    """The router's router_requests_received_total (0 when it does not answer)."""
    try:
        with urllib.request.urlopen(router_url.rstrip("/") + "/metrics", timeout=2.0) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith("router_requests_received_total"):
            return float(line.split()[-1])
    return 0.0


def _sending(state_dir: Path, bench: subprocess.Popen[bytes]) -> state.StackInfo | None:
    """The stack's info once its router has received a request of the bench."""
    assert bench.poll() is None, f"the bench exited with {bench.returncode} before the signal"
    with contextlib.suppress(OSError, ValueError):
        info = state.read_stack(state_dir / state.STACK)
        if pid_alive(info.pid) and _received(info.router_url) > 0:
            return info
    return None


def _stack_pids(state_dir: Path, up_pid: int) -> set[int]:
    """Every process of the stack: its tree in /proc and the groups children.json names."""
    pids = proctree.descendants(up_pid, include_root=True)
    for row in json.loads((state_dir / state.CHILDREN).read_text()):
        pids.add(int(row["pgid"]))
        pids |= {int(pid) for pid, _started in row["members"]}
    return {p for p in pids if pid_alive(p)}


@contextlib.contextmanager
def _bench(argv: list[str], log: Path, ignore_sigint: bool) -> Iterator[subprocess.Popen[bytes]]:
    """Start the bench in its own process group; stop what is left of it by PID at the end."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if ignore_sigint else None
    try:  # an ignored disposition is inherited through fork and exec
        with log.open("wb") as out:
            bench = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    try:
        yield bench
    finally:
        if bench.poll() is None:  # only when the test failed: never leave it running
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait(timeout=10)


def _kill_left(pids: set[int]) -> None:
    for pid in proctree.alive(pids):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("policies", "interrupted", "sig", "to_group", "ignore_sigint"),
    [
        # Ctrl-C to the PID alone, SIGINT ignored at start; the first policy finished.
        ("fixed:1,fixed:2", "fixed2", signal.SIGINT, False, True),
        # Ctrl-C as a terminal sends it: to the bench's foreground process group.
        ("fixed:1", "fixed1", signal.SIGINT, True, False),
        ("fixed:1", "fixed1", signal.SIGTERM, False, False),
    ],
    ids=["sigint-pid-ignored-at-start", "sigint-group", "sigterm-pid"],
)
def test_a_signal_stops_the_compare_and_its_stack(
    tmp_path: Path,
    policies: str,
    interrupted: str,
    sig: signal.Signals,
    to_group: bool,
    ignore_sigint: bool,
) -> None:
    out, states, log = tmp_path / "out", tmp_path / "state", tmp_path / "bench.log"
    argv = [*INFLIGHT, *ARGS, "--policies", policies, "--out-dir", str(out),
            "--state-root", str(states)]  # fmt: skip
    state_dir = states / interrupted
    pids: set[int] = set()
    with _bench(argv, log, ignore_sigint) as bench:
        try:
            info = wait_for(
                lambda: _sending(state_dir, bench),
                timeout_s=120.0,
                interval_s=0.1,
                what=f"{interrupted}'s stack up and receiving requests",
            )
            pids = _stack_pids(state_dir, info.pid)
            ports = ports_of(pids)
            assert info.pid in pids and len(pids) >= 5, pids  # up, replica, router, scaler, prom
            assert ports, pids
            if to_group:
                os.killpg(bench.pid, sig)
            else:
                os.kill(bench.pid, sig)
            try:
                code = bench.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail(f"the bench ignored {sig.name}:\n{log.read_text()[-3000:]}")
        finally:
            _kill_left(pids)  # after a failure only: the bench must have stopped them
    text = log.read_text()
    assert code == 128 + sig, f"exit code {code}:\n{text[-3000:]}"
    last = text.strip().splitlines()[-1]
    assert "interrupted" in last and sig.name in last, text[-3000:]
    assert not proctree.alive(pids), f"left running: {sorted(proctree.alive(pids))}"
    assert all(port_is_free(p) for p in ports), ports
    assert not (out / "comparison.json").exists() and not (out / "comparison.md").exists()
    assert not list(out.glob(f"{interrupted}.json*"))  # a partial run is not a result
    if interrupted == "fixed2":  # the finished policy's run is kept, whole, and named
        doc = read_json(out / "fixed1.json.gz")
        assert doc["policy"] == "fixed:1" and doc["requests_sent"] > 0
        assert "fixed1.json.gz" in last
    else:
        assert not any(out.glob("*.json*"))
