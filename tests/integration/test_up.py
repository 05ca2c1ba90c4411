"""``inflight up`` end to end: real replicas, router, scaler (and Prometheus), small time-scale."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from inflight.bench.proctree import descendants
from inflight.cli import build_parser
from inflight.emulator.cli import DEFAULT_MODEL
from inflight.ports import ports_of
from inflight.procs import live_processes, pid_alive, port_is_free
from inflight.statedir import read_jsonl, read_stack, read_timeline
from inflight.up import orphans
from inflight.up.cli import settings_from_args
from inflight.up.stack import Stack, StackError
from tests.fake_replica import COMMAND as FAKE_REPLICA
from tests.support import INFLIGHT, PYTHON, wait_for

TS = "0.05"  # emulator start-up 1.5 s, request ≈ 0.23 s, HPA sync 0.75 s, down window 3 s


def launch(procs, argv, name, cwd=None):
    """Start ``argv`` under the ``procs`` tracker (so teardown proves it gone); every
    ``{port}`` in it (that of --replica-cmd) is the stack's own."""
    server = procs.start(
        argv, name=name, ready_path=None, grace_s=40.0, port_placeholder=None, cwd=cwd
    )
    return server.process


def start_up(procs, state_dir: Path, *flags: str, timeout_s: float = 90.0, command=None, cwd=None):
    """Start ``inflight up`` (``command``: how, default ``python -m inflight``) and wait for
    stack.json; return (process, stack info)."""
    argv = [*(command or INFLIGHT), "up", "--state-dir", str(state_dir), *flags]
    proc = launch(procs, argv, "up", cwd=cwd)
    stack_file = state_dir / "stack.json"

    def ready():
        if proc.poll() is not None:
            out = Path(proc.log_path).read_text()
            raise AssertionError(f"inflight up exited with {proc.poll()}\n{out[-3000:]}")
        # A killed run leaves its stack.json behind: wait for this run's own.
        with contextlib.suppress(OSError, ValueError):
            info = read_stack(stack_file)
            return info if info.pid == proc.pid else None
        return None

    info = wait_for(ready, timeout_s=timeout_s, interval_s=0.1, what="stack.json")
    return proc, info


def status(info):
    with urllib.request.urlopen(info.router_url + "/router/status", timeout=5) as resp:
        return json.loads(resp.read())


def ready_endpoints(info):
    return [e["url"] for e in status(info)["endpoints"] if e["state"] == "ready"]


