"""Open-loop bench, pure parts: policy parsing, the flags → plan, the measures of a run,
the comparison builder and its Pareto front, the Markdown."""

from __future__ import annotations

import argparse
import string
from pathlib import Path
from typing import Any

import pytest

from inflight.bench.openloop.run import MAX_SEND_LAG_P99_S, run_document
from inflight.bench.openloop.sender import (
    PROMPT_TOKEN_ID,
    UNFINISHED_ERROR,
    OpenLoopRun,
    SentRequest,
    completion_body,
    littles_law,
    replica_points,
)
from inflight.measure.openloop_report import SCHEMA, build_comparison, comparison_markdown
from inflight.measure.records import RequestRecord, RouterSample
from inflight.measure.slo import DEFAULT_SLO, SloSpec
from inflight.planes.policy_catalogue import parse_policies, resolve_policies
from inflight.workload.plan import OpenLoopPlan, plan_from_args
from inflight.workload.sweep import closed_loop_args
from inflight.workload.trace import PlannedRequest
from tests.support import open_loop_args

# --- policies -----------------------------------------------------------------------------


def test_peers_and_saturation_variants_parse_with_safe_slugs() -> None:
    ps = parse_policies(
        "fixed:8,saturation,kpa,ray,vllm-waiting,epp-queue,hpa-rps,qps,"
        "saturation[targetSaturation=0.8;scaleDownWindowSeconds=120]",
        start_replicas=3,
    )
    assert [p.kind for p in ps] == [
        "fixed", "saturation", "kpa", "ray", "vllm-waiting", "epp-queue", "hpa-rps", "qps",
        "saturation",
    ]  # fmt: skip
    assert [p.replicas for p in ps] == [8] + [3] * 8
    variant = ps[-1]
    assert variant.metadata == (("targetSaturation", "0.8"), ("scaleDownWindowSeconds", "120"))
    assert variant.slug == "saturation-targetSaturation0.8-scaleDownWindowSeconds120"
    safe = set(string.ascii_letters + string.digits + "._-")
    assert all(set(p.slug) <= safe for p in ps)
    assert variant.up_args(8, 3) == [
        "--policy", "saturation", "--min-replicas", "3", "--replicas", "3", "--max-replicas",
        "8", "--scaler-metadata", "targetSaturation=0.8,scaleDownWindowSeconds=120",
    ]  # fmt: skip
    assert ps[0].up_args(8, 3) == ["--replicas", "8", "--no-autoscale"]
    assert ps[2].up_args(8) == ["--policy", "kpa", "--replicas", "3", "--max-replicas", "8"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("saturation[foo=1]", "unknown key 'foo'; valid keys: metricName"),
        ("saturation[targetSaturation]", "expected KEY=VALUE"),
        ("saturation[targetSaturation=0.8;targetSaturation=0.7]", "given twice"),
        ("saturation[targetSaturation=0/8]", "may hold only"),
        ("saturation[timeScale=2]", "key 'timeScale' is set by inflight up from --time-scale"),
        ("saturation[slotsPerReplica=8]", "'slotsPerReplica' is set by inflight up from --slots"),
        ("saturation[minReplicaCount=0]", "'minReplicaCount' is set by inflight up from --min-r"),
        ("saturation[maxReplicaCount=9]", "'maxReplicaCount' is set by inflight up from --max-r"),
        ("saturation[targetSaturation=abc]", "targetSaturation"),
        ("saturation[scaleDownWindowSeconds=-5]", "scaleDownWindowSeconds"),
        ("saturation[]", "expected KEY=VALUE"),
        ("kpa[x=1]", "unknown policy"),
        ("hpa", "unknown policy"),
    ],
)
def test_bad_policies_name_the_flag_and_the_item(text: str, says: str) -> None:
    with pytest.raises(ValueError, match="--policies") as err:
        parse_policies(text)
    assert says in str(err.value)


def test_fixed_max_is_the_scenarios_maximum() -> None:
    ps = resolve_policies(None, 8, 3)
    assert [p.name for p in ps][:2] == ["fixed:8", "saturation"]
    assert len(ps) == 8
    assert [p.name for p in resolve_policies("fixed:MAX,ray", 5, 1)] == ["fixed:5", "ray"]


# --- flags → plan -------------------------------------------------------------------------


