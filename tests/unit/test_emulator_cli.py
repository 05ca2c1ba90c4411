"""``inflight emulator`` flags: vLLM's names, the reference defaults, errors naming the flag."""

from __future__ import annotations

import argparse

import pytest

from inflight.cli import build_parser, main
from inflight.emulator.cli import DEFAULT_MODEL, profile_from_args, served_names
from inflight.emulator.profile import Profile


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["emulator", *argv])


def test_defaults_are_the_reference_profile() -> None:
    args = parse()
    assert profile_from_args(args) == Profile()
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    assert served_names(args) == (DEFAULT_MODEL,)
    ref = Profile()
    assert (ref.max_num_seqs, ref.service_s, ref.startup_s) == (4, 4.5, 30.0)
    assert (ref.reference_prompt_tokens, ref.reference_output_tokens) == (3000, 300)
    assert ref.cold_start_factor == pytest.approx(1.6)


def test_the_fixed_command_line() -> None:
    args = parse(
        "--host", "127.0.0.1", "--port", "4567", "--served-model-name", "m",
        "--max-num-seqs", "8", "--time-scale", "0.1", "--startup-s", "0",
        "--service-s", "9", "--cold-start-requests", "2", "--cold-start-factor", "2",
        "--default-max-tokens", "50", "--prefill-ms-per-1k-tokens", "10",
    )  # fmt: skip
    p = profile_from_args(args)
    assert (p.max_num_seqs, p.time_scale, p.startup_s, p.service_s) == (8, 0.1, 0.0, 9.0)
    assert (p.cold_start_requests, p.cold_start_factor, p.default_max_tokens) == (2, 2.0, 50)
    assert p.prefill_ms_per_1k_tokens == 10.0
    assert args.port == 4567 and served_names(args) == ("m",)


def test_model_is_an_alias_and_several_served_names() -> None:
    assert served_names(parse("--model", "org/x")) == ("org/x",)
    assert served_names(parse("--model", "org/x", "--served-model-name", "a", "b")) == ("a", "b")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--time-scale", "0"], "--time-scale"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--startup-s", "-1"], "--startup-s"),
        (["--port", "70000"], "--port"),
    ],
)
def test_bad_values_exit_2_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["emulator", *argv]) == 2
    assert flag in capsys.readouterr().err


def test_non_numbers_are_refused_by_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse("--time-scale", "fast")
    assert info.value.code == 2
    assert "--time-scale" in capsys.readouterr().err