def complete(info, timeout_s=60.0):
    body = json.dumps({"model": DEFAULT_MODEL, "prompt": "hi", "max_tokens": 30}).encode()
    req = urllib.request.Request(
        info.router_url + "/v1/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return resp.status


class Load:
    """``concurrency`` closed-loop clients until stopped; counts answers by status."""

    def __init__(self, info, concurrency):
        self.info = info
        self.stop = threading.Event()
        self.codes: list[object] = []
        self.threads = [threading.Thread(target=self._worker) for _ in range(concurrency)]

    def _worker(self):
        while not self.stop.is_set():
            try:
                self.codes.append(complete(self.info))
            except (urllib.error.URLError, OSError) as exc:
                self.codes.append(repr(exc))

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def timeline(state_dir):
    return read_timeline(state_dir / "timeline.jsonl")


def test_load_scales_up_to_two_then_back_to_one(procs, tmp_path):
    state = tmp_path / "state"
    # The floor off: the scale-down window is the subject (the floor's memory, 45 s at this
    # time-scale, would keep 2 replicas past the timeout).
    _, info = start_up(procs, state, "--time-scale", TS, "--max-replicas", "2",
                       "--scaler-metadata", "floorWindowSeconds=0")  # fmt: skip
    assert info.prometheus_url, "prometheus is installed here; the stack should use it"
    # stack.json keeps every trigger setting the scaler runs with, the override among them
    # (what a bench run records; inflight sim calibrate re-simulates it with them).
    kept = info.trigger_metadata or {}
    assert kept["floorWindowSeconds"] == "0" and kept["maxReplicaCount"] == "2"
    assert kept["floorFraction"] and kept["timeScale"] == TS
    with Load(info, 16) as load:
        wait_for(lambda: len(ready_endpoints(info)) == 2, timeout_s=60, what="2 ready endpoints")
    assert load.codes and all(c == 200 for c in load.codes), set(map(str, load.codes))
    wait_for(
        lambda: timeline(state)[-1].desired == 1 and len(ready_endpoints(info)) == 1,
        timeout_s=60,
        what="back to 1 replica after the window",
    )
    decisions = read_jsonl(state / "decisions.jsonl")
    assert any(d["desired"] == 2 and d["L"] is not None for d in decisions)
    assert {"t", "L", "capacity", "saturation", "value", "target", "desired", "reason"} <= set(
        decisions[-1]
    )


# A busy loop's own bound (seconds), should the test die before it stops the loop itself.
BUSY_BOUND_S = 600


@contextlib.contextmanager
def busy_cpus():
    """One process spinning on each CPU (``os.cpu_count()``), each bounded by
    BUSY_BOUND_S; stopped by its PID when the block exits."""
    code = (
        f"import time\nend = time.monotonic() + {BUSY_BOUND_S}\nwhile time.monotonic() < end: pass"
    )
    spinners = [subprocess.Popen([PYTHON, "-c", code]) for _ in range(os.cpu_count() or 2)]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            os.kill(spinner.pid, signal.SIGKILL)
        for spinner in spinners:
            spinner.wait(timeout=30)


def test_a_fresh_stack_starts_on_a_busy_machine(procs, tmp_path):
    """Every CPU spinning, ``inflight up --min-replicas 1`` at time-scale 0.1: it gets its
    first metric and starts (stack.json is written once the scaler answered GetMetrics).

    A fresh Prometheus' history starts inside the window, and a loaded machine scrapes
    late, so the window has gaps; ``scrapeIntervalSeconds=0.05`` (Prometheus scrapes every
    0.5 s here) makes every scrape a late one, so the test does not depend on how late the
    load makes them. Idle, the window reads 0: one replica, at minReplicaCount 1, lowers
    nothing. (Before issue 26: "no scale-down from 1 to 0 replicas on partial data",
    UNAVAILABLE until ``inflight up`` gave up after 120 s, as `bench compare` did.)"""
    from inflight.control.trigger import scaler_metadata
    from inflight.planes.scaler_client import ScalerClient

    overrides = {"scrapeIntervalSeconds": "0.05"}
    flags = ["--time-scale", "0.1", "--min-replicas", "1", "--max-replicas", "2",
             "--scaler-metadata", "scrapeIntervalSeconds=0.05"]  # fmt: skip
    with busy_cpus() as spinners:
        proc, info = start_up(procs, tmp_path / "state", *flags, timeout_s=300.0)
        assert all(s.poll() is None for s in spinners), "the load ran all along"
    assert info.prometheus_url, "prometheus is installed here; the stack should use it"
    meta = scaler_metadata(4, 0.1, "saturation", overrides, min_replicas=1, max_replicas=2)
    client = ScalerClient(info.scaler_address, meta)
    try:
        spec = client.metric_spec()
        assert client.metric_value(spec.metric_name) == 0.0  # idle, answered
    finally:
        client.close()
    assert proc.poll() is None


# Files a user may have where they run `inflight up`, named as the project's packages (and
# as its old top-level ones): importing any of them fails loudly.
SHADOWS = ("inflight", "router", "external_scaler", "dashboards", "bench", "sim", "emulator",
           "orchestrator")  # fmt: skip


def test_files_in_the_working_directory_shadow_no_package(procs, tmp_path):
    """The installed command, run where a bench.py (and friends) lies: every child (router,
    scaler, replicas) is started so that the working directory is not on its sys.path."""
    work = tmp_path / "work"
    work.mkdir()
    for name in SHADOWS:
        (work / f"{name}.py").write_text(f"raise SystemExit('shadowed by {name}.py')\n")
    entry = Path(PYTHON).parent / "inflight"
    assert entry.exists(), f"the installed entry point {entry} is missing"
    state = tmp_path / "state"
    flags = ["--time-scale", TS, "--replicas", "1", "--no-autoscale", "--no-prometheus"]
    proc, info = start_up(procs, state, *flags, command=[str(entry)], cwd=work)
    assert complete(info) == 200
    log = Path(proc.log_path).read_text() + "".join(
        p.read_text() for p in (state / "logs").glob("*.log")
    )
    assert "shadowed by" not in log


def test_concurrency_4_on_4_slots_does_not_scale(procs, tmp_path):
    state = tmp_path / "state"
    _, info = start_up(procs, state, "--time-scale", TS, "--max-replicas", "2", "--no-prometheus")
    assert info.prometheus_url is None
    n_before = len(read_jsonl(state / "decisions.jsonl"))
    with Load(info, 4) as load:
        # Long enough for several HPA syncs (0.75 s each) with L = 4 on 4 slots.
        wait_for(
            lambda: len(read_jsonl(state / "decisions.jsonl")) >= n_before + 8,
            timeout_s=60,
            what="8 scaling decisions under load",
        )
    assert len(load.codes) > 8
    decisions = read_jsonl(state / "decisions.jsonl")[n_before:]
    assert any(d["L"] and d["L"] >= 3 for d in decisions), decisions
    assert {d["desired"] for d in decisions} == {1}
    assert {p.desired for p in timeline(state)} == {1}


def test_frozen_replicas_timeline_has_one_value(procs, tmp_path):
    state = tmp_path / "state"
    flags = ["--time-scale", TS, "--replicas", "2", "--no-autoscale", "--no-prometheus"]
    _, info = start_up(procs, state, *flags)
    with Load(info, 16):
        wait_for(lambda: len(timeline(state)) >= 8, timeout_s=60, what="8 timeline points")
    points = [p for p in timeline(state) if p.t >= info.started_at]
    assert points and {(p.desired, p.ready) for p in points} == {(2, 2)}
    assert not (state / "decisions.jsonl").exists()


def test_killed_replica_is_replaced_and_never_used_after(procs, tmp_path):
    state = tmp_path / "state"
    flags = ["--time-scale", TS, "--replicas", "2", "--no-autoscale", "--no-prometheus"]
    _, info = start_up(procs, state, *flags)
    victim = ready_endpoints(info)[0]
    endpoints_file = state / "endpoints.json"
    log = state / "logs" / "up.log"
    with Load(info, 8) as load:
        pid = _listener_pid(int(victim.rsplit(":", 1)[1]))
        os.kill(pid, signal.SIGKILL)
        wait_for(
            lambda: victim not in json.loads(endpoints_file.read_text()),
            timeout_s=30,
            what="the dead replica out of endpoints.json",
        )
        wait_for(
            lambda: _let_go(info, victim),
            timeout_s=30,
            what="the router to drop the dead replica and finish what it held",
        )
        served_before = _served_by(info, victim)
        wait_for(
            lambda: len(ready_endpoints(info)) == 2,
            timeout_s=60,
            what="a replacement replica",
        )
    assert victim not in ready_endpoints(info)
    assert _served_by(info, victim) == served_before, "router sent to the dead replica"
    assert "failed (exited)" in log.read_text()
    errors = [c for c in load.codes if c != 200]
    assert len(errors) <= 8, errors  # at most the requests in flight on it when it died


def test_sigterm_stops_every_process_and_frees_every_port(procs, tmp_path):
    state = tmp_path / "state"
    fake = f"{FAKE_REPLICA} --port {{port}} --worker --startup-s 0.2"
    flags = ["--time-scale", TS, "--replicas", "2", "--replica-cmd", fake]
    server, info = start_up(procs, state, *flags)
    tree = descendants(server.pid)
    workers = [p for p in tree if "while True" in _cmdline(p)]
    assert len(workers) == 2, "each fake replica should have a worker child"
    ports = [int(u.rsplit(":", 1)[1]) for u in json.loads((state / "endpoints.json").read_text())]
    ports += [int(info.router_url.rsplit(":", 1)[1]), int(info.scaler_address.rsplit(":")[1])]
    ports.append(int(info.prometheus_url.rsplit(":", 1)[1]))
    os.kill(server.pid, signal.SIGTERM)
    code = server.popen.wait(timeout=60)
    assert code == 0
    alive = [p for p in tree if pid_alive(p)]
    assert not alive, [(p, _cmdline(p)) for p in alive]
    assert all(port_is_free(p) for p in ports)
    assert not (state / "stack.json").exists() and not (state / "lock").exists()
    out = Path(server.log_path).read_text()
    assert "no process left running, every port free" in out


def test_second_up_on_the_same_state_dir_refuses(procs, tmp_path):
    state = tmp_path / "state"
    fake = f"{FAKE_REPLICA} --port {{port}}"
    flags = ["--time-scale", TS, "--replica-cmd", fake, "--no-prometheus"]
    server, _ = start_up(procs, state, *flags)
    second = launch(
        procs, [*INFLIGHT, "up", "--state-dir", str(state), "--replica-cmd", fake], "second"
    )
    assert second.popen.wait(timeout=60) == 1
    text = Path(second.log_path).read_text()
    assert f"pid {server.pid}" in text and "is running on state dir" in text
    assert (state / "stack.json").exists(), "the refused run must not touch the first's state"


def test_scale_to_zero_then_a_request_waits_and_succeeds(procs, tmp_path):
    state = tmp_path / "state"
    flags = [
        "--time-scale", TS, "--min-replicas", "0", "--cooldown-s", "20",
        "--polling-interval-s", "10", "--no-prometheus",
    ]  # fmt: skip
    _, info = start_up(procs, state, *flags)
    wait_for(
        lambda: timeline(state)[-1].desired == 0 and not ready_endpoints(info),
        timeout_s=60,
        what="idle -> 0 replicas after the cooldown",
    )
    assert complete(info, timeout_s=60) == 200
    assert any(p.desired == 1 for p in timeline(state) if p.t > info.started_at + 1)
    decisions = read_jsonl(state / "decisions.jsonl")
    assert any("activated from zero" in d["reason"] for d in decisions)


def test_groups_left_by_a_killed_up_are_stopped_by_the_next(procs, tmp_path):
    state = tmp_path / "state"
    fake = f"{FAKE_REPLICA} --port {{port}} --worker"
    flags = ["--time-scale", TS, "--replica-cmd", fake, "--no-prometheus"]
    first, _ = start_up(procs, state, *flags)
    try:
        left = descendants(first.pid)
        os.kill(first.pid, signal.SIGKILL)  # no clean-up at all
        first.popen.wait(timeout=30)
        assert any(pid_alive(p) for p in left), "children run in their own sessions"
        second, _ = start_up(procs, state, *flags)
        assert not [p for p in left if pid_alive(p)], "leftovers of the killed run survived"
        assert "left running by a previous inflight up" in (state / "logs" / "up.log").read_text()
        os.kill(second.pid, signal.SIGTERM)
        assert second.popen.wait(timeout=60) == 0
    finally:
        orphans.reap(state / "children.json", grace_s=5.0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--no-autoscale"], "--no-autoscale needs --replicas"),
        (["--max-replicas", "0"], "--max-replicas"),
        (["--time-scale", "0"], "--time-scale"),
        (["--replica-cmd", "vllm serve m --port 8000"], "{port}"),
        (["--replicas", "5", "--max-replicas", "2"], "--replicas"),
    ],
)
def test_bad_flags_are_named(procs, tmp_path, flags, message):
    proc = launch(procs, [*INFLIGHT, "up", "--state-dir", str(tmp_path / "s"), *flags], "bad")
    assert proc.popen.wait(timeout=60) == 2
    assert message in Path(proc.log_path).read_text()