def _ns(**kw: Any) -> argparse.Namespace:
    return open_loop_args(**kw)


def test_a_scenario_brings_its_bounds_and_lengths_and_flags_override_them() -> None:
    plan = plan_from_args(_ns(scenario="ramp"))
    assert (plan.min_replicas, plan.max_replicas, plan.startup_s) == (3, 8, 100.0)
    assert plan.end_s == 1500.0 and plan.slo == DEFAULT_SLO
    assert plan.meta["prompt_tokens"] == "lognormal:3000:0.6"
    again = plan_from_args(_ns(scenario="ramp"))
    assert again.requests == plan.requests  # one seed: every policy gets the same requests
    other = plan_from_args(
        _ns(scenario="ramp", seed=2, max_replicas=6, startup_s=30.0, max_tokens="100",
            slo_ttft_s=1.0)
    )  # fmt: skip
    assert other.requests != plan.requests
    assert (other.max_replicas, other.startup_s, other.slo) == (6, 30.0, SloSpec(1.0, 0.05))
    assert {r.max_tokens for r in other.requests} == {100}


def test_arrivals_default_to_the_reference_request(tmp_path: Path) -> None:
    plan = plan_from_args(_ns(arrivals="poisson:0:2,20:2", seed=5))
    assert plan.name == "arrivals" and plan.end_s == 20.0
    assert {(r.prompt_tokens, r.max_tokens) for r in plan.requests} == {(3000, 300)}
    assert plan.min_replicas is None and plan.startup_s is None


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"arrivals": "poisson:0:1,x:2"}, "--arrivals"),
        ({"arrivals": "poisson:0:1,10:1", "max_tokens": "lognormal:1"}, "--max-tokens"),
        ({"arrivals": "poisson:0:1,10:1", "prompt_tokens": "0"}, "--prompt-tokens"),
        ({"arrivals": "poisson:0:1,10:1", "slo_ttft_s": 0.0}, "--slo-ttft-s"),
        ({"arrivals": "poisson:0:1,10:1", "slo_tpot_s": -1.0}, "--slo-tpot-s"),
        ({"arrivals": "poisson:0:1,10:1", "drain_s": -1.0}, "--drain-s"),
        ({"scenario": "ramp", "max_replicas": 2}, "--max-replicas"),
        ({"scenario": "nope"}, "--scenario"),
        ({"scenario": "sweep", "arrivals": "poisson:0:1,10:1"}, "--scenario sweep"),
        ({"scenario": "ramp", "arrivals": "poisson:0:1,10:1"}, "give one of"),
        ({}, "give one of"),
    ],
)
def test_bad_open_loop_flags_name_the_flag(kw: dict[str, Any], flag: str) -> None:
    with pytest.raises(ValueError, match=flag.replace("-", r"\-")):
        plan_from_args(_ns(**kw))


def test_a_trace_gives_every_request_and_its_errors_name_the_line(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "prompt_tokens": 5, "max_tokens": 2}\n'
                     '{"t": 1.5, "prompt_tokens": 6, "max_tokens": 3}\n')  # fmt: skip
    plan = plan_from_args(_ns(trace=trace))
    assert plan.requests == (PlannedRequest(0.0, 5, 2), PlannedRequest(1.5, 6, 3))
    assert plan.end_s == 1.5 and plan.meta == {"trace": str(trace), "trace_format": "inflight"}
    with pytest.raises(ValueError, match="--max-tokens: not with --trace"):
        plan_from_args(_ns(trace=trace, max_tokens="3"))
    trace.write_text('{"t": 0, "prompt_tokens": 5, "max_tokens": 2}\n{"t": 1}\n')
    with pytest.raises(ValueError, match=f"{trace}:2"):
        plan_from_args(_ns(trace=trace))


def test_the_closed_loop_sweep_takes_numbers_only() -> None:
    args = argparse.Namespace(prompt_tokens=None, max_tokens="200", seed=None, slo_ttft_s=None,
                              slo_tpot_s=None, drain_s=None)  # fmt: skip
    out = closed_loop_args(args)
    assert (out.prompt_tokens, out.max_tokens) == (3000, 200)
    with pytest.raises(ValueError, match="--max-tokens: the closed-loop sweep takes one number"):
        closed_loop_args(argparse.Namespace(**{**vars(args), "max_tokens": "uniform:1:2"}))
    with pytest.raises(ValueError, match="--seed: open-loop only"):
        closed_loop_args(argparse.Namespace(**{**vars(args), "seed": 3}))


