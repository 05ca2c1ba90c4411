"""``inflight sim run|compare``: files written, figures present, bad input named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inflight.cli import available_subcommands
from inflight.sim.cli import main, parse_scaler_metadata
from inflight.workload.trace import PlannedRequest, write_trace

SMALL = ["--arrivals", "poisson:0:2,120:2", "--min-replicas", "1", "--max-replicas", "3"]


def test_sim_is_an_inflight_subcommand() -> None:
    assert "sim" in available_subcommands()


def test_run_writes_the_run_files(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["sim", "run", *SMALL, "--policy", "saturation", "--out-dir", str(out)]) == 0
    body = json.loads((out / "run.json").read_text())
    m = body["measures"]
    assert body["simulated"] is True
    assert m["requests_sent"] == len((out / "requests.jsonl").read_text().splitlines()) > 100
    for key in ("slo_attainment", "ttft_s", "tpot_s", "e2e_s", "replica_seconds", "changes"):
        assert key in m
    assert m["littles_law"]["ratio"] == pytest.approx(1.0, abs=1e-3)
    timeline = [json.loads(line) for line in (out / "timeline.jsonl").read_text().splitlines()]
    assert {"t", "desired", "live", "ready"} <= set(timeline[0])
    assert (out / "decisions.jsonl").read_text()  # the autoscaler decided
    # The scaler's own answers, with the policy's reasons (the HPA's are in decisions.jsonl).
    answers = [json.loads(line) for line in (out / "scaler.jsonl").read_text().splitlines()]
    assert answers and [a["t"] for a in answers] == sorted({a["t"] for a in answers})
    assert {"value", "desired_replicas", "ready_replicas", "reason"} <= set(answers[0])
    assert all(a["reason"] and not a["reason"].startswith("HPA") for a in answers)
    stages = ("L ", "holding", "floor", "headroom")
    assert any(a["reason"].startswith(stages) for a in answers), answers[:3]
    hpa = [json.loads(line) for line in (out / "decisions.jsonl").read_text().splitlines()]
    assert {d["value"] for d in hpa if d["value"] is not None} <= {a["value"] for a in answers}


def test_run_takes_a_saturation_variant_and_metadata(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    variant = "saturation[targetSaturation=0.5]"
    assert main(["sim", "run", *SMALL, "--policy", variant, "--out-dir", str(a)]) == 0
    meta = ["--scaler-metadata", "targetSaturation=0.5"]
    assert main(["sim", "run", *SMALL, *meta, "--out-dir", str(b)]) == 0
    for out in (a, b):
        config = json.loads((out / "run.json").read_text())["config"]
        assert config["scaler_metadata"]["targetSaturation"] == "0.5"
    assert (a / "timeline.jsonl").read_text() == (b / "timeline.jsonl").read_text()


def test_run_refuses_to_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    args = ["sim", "run", *SMALL, "--policy", "fixed:2", "--out-dir", str(out)]
    assert main(args) == 0
    assert (out / "scaler.jsonl").read_text() == ""  # a fixed fleet asks no scaler
    assert main(args) == 2
    assert "--out-dir" in capsys.readouterr().err


def test_the_same_seed_writes_the_same_run(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        assert main(["sim", "run", *SMALL, "--seed", "7", "--out-dir", str(out)]) == 0
    for name in ("timeline.jsonl", "decisions.jsonl", "scaler.jsonl", "requests.jsonl"):
        assert (a / name).read_text() == (b / name).read_text()


def test_compare_writes_the_live_comparisons_layout(tmp_path: Path) -> None:
    out = tmp_path / "cmp"
    policies = "fixed:3,saturation,saturation[targetSaturation=0.5],qps,kpa"
    args = ["sim", "compare", *SMALL, "--policies", policies, "--seeds", "1,2"]
    assert main([*args, "--out-dir", str(out)]) == 0
    body = json.loads((out / "comparison.json").read_text())
    assert body["source"] == "sim" and body["baseline"] == "fixed:3"
    assert body["policies"] == policies.split(",")
    runs = body["runs"]
    assert set(runs["saturation"]["seeds"]) == {"1", "2"}
    assert runs["fixed:3"]["replica_seconds_ratio"] == pytest.approx(1.0)
    assert runs["saturation"]["replica_seconds_ratio"] < 1.0
    assert body["pareto_front"]
    sent = sum(s["requests_sent"] for s in runs["qps"]["seeds"].values())
    assert runs["qps"]["requests_sent"] == sent  # SLO figures over every seed's requests
    assert "saturation[targetSaturation=0.5]" in (out / "comparison.md").read_text()
    assert (out / "pareto.png").stat().st_size > 0
    assert (out / "timeseries.png").stat().st_size > 0


def test_a_trace_replays_its_requests(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    write_trace(trace, [PlannedRequest(float(i), 1000, 50) for i in range(20)])
    out = tmp_path / "run"
    args = ["sim", "run", "--trace", str(trace), "--policy", "fixed:1", "--out-dir", str(out)]
    assert main(args) == 0
    m = json.loads((out / "run.json").read_text())["measures"]
    assert m["requests_sent"] == 20 and m["requests_ok"] == 20


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--arrivals", "poisson:0:1"], "--arrivals"),
        (["--scenario", "ramp", "--arrivals", "poisson:0:1,10:1"], "give one of"),
        (["--scenario", "ramp", "--prompt-tokens", "lognormal:x:1"], "--prompt-tokens"),
        (["--scenario", "ramp", "--policy", "kpa-typo"], "--policy"),
        (["--scenario", "ramp", "--scaler-metadata", "bogusKey=1"], "bogusKey"),
        (["--scenario", "ramp", "--scaler-metadata", "timeScale=2"], "timeScale"),
        (["--scenario", "ramp", "--scaler-metadata", "targetSaturation=x"], "targetSaturation"),
        (
            ["--scenario", "ramp", "--policy", "kpa", "--scaler-metadata", "targetSaturation=1"],
            "--scaler-metadata",
        ),
        (["--scenario", "ramp", "--min-replicas", "5", "--max-replicas", "2"], "--max-replicas"),
        (["--scenario", "ramp", "--slo-ttft-s", "0"], "--slo-ttft-s"),
    ],
)
def test_bad_input_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], needle: str
) -> None:
    assert main(["sim", "run", *extra, "--out-dir", str(tmp_path / "x")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing written for a bad command


def test_an_unknown_scenario_is_refused_by_the_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sim", "run", "--scenario", "nope", "--out-dir", "x"])
    assert exc.value.code == 2
    assert "--scenario" in capsys.readouterr().err


def test_a_bad_trace_line_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"t": 0, "prompt_tokens": 10, "max_tokens": 5}\n{"t": "x"}\n')
    assert main(["sim", "run", "--trace", str(trace), "--out-dir", str(tmp_path / "o")]) == 2
    assert f"{trace}:2" in capsys.readouterr().err


def test_compare_refuses_bad_seeds_and_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["sim", "compare", *SMALL, "--out-dir", str(tmp_path / "x")]
    assert main([*base, "--seeds", "1,x"]) == 2
    assert main([*base, "--seeds", "1,1"]) == 2
    assert main([*base, "--policies", "fixed:3,nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("--seeds") == 2 and "--policies" in err
    assert not (tmp_path / "x").exists()


def test_scaler_metadata_parses() -> None:
    assert parse_scaler_metadata("targetSaturation=0.7") == {"targetSaturation": "0.7"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_scaler_metadata("targetSaturation")
    with pytest.raises(ValueError, match="twice"):
        parse_scaler_metadata("targetSaturation=0.7,targetSaturation=0.8")