def test_a_process_still_starting_when_up_is_killed_is_stopped_by_the_next(procs, tmp_path):
    """children.json names a process from the moment it starts, not once it is ready."""
    state = tmp_path / "state"
    tree_file = tmp_path / "tree.json"
    fake = f"{FAKE_REPLICA} --port {{port}}"
    argv = [PYTHON, "-c", KILLED_WHILE_THE_ROUTER_STARTS, "up", "--state-dir", str(state),
            "--time-scale", TS, "--replica-cmd", fake, "--no-prometheus"]  # fmt: skip
    server = procs.start(
        argv, name="up", ready_path=None, port_placeholder=None,
        env={"TREE_FILE": str(tree_file)},
    )  # fmt: skip
    assert server.process.popen.wait(timeout=60) == -signal.SIGKILL
    tree = {int(pid): " ".join(argv) for pid, argv in json.loads(tree_file.read_text()).items()}
    routers = [p for p, command in tree.items() if "-m inflight router" in command]
    try:
        assert routers and all(pid_alive(p) for p in tree), tree  # orphans of the killed run
        orphans.reap(state / "children.json", grace_s=5.0)  # what the next inflight up does
        assert not [p for p in tree if pid_alive(p)], tree
    finally:
        for pid in routers:  # never recorded (the bug): stop it by PID
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_busy_port_is_named_and_not_taken_for_a_leak(procs, tmp_path):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        fake = f"{FAKE_REPLICA} --port {{port}}"
        argv = [*INFLIGHT, "up", "--state-dir", str(tmp_path / "s"), "--port", str(port),
                "--replica-cmd", fake, "--no-prometheus"]  # fmt: skip
        proc = launch(procs, argv, "up")
        assert proc.popen.wait(timeout=60) == 1
    out = Path(proc.log_path).read_text()
    assert f"--port {port} is in use" in out
    assert "still in use" not in out and "no process left running, every port free" in out