# --- one run's measures -------------------------------------------------------------------

T0 = 1000.0
S = 0.1  # time-scale


def _sent(i: int, t_s: float, latency_s: float | None, ok: bool = True, error: str = "",
          lag_s: float = 0.0, out: int = 10) -> SentRequest:  # fmt: skip
    """A request due at seed ``t_s``, sent ``lag_s`` seed s late, lasting ``latency_s`` seed s
    (None: unfinished, cancelled at seed 30)."""
    due = T0 + t_s * S
    start = due + lag_s * S
    if latency_s is None:
        rec = RequestRecord(start, T0 + 30 * S, None, 0, False, UNFINISHED_ERROR)
        return SentRequest(i, PlannedRequest(t_s, 100, out), due, rec, True)
    end = start + latency_s * S
    first = start + 0.5 * S if ok else None
    rec = RequestRecord(start, end, first, out if ok else 0, ok, error)
    return SentRequest(i, PlannedRequest(t_s, 100, out), due, rec, False)


def _run(sent: list[SentRequest], samples: list[RouterSample]) -> OpenLoopRun:
    return OpenLoopRun(
        t0=T0, time_scale=S, end_s=20.0, drain_s=10.0, sent=tuple(sent), samples=tuple(samples),
        sample_errors=0, end_t=max(s.record.end_t for s in sent),
    )  # fmt: skip


def _plan(n: int) -> OpenLoopPlan:
    reqs = tuple(PlannedRequest(float(i), 100, 10) for i in range(n))
    return OpenLoopPlan("t", "test", reqs, 20.0, SloSpec(2.0, 1.0), 10.0, 1, 4, 30.0)


def test_littles_law_on_open_loop_data() -> None:
    # two requests: [0, 10] and [10, 20] seed s; the router saw 1 in flight throughout
    sent = [_sent(0, 0.0, 10.0), _sent(1, 10.0, 10.0)]
    samples = [RouterSample(T0 + t * S, 1, 0, 1) for t in (0.0, 5.0, 10.0, 15.0, 20.0)]
    ll = littles_law(_run(sent, samples))
    assert ll["window_s"] == pytest.approx(20.0)
    assert ll["lambda_rps"] == pytest.approx(0.1) and ll["w_s"] == pytest.approx(10.0)
    assert ll["l_router"] == pytest.approx(1.0) and ll["error"] == pytest.approx(0.0)
    # the router reading 2 is a 50 % error
    twice = [RouterSample(s.t, 2, 0, 1) for s in samples]
    assert littles_law(_run(sent, twice))["error"] == pytest.approx(0.5)


def test_replica_points_prefer_live_and_fall_back_to_ready() -> None:
    rows = [{"t": T0 - 1.0, "desired": 2, "ready": 1, "live": 2},
            {"t": T0 + 1.0, "desired": 3, "ready": 2, "live": 3}]  # fmt: skip
    live, desired, field = replica_points(rows, T0, S)
    assert field == "live" and live == [(-10.0, 2), (10.0, 3)] and desired[1] == (10.0, 3)
    old = [{k: v for k, v in r.items() if k != "live"} for r in rows]
    live, _, field = replica_points(old, T0, S)
    assert field == "ready" and live == [(-10.0, 1), (10.0, 2)]


