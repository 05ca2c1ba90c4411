"""Tiny real runs of the component benchmarks (``inflight bench emulator|scaler|
upstream-client|router``): each starts its real processes (emulators, Debian's Prometheus,
nginx, wrk, the router), measures, writes its figures, and leaves nothing running.
Seconds each; the figures themselves are not asserted on (this machine is shared)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from tests.support import INFLIGHT


def _bench(*args: str, timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*INFLIGHT, "bench", *args], capture_output=True, text=True, timeout=timeout_s
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def test_emulator_bench_measures_one_replica(tmp_path: Path) -> None:
    out = tmp_path / "emulator.json"
    _bench("emulator", "--replicas", "1", "--levels", "2", "--level-s", "2", "--warmup-s",
           "0.5", "--time-scale", "0.02", "--json", str(out),
           "--log-dir", str(tmp_path / "logs"))  # fmt: skip
    (level,) = json.loads(out.read_text())
    assert level["concurrency"] == 2 and level["errors"] == 0
    assert level["completed"] > 0 and level["predicted_rps"] > 0


def test_scaler_bench_times_getmetrics_cached_and_not(tmp_path: Path) -> None:
    out = tmp_path / "scaler.json"
    done = _bench("scaler", "--calls", "100", "--warmup", "5", "--json", str(out))
    doc = json.loads(out.read_text())
    assert doc["uncached"]["calls"] == 100 and doc["uncached"]["cache_ttl_s"] == 0.0
    assert doc["cached"]["calls"] == 100 and doc["cached"]["cache_ttl_s"] == 1.0
    assert "target p99 <= 20 ms uncached:" in done.stdout
    # The backfilled history (promtool): the range query answers the whole window of L, as
    # a deployed scaler's does, not the seconds a fresh Prometheus holds.
    assert doc["history_s"] == 1900 and doc["steps_of_l"] >= 1800, doc


def test_upstream_client_bench_runs_both_clients() -> None:
    done = _bench("upstream-client", "--requests", "200", "--concurrency", "4", "--rounds", "1")
    rows = [line.split() for line in done.stdout.splitlines() if "requests/s" in line]
    assert [row[0] for row in rows] == ["httptools", "aiohttp"]
    assert all(float(row[1]) > 0 for row in rows)


def test_router_bench_latency_scenario_against_nginx(tmp_path: Path) -> None:
    """wrk and nginx come from Debian (scripts/setup.sh installs them)."""
    for tool in ("wrk", "nginx"):
        assert shutil.which(tool) or Path(f"/usr/sbin/{tool}").exists(), (
            f"{tool} is not installed: run scripts/setup.sh as root, or "
            f"apt-get install -y --no-install-recommends wrk nginx"
        )
    out = tmp_path / "router.json"
    argv = ["router", "--scenarios", "latency", "--duration-s", "1", "--no-aiohttp-peer",
            "--vllm-router-bin", str(tmp_path / "no-vllm-router"), "--out", str(out)]  # fmt: skip
    _bench(*argv)
    rows = json.loads(out.read_text())["results"]["latency_50ms"]
    assert set(rows) == {"direct", "inflight", "nginx"}
    for name, row in rows.items():
        assert row["non_2xx"] == 0 and row["rps"] > 0, name
        assert row["p50_ms"] >= 50.0, name  # the upstream answers after 50 ms
    again = subprocess.run([*INFLIGHT, "bench", *argv], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert again.returncode == 2 and "never overwritten" in again.stderr


def test_router_bench_ab_runs_two_commits_side_by_side_and_removes_its_worktrees(
    tmp_path: Path,
) -> None:
    """``--ab A B``: each commit's router from a git worktree on PYTHONPATH (c958355 predates
    --ready-file: its port is read back from /proc), rounds over every target, ratios, and
    no worktree left behind."""
    root = Path(__file__).resolve().parents[2]
    old = "c958355"
    if subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{old}^{{commit}}"],
                      capture_output=True).returncode != 0:  # fmt: skip
        old = "HEAD"  # a shallow clone
    out = tmp_path / "ab.json"
    done = _bench("router", "--ab", old, ".", "--scenarios", "capacity,streaming", "--rounds",
                  "1", "--duration-s", "1", "--vllm-router-bin", str(tmp_path / "none"),
                  "--out", str(out))  # fmt: skip
    doc = json.loads(out.read_text())
    a, b = (tree["label"] for tree in doc["trees"])
    assert a.startswith(f"A {old} (") and b.startswith("B this checkout (")
    capacity = doc["results"]["capacity"]
    assert set(capacity["rounds"]) >= {a, b}
    assert all(r["non_2xx"] == 0 and r["rps"] > 0 for r in capacity["rounds"][a])
    assert capacity["ratios"]["B/A"] > 0
    streaming = doc["results"]["streaming"]
    assert streaming["rounds"][b][0]["failures"] == 0
    assert "B/A" in done.stdout
    after = subprocess.run(["git", "-C", str(root), "worktree", "list"], capture_output=True,
                           text=True, check=True).stdout  # fmt: skip
    assert "bench-router-ab-" not in after  # its temporary worktrees are gone
