"""The fault run's short versions (CI): a real ``inflight up`` under open-loop load, a replica
killed with SIGKILL, the scaler killed and restarted, and the scale-down under long streams
(the policy's own, waited for: ``inflight.bench.chaos.scale_down``); then a router SIGSTOPped
during a surge. The bar must be met.

The full run (nine faults, about nine minutes here) is opt-in:
``inflight bench chaos --out-dir DIR``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inflight.bench.chaos.defaults import CI_FAULTS
from inflight.statedir import read_jsonl
from tests.support import INFLIGHT


@pytest.mark.serial  # deadline-bound: run alone, after the parallel stage
def test_short_fault_run_meets_the_bar(procs, tmp_path):
    out, state = tmp_path / "out", tmp_path / "state"
    argv = [
        *INFLIGHT, "bench", "chaos", "--out-dir", str(out), "--state-dir", str(state),
        "--faults", CI_FAULTS, "--time-scale", "0.2", "--rate", "1.5",
        "--settle-s", "30", "--after-s", "10",
        # a 300 s floor window (shipped: 900 s): the scale-down waits for the floor's memory
        # of the earlier phases' peaks, 2 windows (deadline 131 s wall instead of 371 s at
        # time-scale 0.2, inflight.bench.chaos.scale_down); the full run keeps the defaults
        "--scaler-metadata", "floorWindowSeconds=300",
    ]  # fmt: skip
    server = procs.start(argv, name="chaos", ready_path=None, port_placeholder=None, grace_s=60)
    code = server.process.popen.wait(timeout=900)
    log = Path(server.process.log_path).read_text()
    assert code == 0, log[-5000:]
    doc = json.loads((out / "chaos.json").read_text())
    rows = {f["fault"]: f for f in doc["faults"]}
    assert list(rows) == ["kill-replica", "scaler-restart", "scale-down"]
    for name, row in rows.items():
        assert row["requests_sent"] > 0, name
        assert row["lost_other"] == 0, (name, row)
        assert row["leaked_slots"] == 0, (name, row)
        assert row["wrong_scale_downs"] == 0, (name, row)
        assert row["orphans"] == 0, (name, row)
        assert row["time_to_recover_s"] is not None, (name, row)
    assert rows["kill-replica"]["details"]["faulted_endpoints"]
    down = rows["scale-down"]["details"]
    assert down["scale_downs"], down
    assert down["long_streams_open_at_scale_down"] >= 1, down
    assert down["long_streams_not_completed"] == 0, down
    assert any("waited for the policy's own scale-down" in n for n in down["notes"]), down
    assert "floorWindowSeconds=300" in doc["command"], doc["command"]
    assert doc["bar"] == {**doc["bar"], "passed": True, "failures": []}
    assert doc["stack_stop"]["clean"], doc["stack_stop"]
    events = [(r["process"], r["event"]) for r in read_jsonl(state / "restarts.jsonl")]
    assert ("scaler", "died") in events and ("scaler", "restarted") in events, events
    assert "| kill-replica |" in (out / "chaos.md").read_text()


@pytest.mark.serial  # deadline-bound: run alone, after the parallel stage
def test_a_router_sigstopped_during_a_surge_does_not_stop_the_scale_up(procs, tmp_path):
    """Two routers share the load; at a surge (x3) the second is SIGSTOPped: its scrapes
    time out (up == 0), so the scaler's L is partial, which may raise the count and must.
    The replica count wanted rises while it is stopped (issue 26: a router down once
    froze every answer)."""
    out, state = tmp_path / "out", tmp_path / "state"
    argv = [
        *INFLIGHT, "bench", "chaos", "--out-dir", str(out), "--state-dir", str(state),
        "--faults", "router-stop", "--time-scale", "0.2", "--settle-s", "30", "--after-s", "10",
    ]  # fmt: skip
    server = procs.start(argv, name="chaos", ready_path=None, port_placeholder=None, grace_s=60)
    code = server.process.popen.wait(timeout=400)
    log = Path(server.process.log_path).read_text()
    assert code == 0, log[-5000:]
    (row,) = json.loads((out / "chaos.json").read_text())["faults"]
    details = row["details"]
    assert details["surge_desired_peak"] > details["surge_desired_before"], details
    assert row["lost_other"] == 0 and row["leaked_slots"] == 0, row
    up_log = (state / "logs" / "up.log").read_text()
    # the scaler saw the stopped router as a target down, and still raised the count
    scaler_log = (state / "logs" / "scaler.log").read_text()
    assert "targets down in the window" in scaler_log
    assert "scale up" in up_log or "at max replicas" in up_log