def test_run_document_counts_every_request_sent_and_judges_the_run() -> None:
    sent = [
        _sent(0, 0.0, 3.0),
        _sent(1, 1.0, 3.0, ok=False, error="HTTP 503: no replica"),
        _sent(2, 2.0, None),
        _sent(3, 3.0, 3.0),
    ]
    samples = [RouterSample(T0 + t * S, 1, 0, 1) for t in range(31)]
    rows = [{"t": T0 - 5.0, "desired": 1, "ready": 1, "live": 1},
            {"t": T0 + 1.0, "desired": 2, "ready": 1, "live": 2}]  # fmt: skip
    doc = run_document(_run(sent, samples), _plan(4), rows, policy="saturation", frozen=False,
                       url="http://r", model="m", created_at="now")  # fmt: skip
    assert doc["requests_sent"] == 4 and len(doc["requests"]) == 4
    assert doc["misses"] == {"http_503": 1, "unfinished": 1}
    assert doc["slo_attainment"] == pytest.approx(0.5)
    # live: 1 replica for seed [0, 10), then 2 until the end of the traffic (20)
    assert doc["replica_seconds"] == pytest.approx(10 * 1 + 10 * 2)
    assert doc["changes"] == 1 and doc["replica_field"] == "live"
    assert doc["requests"][2][9] == "unfinished"
    assert doc["valid"] is False  # the router read 1 where λ·W is ~0.55
    assert any("Little's Law" in r for r in doc["invalid_reasons"])
    # a fixed run whose count moved is invalid; a late sender too
    late = [_sent(i, float(i), 3.0, lag_s=2 * MAX_SEND_LAG_P99_S) for i in range(4)]
    doc = run_document(_run(late, samples), _plan(4), rows, policy="fixed:1", frozen=True,
                       url="http://r", model="m", created_at="now")  # fmt: skip
    why = " ".join(doc["invalid_reasons"])
    assert "fell behind" in why and "changed during a fixed-replica run" in why


def test_the_body_has_exactly_the_planned_lengths() -> None:
    body = completion_body("m", PlannedRequest(0.0, 1234, 56))
    assert body["prompt"] == [PROMPT_TOKEN_ID] * 1234
    assert body["max_tokens"] == 56 and body["ignore_eos"] is True and body["stream"] is True


def test_a_planned_priority_is_sent_and_attainment_is_reported_a_priority() -> None:
    assert "priority" not in completion_body("m", PlannedRequest(0.0, 10, 5))
    assert completion_body("m", PlannedRequest(0.0, 10, 5, priority=-1))["priority"] == -1
    # priority 0 met its SLO (0.5 s to the first token), priority 10 did not (ok=False)
    sent = [
        SentRequest(0, PlannedRequest(0.0, 100, 10, priority=0), T0,
                    RequestRecord(T0, T0 + 0.1, T0 + 0.05, 10, True, ""), False),
        SentRequest(1, PlannedRequest(1.0, 100, 10, priority=10), T0 + S,
                    RequestRecord(T0 + S, T0 + 2 * S, None, 0, False, "HTTP 429"), False),
    ]  # fmt: skip
    samples = [RouterSample(T0 + t * S, 1, 0, 1) for t in range(3)]
    doc = run_document(_run(sent, samples), _plan(2), [], policy="fixed:1", frozen=True,
                       url="http://r", model="m", created_at="now")  # fmt: skip
    by = doc["by_class"]
    assert list(by) == ["priority 0", "priority 10"]
    assert by["priority 0"]["slo_attainment"] == 1.0 and by["priority 10"]["slo_attainment"] == 0.0
    plain = run_document(_run([_sent(0, 0.0, 1.0)], samples), _plan(1), [], policy="fixed:1",
                         frozen=True, url="http://r", model="m", created_at="now")  # fmt: skip
    assert "by_class" not in plain


# --- the comparison ------------------------------------------------------------------------


def _measures(rs: float, att: float, **kw: Any) -> dict[str, Any]:
    q = {"p50": 1.0, "p95": 2.0, "p99": 3.0}
    return {"requests_sent": 100, "slo_attainment": att, "ttft_s": q, "tpot_s": q, "e2e_s": q,
            "misses": {"slo_ttft": round(100 * (1 - att))}, "replica_seconds": rs, "changes": 2,
            "reversals": 1, "requests": [[1, 2, 3]], **kw}  # fmt: skip


META = {"created_at": "2026-12-01T00:00:00+00:00", "command": ["inflight", "x"],
        "time_scale": 0.1, "max_replicas": 8, "name": "ramp", "source": "live",
        "slo": {"ttft_s": 2.0, "tpot_s": 0.05}}  # fmt: skip


