"""The replica supervisor with real processes (a tiny stand-in replica) on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from dataclasses import replace

import pytest

from inflight.control.lifecycle import ReplicaPhase
from inflight.ports import listening_ports
from inflight.procs import http_ok, pid_alive, port_is_free
from inflight.up.supervisor import (
    Supervisor,
    SupervisorConfig,
    check_replica_command,
)
from tests import fake_replica
from tests.support import INFLIGHT, PYTHON, wait_for

FAKE = [*fake_replica.ARGV, "--port", "{port}", "--worker"]
FAST = SupervisorConfig(
    health_interval_s=0.2,
    health_timeout_s=0.5,
    grace_s=3.0,
    backoff_base_s=0.2,
    startup_timeout_s=60.0,
    drain_timeout_s=30.0,
)


@pytest.fixture
def make_supervisor(tmp_path):
    made = []

    def make(command=FAKE, **kwargs):
        kwargs.setdefault("config", FAST)
        sup = Supervisor(
            command=command,
            endpoints_file=tmp_path / "endpoints.json",
            log_dir=tmp_path / "logs",
            **kwargs,
        )
        made.append(sup)
        return sup

    yield make
    for sup in made:
        assert sup.stop_all() == [], "replica groups survived stop_all"


def endpoints(sup):
    try:
        return json.loads(sup.endpoints_file.read_text())
    except FileNotFoundError:
        return None


def until(sup, cond, what, timeout_s=60.0):
    """Tick the supervisor until ``cond()`` holds."""

    def probe():
        sup.tick()
        return cond()

    return wait_for(probe, timeout_s=timeout_s, interval_s=0.02, what=what)


def worker_pid(url):
    with urllib.request.urlopen(url + "/worker", timeout=5) as resp:
        return json.loads(resp.read())["pid"]


def _try_worker_pid(url):
    try:
        return worker_pid(url)
    except OSError:  # not listening yet
        return None


def test_replicas_join_after_health_and_listen_where_told(make_supervisor):
    sup = make_supervisor(
        command=[*FAKE, "--startup-s", "0.5"],
    )
    sup.set_desired(2)
    sup.tick()
    assert sup.active == 2
    assert endpoints(sup) == [], "nothing may join before /health answers 200"
    until(sup, lambda: len(endpoints(sup) or []) == 2, "two ready endpoints")
    for r in sup.replicas:
        assert http_ok(r.url + "/health")
        assert r.port in listening_ports(r.process.pid)
    assert len({r.port for r in sup.replicas}) == 2


def test_scale_down_drains_before_stopping(make_supervisor):
    asked = []

    def drained(url):
        # The replica must already be out of the endpoint file when we are asked.
        asked.append((url, url in (endpoints(sup) or []), sup_proc_alive(url)))
        return len(asked) >= 3

    def sup_proc_alive(url):
        return any(r.url == url and r.process.alive() for r in sup.replicas)

    sup = make_supervisor(drained=drained)
    sup.set_desired(2)
    until(sup, lambda: sup.ready == 2, "two ready")
    victim = sup.replicas[-1]
    child = worker_pid(victim.url)
    sup.set_desired(1)
    sup.tick()
    assert victim.phase is ReplicaPhase.DRAINING
    assert victim.url not in endpoints(sup)
    assert (sup.active, sup.live) == (1, 2), "a draining replica still exists"
    until(sup, lambda: victim not in sup.replicas, "the drained replica to be stopped")
    assert victim.phase is ReplicaPhase.GONE and sup.live == 1
    assert asked and all(not in_file and alive for _, in_file, alive in asked)
    wait_for(lambda: not victim.process.alive(), what="victim group gone")
    assert not pid_alive(child), "the replica's worker child survived"
    assert endpoints(sup) == [sup.replicas[0].url]


def test_killed_replica_is_removed_and_replaced(make_supervisor):
    sup = make_supervisor()
    sup.set_desired(2)
    until(sup, lambda: sup.ready == 2, "two ready")
    victim = sup.replicas[0]
    child = worker_pid(victim.url)
    os.kill(victim.process.pid, signal.SIGKILL)  # the leader only: its worker lives on
    until(sup, lambda: victim.url not in endpoints(sup), "dead replica out of the file")
    until(
        sup,
        lambda: sup.ready == 2 and victim.url not in endpoints(sup),
        "a replacement replica",
    )
    assert victim not in sup.replicas
    wait_for(lambda: not pid_alive(child), what="the dead replica's orphaned worker to go")
    assert sup.crashes >= 1


def test_crash_loop_backs_off(make_supervisor):
    sup = make_supervisor(command=[PYTHON, "-c", "import sys; sys.exit(3)", "{port}"])
    sup.set_desired(1)
    until(sup, lambda: sup.crashes >= 3, "three crashes")
    assert sup.restart_not_before_s - sup.clock() > 0
    assert endpoints(sup) == []


def test_a_replica_not_healthy_before_the_startup_timeout_is_stopped_and_replaced(
    make_supervisor,
):
    sup = make_supervisor(
        command=[*FAKE, "--startup-s", "600"],
        config=replace(FAST, startup_timeout_s=0.5, backoff_base_s=0.1),
    )
    sup.set_desired(1)
    sup.tick()
    (first,) = sup.replicas
    child = wait_for(lambda: _try_worker_pid(first.url), what="the replica listening")
    until(sup, lambda: first.phase is ReplicaPhase.STOPPING, "the start-up timeout")
    assert first.state.crashed and sup.crashes == 1
    until(sup, lambda: first not in sup.replicas, "the timed-out replica to be gone")
    wait_for(lambda: not pid_alive(child), what="its worker gone with its group")
    until(sup, lambda: [r.id for r in sup.replicas] == [2], "a replacement")
    assert endpoints(sup) == []


def test_a_replica_that_ignores_sigterm_is_killed_after_grace(make_supervisor, tmp_path):
    armed = tmp_path / "armed"
    stubborn = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "pathlib.Path(sys.argv[1]).write_text('ignoring SIGTERM')\n"
        "time.sleep(600)"
    )
    sup = make_supervisor(
        command=[PYTHON, "-c", stubborn, str(armed), "{port}"],
        config=replace(FAST, grace_s=0.3),
    )
    sup.set_desired(1)
    sup.tick()
    (replica,) = sup.replicas
    wait_for(armed.exists, what="the replica to ignore SIGTERM")
    sup.set_desired(0)
    sup.tick()
    assert replica.phase is ReplicaPhase.STOPPING, "a starting replica is cancelled at once"
    until(sup, lambda: replica.state.killed, "SIGKILL after the grace period")
    until(sup, lambda: replica not in sup.replicas, "the killed replica to be gone")
    assert replica.process.popen is not None
    assert replica.process.popen.returncode == -signal.SIGKILL


def test_stop_all_leaves_no_process_and_frees_ports(make_supervisor):
    sup = make_supervisor()
    sup.set_desired(2)
    until(sup, lambda: sup.ready == 2, "two ready")
    children = [worker_pid(r.url) for r in sup.replicas]
    ports = set(sup.ports_used)
    assert sup.stop_all() == []
    assert not any(pid_alive(p) for p in children)
    assert all(port_is_free(p) for p in ports)
    assert endpoints(sup) == []


def test_a_reporting_replica_binds_port_zero_and_joins_on_the_port_it_reports(make_supervisor):
    """The default emulator command: no port is picked for it, so none can be lost."""
    sup = make_supervisor(
        command=[*INFLIGHT, "emulator", "--port", "0", "--ready-file", "{ready_file}",
                 "--startup-s", "0"],
    )  # fmt: skip
    sup.set_desired(1)
    sup.tick()
    (replica,) = sup.replicas
    assert replica.port == 0  # not known until the replica reports it
    argv = list(replica.process.argv)
    assert argv[argv.index("--port") + 1] == "0"
    until(sup, lambda: len(endpoints(sup) or []) == 1, "the replica in the endpoint file")
    assert replica.port > 0
    assert endpoints(sup) == [f"http://127.0.0.1:{replica.port}"]
    assert replica.port in listening_ports(replica.process.pid)
    assert http_ok(replica.url + "/health")
    assert sup.ports_used == {replica.port}


@pytest.mark.parametrize("cmd", [[], ["vllm", "serve", "m", "--port", "8000"]])
def test_replica_command_needs_port_placeholder(cmd):
    with pytest.raises(ValueError, match="replica-cmd"):
        check_replica_command(cmd)


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="health_timeout_s"):
        SupervisorConfig(health_timeout_s=0)
