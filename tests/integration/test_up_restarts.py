"""``inflight up`` keeps its core processes: a dead Prometheus, scaler or router is restarted
(with back-off, logged, in restarts.jsonl), and ``hold/<name>`` keeps a dead one down."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import urllib.request
from pathlib import Path

from inflight.bench.chaos import probe as chaos_probe
from inflight.control.trigger import scaler_metadata
from inflight.procs import http_ok
from inflight.statedir import hold_path, read_jsonl, read_stack
from tests.fake_replica import COMMAND as FAKE_REPLICA
from tests.support import INFLIGHT, wait_for

TS = 0.05


def events(state: Path) -> list[tuple[str, str]]:
    return [(r["process"], r["event"]) for r in read_jsonl(state / "restarts.jsonl")]


def test_a_dead_prometheus_is_held_down_then_restarted_and_a_dead_scaler_and_router_restarted(
    procs, tmp_path
):
    state = tmp_path / "state"
    fake = f"{FAKE_REPLICA} --port {{port}}"
    argv = [*INFLIGHT, "up", "--state-dir", str(state), "--time-scale", str(TS),
            "--replica-cmd", fake]  # fmt: skip
    up = procs.start(argv, name="up", ready_path=None, port_placeholder=None, grace_s=40.0)

    def ready():
        assert up.process.poll() is None, Path(up.process.log_path).read_text()[-3000:]
        with contextlib.suppress(OSError, ValueError):
            info = read_stack(state / "stack.json")
            return info if info.pid == up.process.pid else None
        return None

    info = wait_for(ready, timeout_s=90, interval_s=0.1, what="stack.json")
    assert info.prometheus_url, "prometheus is installed here"

    hold = hold_path(state, "prometheus")
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.write_text("test\n")
    prom = chaos_probe.group_of(state, "prometheus")
    assert prom is not None
    os.killpg(prom, signal.SIGKILL)
    wait_for(lambda: ("prometheus", "held") in events(state), timeout_s=30, what="held")
    assert up.process.poll() is None, "a dead Prometheus must not stop the stack"
    assert ("prometheus", "restarted") not in events(state)
    assert not http_ok(info.prometheus_url + "/-/ready", timeout_s=0.5)

    hold.unlink()
    wait_for(
        lambda: events(state)[-1] == ("prometheus", "restarted"),
        timeout_s=60,
        what="prometheus restarted once the hold is lifted",
    )
    assert http_ok(info.prometheus_url + "/-/ready", timeout_s=2.0), "not on its old port"
    assert chaos_probe.group_of(state, "prometheus") not in (None, prom)

    scaler = chaos_probe.group_of(state, "scaler")
    assert scaler is not None
    os.killpg(scaler, signal.SIGKILL)
    md = scaler_metadata(4, TS, "saturation")
    wait_for(
        lambda: (
            ("scaler", "restarted") in events(state)
            and chaos_probe.scaler_answers(info.scaler_address, md)
        ),
        timeout_s=60,
        interval_s=0.2,
        what="the scaler restarted and answering GetMetrics",
    )
    assert up.process.poll() is None

    # The router: restarted on its port (the address its clients and Prometheus know),
    # reading the same endpoints file; the stack goes on.
    router = chaos_probe.group_of(state, "router")
    assert router is not None
    os.killpg(router, signal.SIGKILL)

    def router_back():
        assert up.process.poll() is None, "a dead router must not stop the stack"
        if ("router", "restarted") not in events(state):
            return None
        status = _json(info.router_url + "/router/status")
        ready = [e for e in (status or {}).get("endpoints", []) if e.get("state") == "ready"]
        return status if ready else None

    status = wait_for(router_back, timeout_s=60, interval_s=0.2, what="the router restarted")
    assert status["inflight"] == 0
    assert ("router", "died") in events(state)
    assert chaos_probe.group_of(state, "router") not in (None, router)
    log = (state / "logs" / "up.log").read_text()
    assert "prometheus exited (code -9); restarting it in" in log
    assert "scaler restarted" in log
    assert "router exited (code -9); restarting it in" in log


def _json(url: str):
    with contextlib.suppress(OSError, ValueError), urllib.request.urlopen(url, timeout=1) as resp:
        return json.loads(resp.read())
    return None