def test_comparison_ratios_against_the_static_maximum_and_marks_the_front() -> None:
    runs = {
        "fixed:8": _measures(12000.0, 0.998),
        "saturation": _measures(7800.0, 0.97, file="saturation.json"),
        "kpa": _measures(7800.0, 0.95),  # dominated by saturation
        "ray": _measures(9600.0, 0.99),
        "qps": _measures(6000.0, 0.999, valid=False, invalid_reasons=["x"]),  # off the front
    }
    doc = build_comparison(META, runs)
    assert doc["schema"] == SCHEMA and doc["baseline"] == "fixed:8"
    assert doc["policies"] == list(runs) and doc["time_scale"] == 0.1
    assert doc["scenario"]["name"] == "ramp" and "created_at" not in doc["scenario"]
    r = doc["runs"]
    assert r["saturation"]["replica_seconds_ratio"] == pytest.approx(0.65)
    assert r["fixed:8"]["replica_seconds_ratio"] == 1.0
    assert doc["pareto_front"] == ["fixed:8", "saturation", "ray"]
    assert [n for n in r if r[n]["pareto"]] == doc["pareto_front"]
    assert "requests" not in r["saturation"]  # raw data stays in the run's own file
    assert r["saturation"]["file"] == "saturation.json" and r["qps"]["valid"] is False
    md = comparison_markdown(doc, notes=["a note"])
    assert "| saturation | 97.0 % | 7800 | 0.65 |" in md
    assert "qps (INVALID)" in md and "- a note" in md and "★" in md


def test_without_the_static_maximum_the_ratio_is_none_and_the_front_uses_replica_seconds() -> None:
    doc = build_comparison(META, {"a": _measures(10.0, 0.9), "b": _measures(20.0, 0.8)})
    assert doc["baseline"] is None and doc["pareto_x"] == "replica_seconds"
    assert doc["runs"]["a"]["replica_seconds_ratio"] is None
    assert doc["pareto_front"] == ["a"]
    with pytest.raises(ValueError, match="lacks requests_sent, slo_attainment"):
        build_comparison(META, {"a": {"replica_seconds": 1.0}})
    with pytest.raises(ValueError, match="max_replicas"):
        build_comparison({"created_at": "x", "command": [], "time_scale": 1.0}, {})


def test_the_pareto_plot_is_written(tmp_path: Path) -> None:
    from inflight.measure.plots import pareto_plot

    doc = build_comparison(META, {"fixed:8": _measures(10.0, 0.99),
                                  "x": _measures(5.0, 0.5, valid=False)})  # fmt: skip
    path = pareto_plot(doc, tmp_path / "p.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_open_loop_timeseries_plot_is_written(tmp_path: Path) -> None:
    from inflight.measure.plots import openloop_timeseries_plot

    sent = [_sent(0, 0.0, 3.0), _sent(1, 1.0, 3.0)]
    samples = [RouterSample(T0 + t * S, 1, 0, 1) for t in range(10)]
    rows = [{"t": T0 - 5.0, "desired": 1, "ready": 1, "live": 1},
            {"t": T0 + 0.5, "desired": 2, "ready": 1, "live": 2}]  # fmt: skip
    doc = run_document(_run(sent, samples), _plan(2), rows, policy="saturation", frozen=False,
                       url="http://r", model="m", created_at="now")  # fmt: skip
    path = openloop_timeseries_plot({"saturation": doc, "again": doc}, tmp_path / "t.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --- the command line: refusals before anything starts ----------------------------------


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--scenario", "sweep", "--arrivals", "poisson:0:1,10:1"], "--scenario sweep"),
        (["--scenario", "ramp", "--policies", "fixed:0"], "--policies"),
        (["--scenario", "ramp", "--policies", "saturation[x=1]"], "unknown key 'x'"),
        (
            ["--scenario", "ramp", "--policies", "saturation[minReplicaCount=0]"],
            "key 'minReplicaCount' is set by inflight up from --min-replicas",
        ),
        (["--scenario", "ramp", "--max-replicas", "2"], "--max-replicas"),
        (["--arrivals", "poisson:0:1,10:1", "--prompt-tokens", "uniform:5"], "--prompt-tokens"),
        (["--min-replicas", "2"], "--min-replicas: open-loop only"),
        (["--max-tokens", "lognormal:300:0.5"], "--max-tokens: the closed-loop sweep"),
        (["--drain-s", "5"], "--drain-s: open-loop only"),
    ],
)
def test_compare_refuses_bad_flags_before_starting_anything(
    argv: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from inflight import cli

    out = tmp_path / "out"
    assert cli.main(["bench", "compare", *argv, "--out-dir", str(out)]) == 2
    assert says in capsys.readouterr().err
    assert not out.exists()  # refused before the results folder was made