def test_shutdown_after_a_failed_start_closes_the_log_file(tmp_path):
    """In-process: the start fails after a replica started; shutdown stops it and closes
    up.log (no handler left on the "inflight" logger to write into a finished run's log)."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        fake = f"{FAKE_REPLICA} --port {{port}}"
        argv = ["up", "--state-dir", str(tmp_path / "s"), "--port", str(other.getsockname()[1]),
                "--replica-cmd", fake, "--no-prometheus"]  # fmt: skip
        args = build_parser().parse_args(argv)
        stack = Stack(settings_from_args(args))
        with pytest.raises(StackError, match="is in use"):
            stack.start(threading.Event())
        assert stack.supervisor.all_processes, "the replica starts before the router"
        assert stack.shutdown() == []
    log_files = [
        h.baseFilename
        for h in logging.getLogger("inflight").handlers
        if isinstance(h, logging.FileHandler)
    ]
    assert not [f for f in log_files if f.startswith(str(tmp_path))], log_files


# --- helpers reading /proc ------------------------------------------------------------


def _cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _listener_pid(port):
    for proc in live_processes():
        if port in ports_of([proc.pid]):
            return proc.pid
    raise AssertionError(f"nobody listens on {port}")


def _let_go(info, url):
    """The router lists ``url`` no more, or only as not ready with nothing in flight."""
    for ep in status(info)["endpoints"]:
        if ep["url"] == url:
            return ep["state"] != "ready" and ep["inflight"] == 0
    return True


def _served_by(info, url):
    """Requests the router sent to ``url``: finished (any code) plus upstream errors."""
    endpoint = url.removeprefix("http://")
    with urllib.request.urlopen(info.router_url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        names = ("router_requests_total{", "router_upstream_errors_total{")
        if line.startswith(names) and f'endpoint="{endpoint}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


# Failures injected into a real ``inflight up`` (python -c): before failing, the process
# writes its whole tree (pid -> argv) to TREE_FILE so the test can check it afterwards.
INJECT = """
import json, os, pathlib, signal, sys
from inflight.bench.proctree import descendants
from inflight.cli import main
from inflight.procs import ManagedProcess
from inflight.planes.autoscaler import Autoscaler
from inflight.planes.scaler_client import ScalerClient, ScalerUnavailable

