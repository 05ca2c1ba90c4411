"""The open-loop sender against a real emulator behind a real router, at a tiny time-scale.

No timing assertions: the checks are order, count, exact lengths, the unfinished request
counted (and its slot given back), and the figures computed from what was sent.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import aiohttp

from inflight import names
from inflight.bench.openloop.sender import UNFINISHED_ERROR, littles_law, run_open_loop
from inflight.measure.slo import outcome_from_record
from inflight.workload.trace import PlannedRequest
from tests.support import (
    INFLIGHT,
    ProcessTracker,
    http_text,
    sample_total,
    start_emulator_and_router,
    wait_for,
)

TIME_SCALE = 0.05


# Five short requests (two at the same instant), then one that cannot finish within the
# drain limit: 20,000 tokens take ≥ 20,000 × 8.9 ms ≈ 178 seed s; the drain is 3 seed s.
PLAN = (
    PlannedRequest(0.0, 7, 5),
    PlannedRequest(1.0, 1234, 12),
    PlannedRequest(1.0, 50, 3),
    PlannedRequest(2.5, 999, 8),
    PlannedRequest(4.0, 3, 1),
    PlannedRequest(4.0, 10, 20000),
)


async def test_every_planned_request_is_sent_in_order_and_the_open_one_is_counted(
    procs: ProcessTracker,
) -> None:
    emu, router = start_emulator_and_router(procs, TIME_SCALE)
    async with aiohttp.ClientSession() as session:
        run = await run_open_loop(
            session,
            router.url,
            "m",
            PLAN,
            time_scale=TIME_SCALE,
            drain_s=3.0,
            end_s=5.0,
            sample_interval_s=0.01,
        )
    assert [s.index for s in run.sent] == list(range(len(PLAN)))
    assert [s.planned for s in run.sent] == list(PLAN)
    starts = [s.record.start_t for s in run.sent]
    assert starts == sorted(starts)  # sent in plan order
    assert [s.due_t for s in run.sent] == [run.t0 + p.t_s * TIME_SCALE for p in PLAN]
    done, (late,) = run.sent[:-1], run.sent[-1:]
    for s in done:
        assert s.record.ok, s.record.error
        assert not s.unfinished
        assert s.record.output_tokens == s.planned.max_tokens  # fixed length
        assert s.record.first_token_t is not None
    assert late.unfinished and not late.record.ok
    assert late.record.error == UNFINISHED_ERROR
    assert outcome_from_record(late.record, run.t0, TIME_SCALE, unfinished=True).cause == (
        "unfinished"
    )
    # the emulator counted every prompt exactly (token-id prompts), the open one included
    metrics = http_text(emu.url + "/metrics")
    assert sample_total(metrics, names.VLLM_PROMPT_TOKENS) == sum(p.prompt_tokens for p in PLAN)
    # the cancelled request gave its slot back
    wait_for(
        lambda: json.loads(http_text(router.url + "/router/status"))["inflight"] == 0,
        timeout_s=10,
        what="the router to release the cancelled request",
    )
    assert run.samples and run.sample_errors == 0
    ll = littles_law(run)
    assert ll["l_router"] is not None and ll["lambda_rps"] == len(PLAN) / ll["window_s"]


def test_bench_run_open_loop_writes_measures_and_names_bad_flags(
    procs: ProcessTracker, tmp_path: Path
) -> None:
    _, router = start_emulator_and_router(procs, TIME_SCALE)
    out = tmp_path / "2026-12-01-open.json"
    args = [*INFLIGHT, "bench", "run", "--no-progress", "--url", router.url,
            "--time-scale", str(TIME_SCALE), "--sample-interval-s", "0.02"]  # fmt: skip
    bad = subprocess.run(
        [*args, "--results-file", str(out), "--arrivals", "poisson:0:1,x:2"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 2 and "--arrivals" in bad.stderr, bad.stderr
    assert not out.exists()
    done = subprocess.run(
        [*args, "--results-file", str(out), "--arrivals", "poisson:0:2,10:2",
         "--prompt-tokens", "uniform:10:100", "--max-tokens", "5", "--seed", "3"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["schema"] == "inflight-bench-openloop-run/1"
    assert doc["requests_sent"] == len(doc["requests"]) == doc["scenario"]["requests_planned"]
    assert doc["requests_sent"] > 0
    for key in ("slo_attainment", "ttft_s", "tpot_s", "e2e_s", "misses", "littles_law",
                "replica_seconds", "changes", "reversals", "send_lag_s"):  # fmt: skip
        assert key in doc, key
    assert doc["scenario"]["seed"] == 3 and doc["scenario"]["prompt_tokens"] == "uniform:10:100"
    assert all(10 <= r[2] <= 100 and r[3] == 5 for r in doc["requests"])
    assert "| run |" in done.stdout or "SLO attainment" in done.stdout


def test_the_simulated_frontier_runs_as_a_child_and_a_failure_is_a_note(tmp_path: Path) -> None:
    import argparse

    from inflight.bench.openloop.frontier import SIM_DIR, run_sim_frontier
    from inflight.workload.plan import plan_from_args

    args = argparse.Namespace(
        scenario=None, arrivals="poisson:0:1,60:1", trace=None, prompt_tokens=None,
        max_tokens="50", seed=3, slo_ttft_s=None, slo_tpot_s=None, drain_s=None,
    )  # fmt: skip
    plan = plan_from_args(args)
    fr = run_sim_frontier(args, plan, 1, 2, tmp_path)
    assert fr["source"] == "sim" and fr["dir"] == SIM_DIR and "note" not in fr
    assert list(fr["fleets"]) == ["fixed:1", "fixed:2"]
    assert fr["fleets"]["fixed:2"]["requests_sent"] == len(plan.requests)
    # the child refuses a folder that is not empty: the comparison gets a note, not a crash
    again = run_sim_frontier(args, plan, 1, 2, tmp_path)
    assert again["fleets"] == {} and "exited 2" in again["note"] and "--out-dir" in again["note"]
