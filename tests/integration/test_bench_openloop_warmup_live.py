"""`inflight bench compare --trace … --trace-start-s --trace-warmup-s` end to end: a real
`inflight up` gets the trace's seconds before the window first, at the run's time-scale, and
the run is measured on the window alone, as the simulator measures it (issue #24).

The trace (`tests/data/warmup_busy_then_quiet.jsonl`) is 120 s of long requests, about three
replicas' worth, then six short ones. Its window from 120 s, warmed up on the 120 s before,
at time-scale 0.05: about 10 wall seconds of traffic. The figures are not judged; what is:
the warm-up's 40 requests went to the stack (answered, and the router had them in flight
before the window), none is among the measured requests, the replicas at the window's start
are those the warm-up left (more than the one a cold start has), and the header says what
was replayed. The same for `--arrivals` with `--arrivals-warmup-s` (the schedule's first
120 s, about as busy, are the warm-up; the rest, quieter, is the window).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from inflight.measure.results import read_json
from inflight.procs import port_is_free
from tests.support import INFLIGHT

TRACE = Path(__file__).resolve().parents[1] / "data" / "warmup_busy_then_quiet.jsonl"
ARGS = (
    "bench", "compare", "--no-progress", "--trace", str(TRACE), "--trace-start-s", "120",
    "--trace-warmup-s", "120", "--policies", "saturation", "--frontier", "off",
    "--min-replicas", "1", "--max-replicas", "3", "--startup-s", "5", "--drain-s", "20",
    "--time-scale", "0.05", "--sample-interval-s", "0.02",
)  # fmt: skip
HEADER = "warm-up: the trace's 0–120 s (40 requests) replayed first, not measured"
ARRIVALS = "poisson:0:0.33,120:0.33,120:0.1,180:0.1"  # seed 1: 37 requests, then 4
ARRIVALS_ARGS = (
    "bench", "compare", "--no-progress", "--arrivals", ARRIVALS, "--arrivals-warmup-s", "120",
    "--prompt-tokens", "1000", "--max-tokens", "1200", "--policies", "saturation",
    "--frontier", "off", "--min-replicas", "1", "--max-replicas", "3", "--startup-s", "5",
    "--drain-s", "20", "--time-scale", "0.05", "--sample-interval-s", "0.02",
)  # fmt: skip
ARRIVALS_HEADER = "warm-up: the schedule's 0–120 s (37 requests) replayed first, not measured"


def test_the_warmup_reaches_the_stack_and_stays_out_of_the_measures(tmp_path: Path) -> None:
    out = tmp_path / "2026-12-02-tiny-warm"
    argv = [*INFLIGHT, *ARGS, "--out-dir", str(out), "--state-root", str(tmp_path / "state")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a run judged invalid

    doc = json.loads((out / "comparison.json").read_text())
    sc = doc["scenario"]
    assert sc["trace_warmup"] == {"start_s": 0.0, "duration_s": 120.0, "requests": 40}
    assert sc["requests_planned"] == 6 and HEADER in sc["description"]
    assert HEADER in (out / "comparison.md").read_text()
    run = read_json(out / "saturation.json.gz")
    # measured: the window's six requests only
    assert run["requests_sent"] == 6 == len(run["requests"])
    assert all(r[4] >= 0.0 for r in run["requests"])
    # the warm-up: all 40 sent before the window, answered by the replicas, routed
    warm = run["warmup"]
    assert warm["requests_planned"] == warm["requests_sent"] == 40
    assert len(run["warmup_requests"]) == 40 and all(r[4] < 0.0 for r in run["warmup_requests"])
    assert warm["ok"] > 0 and sum(r[7] for r in run["warmup_requests"]) > 0  # output tokens
    assert any(t < 0.0 and n > 0 for t, n, *_ in run["router_samples"])
    # the replicas at the window's start are the warm-up's (a cold start has 1)
    assert warm["live_replicas_at_window_start"] > 1, run["timeline"]
    assert run["stack"]["clean"], run["stack"]
    assert all(port_is_free(p) for p in run["stack"]["ports_seen"])


def test_an_arrivals_warmup_reaches_the_stack_and_stays_out_of_the_measures(
    tmp_path: Path,
) -> None:
    out = tmp_path / "2026-12-02-tiny-arrivals-warm"
    argv = [*INFLIGHT, *ARRIVALS_ARGS, "--out-dir", str(out), "--state-root",
            str(tmp_path / "state")]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=400)
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a run judged invalid

    sc = json.loads((out / "comparison.json").read_text())["scenario"]
    assert sc["arrivals_warmup"] == {"start_s": 0.0, "duration_s": 120.0, "requests": 37}
    assert sc["arrivals_warmup_s"] == 120.0 and sc["duration_s"] == 60.0
    assert sc["requests_planned"] == 4 and ARRIVALS_HEADER in sc["description"]
    assert ARRIVALS_HEADER in (out / "comparison.md").read_text()
    run = read_json(out / "saturation.json.gz")
    assert run["requests_sent"] == 4 == len(run["requests"])  # the window's only
    assert all(r[4] >= 0.0 for r in run["requests"])
    warm = run["warmup"]
    assert warm["requests_planned"] == warm["requests_sent"] == 37
    assert all(r[4] < 0.0 for r in run["warmup_requests"]) and warm["ok"] > 0
    assert warm["live_replicas_at_window_start"] > 1, run["timeline"]  # a cold start has 1
    assert run["stack"]["clean"], run["stack"]
    assert all(port_is_free(p) for p in run["stack"]["ports_seen"])