def fail(error):  # None: SIGKILL, no clean-up at all
    def patched(*args, **kwargs):
        tree = {p: pathlib.Path(f"/proc/{p}/cmdline").read_bytes().decode().split("\\0")
                for p in descendants(os.getpid())}
        pathlib.Path(os.environ["TREE_FILE"]).write_text(json.dumps(tree))
        if error is None:
            os.kill(os.getpid(), signal.SIGKILL)
        raise error
    return patched

%s
sys.exit(main(sys.argv[1:]))
"""
# The scaler serves /metrics but its gRPC channel never becomes ready: the start fails
# after the replicas, the router, Prometheus and the scaler are up.
SCALER_NEVER_READY = INJECT % (
    "ScalerClient.wait_ready = fail(ScalerUnavailable('injected: gRPC never became ready'))"
)
# A bug in the main loop, once the stack is up: an error nobody expected.
BUG_IN_THE_LOOP = INJECT % "Autoscaler.tick = fail(RuntimeError('injected: a bug in the loop'))"
# SIGKILL while waiting for the router (the first process waited for) to answer.
KILLED_WHILE_THE_ROUTER_STARTS = INJECT % "ManagedProcess.wait_ready = fail(None)"


@pytest.mark.parametrize(
    ("inject", "message"),
    [
        (SCALER_NEVER_READY, "error: scaler did not start: injected: gRPC never became ready"),
        (BUG_IN_THE_LOOP, "RuntimeError: injected: a bug in the loop"),
    ],
)
def test_a_failure_stops_everything_that_was_started(procs, tmp_path, inject, message):
    state = tmp_path / "state"
    tree_file = tmp_path / "tree.json"
    fake = f"{FAKE_REPLICA} --port {{port}} --worker"
    argv = [PYTHON, "-c", inject, "up", "--state-dir", str(state),
            "--time-scale", TS, "--replica-cmd", fake]  # fmt: skip
    server = procs.start(
        argv, name="up", ready_path=None, grace_s=40.0, port_placeholder=None,
        env={"TREE_FILE": str(tree_file)},
    )  # fmt: skip
    try:
        assert server.process.popen.wait(timeout=120) == 1
        tree = {int(pid): argv for pid, argv in json.loads(tree_file.read_text()).items()}
        commands = [" ".join(argv) for argv in tree.values()]
        for part in ("fake_replica.py", "-m inflight router", "prometheus",
                     "-m inflight scaler"):  # fmt: skip
            assert any(part in c for c in commands), (part, commands)
        alive = [p for p in tree if pid_alive(p)]
        assert not alive, [(p, tree[p]) for p in alive]
        out = Path(server.process.log_path).read_text()
        assert message in out
        assert not (state / "lock").exists() and not (state / "children.json").exists()
    finally:
        orphans.reap(state / "children.json", grace_s=5.0)  # what a failure left behind
