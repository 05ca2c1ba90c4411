"""`inflight bench run` against real emulators behind a real router: a tiny sweep, seconds."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from inflight.names import VLLM_REQUEST_SUCCESS
from tests.support import INFLIGHT, ProcessTracker, Server, http_text, sample_total, wait_for

TIME_SCALE = "0.1"


def _stack(procs: ProcessTracker, replicas: int) -> Server:
    urls = []
    for i in range(replicas):
        emu = procs.start_inflight(
            ["emulator", "--port", "{port}", "--time-scale", TIME_SCALE, "--startup-s", "0"],
            name=f"emulator{i}",
        )
        urls.append(emu.url)
    return procs.start_inflight(
        ["router", "--port", "{port}", "--endpoints", ",".join(urls)],
        name="router",
        ready_path="/router/status",
    )


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*INFLIGHT, "bench", "run", "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_tiny_sweep_writes_valid_results_and_refuses_to_overwrite(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    router = _stack(procs, replicas=2)
    results = tmp_path / "2026-11-29-tiny.json"
    summary = tmp_path / "2026-11-29-tiny.md"
    common = [
        "--url", router.url, "--time-scale", TIME_SCALE, "--concurrency", "4,8",
        "--sample-interval-s", "0.02",
        "--requests", "24", "--warmup", "8", "--gap-s", "2", "--frozen",
        "--results-file", str(results), "--summary-file", str(summary),
    ]  # fmt: skip
    done = _bench(*common, "--plot-dir", str(tmp_path / "plots"))
    assert done.returncode == 0, done.stderr + done.stdout

    doc = json.loads(results.read_text())
    assert doc["time_scale"] == 0.1
    assert doc["valid"] is True, doc["invalid_reasons"]
    assert doc["warmup"]["completed"] == 8
    assert [lv["concurrency"] for lv in doc["levels"]] == [4, 8]
    for lv in doc["levels"]:
        assert lv["requests"] == 24 and lv["errors"] == 0
        assert lv["replicas"] == [2]
        assert lv["littles_law_error"] is not None and lv["littles_law_error"] <= 0.10
        assert lv["output_tokens_per_s"] > 0
        assert lv["ttft_p50_s"] is not None and lv["ttft_p50_s"] < lv["e2e_p50_s"]
    # 8 workers on 2 replicas x 4 slots: the router held L near 8 during the level
    assert doc["levels"][1]["l_router"] > 6
    assert len(doc["requests"]) == 48
    assert "| 8 | 24 | 0 |" in summary.read_text()
    assert (tmp_path / "plots" / "2026-11-29-tiny-sweep.png").stat().st_size > 0
    assert (tmp_path / "plots" / "2026-11-29-tiny-timeseries.png").stat().st_size > 0

    before = results.read_bytes()
    again = _bench(*common)
    assert again.returncode == 2
    assert "--force" in again.stderr and str(results) in again.stderr
    assert results.read_bytes() == before


def test_unreachable_router_fails_with_a_clear_message(tmp_path: Path) -> None:
    done = _bench(
        "--url", "http://127.0.0.1:9", "--results-file", str(tmp_path / "r.json"),
        "--concurrency", "1", "--requests", "1", "--warmup", "0",
    )  # fmt: skip
    assert done.returncode == 2
    assert "--model" in done.stderr
    assert not (tmp_path / "r.json").exists()


def _finished(replica: Server) -> float:
    """The requests a replica (emulator) finished: its vLLM success counter."""
    return sample_total(http_text(replica.url + "/metrics"), VLLM_REQUEST_SUCCESS)


def test_frozen_run_is_invalid_when_a_replica_joins_mid_run(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    """The seed's trap 3, for real: the replica count changes during a frozen run.

    The second replica joins once the first level's 32 requests are done (on the one
    replica there is): a join as soon as the first request was in flight came, on a busy
    fresh clone, before the bench's first sample of the level, and the run saw 2 throughout."""
    emulators = [
        procs.start_inflight(
            ["emulator", "--port", "{port}", "--time-scale", TIME_SCALE, "--startup-s", "0"],
            name=f"emulator{i}",
        )
        for i in range(2)
    ]
    endpoints = tmp_path / "endpoints.json"
    endpoints.write_text(json.dumps([emulators[0].url]))
    router = procs.start_inflight(
        ["router", "--port", "{port}", "--endpoints-file", str(endpoints),
         "--file-poll-s", "0.2", "--health-interval-s", "0.2"],
        name="router",
        ready_path="/router/status",
    )  # fmt: skip
    results = tmp_path / "frozen.json"
    bench = subprocess.Popen(
        [*INFLIGHT, "bench", "run", "--no-progress", "--url", router.url,
         "--time-scale", TIME_SCALE, "--concurrency", "4,8", "--requests", "32",
         "--warmup", "0", "--gap-s", "2", "--frozen", "--results-file", str(results)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first = "the first level's 32 requests done"
        wait_for(lambda: _finished(emulators[0]) >= 32, timeout_s=120, what=first)
        tmp = endpoints.with_suffix(".tmp")
        tmp.write_text(json.dumps([e.url for e in emulators]))
        tmp.replace(endpoints)  # atomic, as inflight up does
        out, err = bench.communicate(timeout=300)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert bench.returncode == 1, err + out
    doc = json.loads(results.read_text())
    assert doc["valid"] is False
    assert any("more than one replica count: [1, 2]" in r for r in doc["invalid_reasons"])
    assert "INVALID" in out


def test_stack_json_of_a_dead_up_is_refused(procs: ProcessTracker, tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves stack.json behind; its router may even still answer
    (its children outlive it). ``--state-dir`` must not measure such a leftover."""
    router = _stack(procs, replicas=1)
    gone = subprocess.Popen(["true"])
    gone.wait()
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "stack.json").write_text(
        json.dumps(
            {"pid": gone.pid, "router_url": router.url, "prometheus_url": None,
             "scaler_address": "127.0.0.1:9", "time_scale": 0.1, "policy": "saturation",
             "started_at": 0.0}
        )
    )  # fmt: skip
    results = tmp_path / "r.json"
    done = _bench(
        "--state-dir", str(state_dir), "--results-file", str(results),
        "--concurrency", "1", "--requests", "1", "--warmup", "0",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr + done.stdout
    assert f"pid {gone.pid}" in done.stderr and "no longer running" in done.stderr
    assert not results.exists()
