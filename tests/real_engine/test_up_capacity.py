"""Issue 23's done-when on a real engine: ``inflight up --engine vllm-cpu
--engine-arg=--num-gpu-blocks-override=40`` asks for a second replica under 4 concurrent
1,800 + 200-token requests with ``--capacity auto``, and not with ``--capacity requests``
(through ``python -m experiments.capacity_live``, llama-8m, 4 slots: 2 requests run, 2
wait for KV in vLLM while the router counts 4 of 4 slots in use).

The auto run ends at its first scale-up; the requests run keeps the load for two HPA syncs
(15 s apart) or more. Nothing here asserts how long anything took.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from inflight.engines import vllm_cpu
from tests.support import assert_capacity_verdict

ROOT = Path(__file__).resolve().parents[2]
HOME = Path(os.environ.get("VLLM_CPU_HOME", ROOT / vllm_cpu.DEFAULT_HOME)).resolve()
MODEL = "llama-8m"
SLOTS = 4
WINDOW_S = {"auto": 120, "requests": 40}


@pytest.mark.parametrize("capacity", ["auto", "requests"])
def test_a_second_replica_on_kv_with_auto_only(tmp_path: Path, capacity: str) -> None:
    try:
        vllm_cpu.load_install(HOME).model_dir(MODEL)
    except vllm_cpu.EngineNotReady as exc:
        pytest.fail(str(exc))  # make test sets it up (scripts/test.sh); pytest alone does not
    out = tmp_path / capacity
    done = subprocess.run(
        [sys.executable, "-m", "experiments.capacity_live", "--engine", "vllm-cpu",
         "--capacity", capacity, "--engine-home", str(HOME), "--engine-model", MODEL,
         "--out-dir", str(out), "--state-root", str(tmp_path / "state"),
         "--within-s", str(WINDOW_S[capacity])],
        capture_output=True, text=True, timeout=1500, cwd=ROOT,
    )  # fmt: skip
    output = done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop"]["clean"], summary["stop"]
    assert summary["requests_failed"] == 0, output
    assert done.returncode == 0, output
    assert_capacity_verdict(out, summary, capacity, SLOTS)
    # KV-bound: with 4 slots for 4 requests and vLLM's --max-num-seqs 4, a request that waits
    # in vLLM for capacity waits for KV while the router counts a slot in use for it. 2 of 4
    # wait while the load holds, but the samples are Prometheus's instant values read once a
    # second: one between a request's end and the next one's admission sees fewer, and an
    # auto run ends at its first scale-up with few samples: one CI run's most common value
    # was 0 (it scaled up on kv_tokens as it should), another's largest 1. So at least one.
    assert summary["max_waiting_kv"] is not None and summary["max_waiting_kv"] >= 1, summary
