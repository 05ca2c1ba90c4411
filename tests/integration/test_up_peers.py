"""``inflight up --policy <peer>`` end to end: real Prometheus, router and emulator replicas,
the peer's control plane reading Prometheus, under closed-loop load, small time-scale."""

from __future__ import annotations

from pathlib import Path

import pytest

from inflight.emulator.cli import DEFAULT_MODEL
from inflight.statedir import read_jsonl
from tests.integration.test_up import launch, start_up, status, timeline
from tests.support import INFLIGHT, ClosedLoop, wait_for

TS = "0.05"  # start-up 1.5 s; KPA tick 0.1 s; HPA sync and KEDA polling 0.75 s
BODY = {"model": DEFAULT_MODEL, "prompt": "summarize the meeting", "max_tokens": 300}


def _scaled_up(state: Path) -> bool:
    return any(p.desired == 2 for p in timeline(state))


@pytest.mark.parametrize(
    ("policy", "workers", "holds"),
    [
        # L = 8 on 1 replica: ceil(8 / 2.8) = 3 pods, panic (3 / 1 >= 2): 2 (the max).
        ("kpa", 8, True),
        # 16 in flight on 4 slots, 12 waiting in the replica: ceil(12 / 5) = 3 -> 2.
        ("vllm-waiting", 16, False),
    ],
)
def test_a_peer_scales_up_under_load(procs, tmp_path, policy, workers, holds):
    state = tmp_path / "state"
    flags = ["--time-scale", TS, "--max-replicas", "2", "--policy", policy]
    _, info = start_up(procs, state, *flags)
    assert info.prometheus_url and info.policy == policy
    with ClosedLoop(info.router_url, workers, BODY) as load:
        wait_for(lambda: _scaled_up(state), timeout_s=60, what=f"{policy} to ask for 2")
        queued = status(info)["queued"]
    assert load.codes and set(load.codes) == {200} and not load.errors
    # kpa holds beyond the slots at the router; vllm-waiting leaves the queue to vLLM.
    assert (queued > 0) == holds, queued
    decisions = read_jsonl(state / "decisions.jsonl")
    ours = [d for d in decisions if d["reason"].startswith(f"{policy}: ")]
    assert ours and len(ours) == len(decisions), decisions[-3:]
    assert any(d["desired"] == 2 and d["value"] for d in ours), ours[-3:]


def test_a_peer_needs_prometheus(procs, tmp_path):
    argv = [*INFLIGHT, "up", "--state-dir", str(tmp_path / "s"), "--policy", "ray",
            "--no-prometheus"]  # fmt: skip
    proc = launch(procs, argv, "up")
    assert proc.popen.wait(timeout=60) == 2
    out = Path(proc.log_path).read_text()
    assert "--policy" in out and "reads Prometheus" in out and "--no-prometheus" in out
