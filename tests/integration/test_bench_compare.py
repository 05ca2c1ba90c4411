"""`inflight bench compare` end to end on a tiny plan: real `inflight up` stacks, one per policy.

Seconds, not minutes: two policies, one small level, a short slowing-model scenario, at a
small time-scale. It proves the files, the clean stop of every stack, the refusal to reuse
a results folder, and that the reproduction checks are computed (their outcome on so
short a run is not asserted: the 15-minute comparison is what shows the reproduction).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from inflight.bench import proctree
from inflight.bench import stack as bench_stack
from inflight.bench.stack import Stack
from inflight.measure.results import read_json
from inflight.planes.policy_catalogue import parse_policies
from tests.fake_replica import COMMAND as FAKE_REPLICA
from tests.support import INFLIGHT, LoopbackHTTPServer, QuietHandler

ARGS = (
    "bench", "compare", "--no-progress",
    "--policies", "fixed:1,saturation", "--concurrency", "4", "--requests", "8",
    "--warmup", "4", "--time-scale", "0.1", "--sample-interval-s", "0.02",
    "--slowing-phase-s", "15", "--slowing-max-tokens", "300,600",
)  # fmt: skip


def _compare(out: Path, state: Path) -> subprocess.CompletedProcess[str]:
    argv = [*INFLIGHT, *ARGS, "--out-dir", str(out), "--state-root", str(state)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=400)


@pytest.mark.serial  # deadline-bound: run alone, after the parallel stage
def test_tiny_compare_writes_everything_and_leaves_nothing_running(tmp_path: Path) -> None:
    out = tmp_path / "2026-11-29-tiny-compare"
    done = _compare(out, tmp_path / "state")
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: not reproduced (too short)

    names = {p.name for p in out.iterdir()}
    assert {"fixed1.json.gz", "fixed1.md", "saturation.json.gz", "saturation.md",
            "slowing-saturation.json.gz", "comparison.json", "comparison.md",
            "sweep.png", "timeseries.png", "slowing.png"} <= names  # fmt: skip
    summary = json.loads((out / "comparison.json").read_text())
    assert summary["time_scale"] == 0.1
    assert summary["policies"] == ["fixed:1", "saturation"]
    assert any(c["name"].startswith("Little's Law") for c in summary["checks"])
    assert summary["reproduced"] == all(c["passed"] for c in summary["checks"])
    for name in ("fixed1", "saturation", "slowing-saturation"):
        run = read_json(out / f"{name}.json.gz")
        assert run["stack"]["clean"], run["stack"]
        assert run["stack"]["pids_seen"] >= 4  # up, replica, router, scaler (+ prometheus)
        assert run["stack"]["pids_left_after_stop"] == []
        assert run["stack"]["ports_busy_after_stop"] == []
        assert run["cpu"]["stack_cores"] >= 0 and run["cpu"]["loadgen_cores"] > 0
        assert all(lv["errors"] == 0 for lv in run["levels"])
    fixed = read_json(out / "fixed1.json.gz")
    assert fixed["frozen"] is True and fixed["valid"], fixed["invalid_reasons"]
    assert fixed["levels"][0]["replicas"] == [1]
    assert "| 4 |" in (out / "comparison.md").read_text()

    again = _compare(out, tmp_path / "state")
    assert again.returncode == 2
    assert "--force" in again.stderr


class _StaleRouter(QuietHandler):
    """The router of a killed run, still answering: one ready endpoint."""

    def do_GET(self) -> None:
        body = json.dumps(
            {"inflight": 0, "queued": 0, "slots_per_endpoint": 4,
             "endpoints": [{"url": "http://127.0.0.1:9", "state": "ready", "inflight": 0}]}
        ).encode()  # fmt: skip
        self.respond(body)


def test_stack_json_left_by_a_killed_run_is_not_taken_for_the_new_one(tmp_path: Path) -> None:
    """Until the new ``inflight up`` takes the state dir, the old run's stack.json is there:
    the bench must wait for the one whose pid is the process it started."""
    stale_router = LoopbackHTTPServer(_StaleRouter)
    stale_url = stale_router.url
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "stack.json").write_text(
        json.dumps(
            {"pid": 1, "router_url": stale_url, "prometheus_url": None,
             "scaler_address": "127.0.0.1:9", "time_scale": 0.1, "policy": "fixed:1",
             "started_at": 0.0}
        )
    )  # fmt: skip
    fake = f"{FAKE_REPLICA} --port {{port}}"
    stack = Stack(
        policy=parse_policies("fixed:1")[0],
        state_dir=state_dir,
        time_scale=0.1,
        max_replicas=1,
        extra_args=("--replica-cmd", fake, "--no-prometheus"),
    )
    try:
        stack.start(timeout_s=90)
        assert stack.info["pid"] == stack.pid
        assert stack.router_url != stale_url
    finally:
        report = stack.stop()
        stale_router.close()
    assert report["clean"], report


class _Interrupted(BaseException):
    """Like Ctrl-C's KeyboardInterrupt: not an Exception."""


def test_an_interrupted_start_stops_the_stack(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C while the bench waits for a stack to come up: ``inflight up`` runs in its own
    session, so nobody else would stop it and its replicas."""

    def interrupted(_url: str) -> int:
        raise _Interrupted

    monkeypatch.setattr(bench_stack, "_router_ready", interrupted)  # once stack.json is there
    fake = f"{FAKE_REPLICA} --port {{port}}"
    stack = Stack(
        policy=parse_policies("fixed:1")[0],
        state_dir=tmp_path / "state",
        time_scale=0.1,
        max_replicas=1,
        extra_args=("--replica-cmd", fake, "--no-prometheus"),
    )
    try:
        with pytest.raises(_Interrupted):
            stack.start(timeout_s=90)
        assert stack.process is not None and not stack.process.alive()
        assert len(stack.seen_pids) >= 4, stack.seen_pids  # up, replica, router, scaler
        assert not proctree.alive(stack.seen_pids)
    finally:
        stack.stop()
