"""``inflight bench calibrate-emulator``'s pure half: fits, the fitted profile, the emulator
replaying the real engine's requests, the checks; and its flags (refused before any engine
starts). The measuring half runs in tests/real_engine."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pytest

from inflight.bench.calibrate import model as m
from inflight.bench.calibrate import phases as ph
from inflight.bench.calibrate.run import _off_engine, level_requests
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
    done, points = m.replay_burst(p, [m.Request(prompt, output, i) for i in range(n)], 0.25)
    two = m.kv_checks("two-at-a-time", points, done)
    assert two["max_running"] == 2 and two["waited_below_slots"] and two["preemptions"] == 0
    n, prompt, output = m.KV_CASES["preemption"]
    done, points = m.replay_burst(p, [m.Request(prompt, output, i) for i in range(n)], 0.25)
    pre = m.kv_checks("preemption", points, done)
    assert pre["fell_from_four_before_a_finish"] and pre["preemptions"] >= 2
    assert all(d.finished_s > 0 for d in done)
    assert 4 in m.running_levels(points)


def test_the_fall_from_four_is_judged_on_any_lower_level_before_a_finish() -> None:
    """Issue 41, a real run: vLLM's /metrics went unanswered for 3 s of the burst, so the
    samples read 4, then 3 with 3 waiting, then 1 after a finish: the cache preempted
    (nothing had finished), though no sample caught 2. A fall that comes only with a
    finish is not the cache's doing."""

    def trace(*rows: tuple[int, int, int]) -> list[m.TracePoint]:
        return [m.TracePoint(0.25 * i, r, w, 0, 0.5, f) for i, (r, w, f) in enumerate(rows)]

    done = [m.Done(m.Request(1000, 1000), 0.0, 0.1, 5.0)]
    stalled = trace((1, 0, 0), (4, 2, 0), (3, 3, 0), (1, 4, 1), (2, 2, 2))
    assert m.kv_checks("preemption", stalled, done)["fell_from_four_before_a_finish"]
    finished_first = trace((4, 2, 0), (4, 2, 0), (3, 2, 1), (2, 1, 2))
    assert not m.kv_checks("preemption", finished_first, done)["fell_from_four_before_a_finish"]


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


def slowed(p: Profile, k: float) -> Profile:
    """``p`` on a machine ``k`` times slower: every step and every prefill × ``k``."""
    return replace(
        p,
        service_s=p.service_s * k,
        prefill_fixed_ms=p.prefill_fixed_ms * k,
        prefill_ms_per_1k_tokens=p.prefill_ms_per_1k_tokens * k,
        prefill_ms_per_1k_tokens_sq=p.prefill_ms_per_1k_tokens_sq * k,
    )


class FakeEngine:
    """Both engines' measurements, made by the emulator itself on a machine whose speed
    follows ``speeds``: the k-th measurement (probe or phase, in the order the schedule
    asks for them) runs at ``speeds[k]`` (the last one from then on)."""

    def __init__(self, true: Profile, args: argparse.Namespace, speeds: list[float]) -> None:
        self.true, self.args, self.speeds = true, args, speeds
        self.calls: list[str] = []
        self.inside: dict[str, float] = {}  # a level → how much slower it ran than its probes
        self.engine_timed = True  # the engine exports its decode time
        self.off: dict[str, list[float]] = {}  # a level → each attempt's time off the engine

    def _now(self, what: str) -> Profile:
        k = self.speeds[min(len(self.calls), len(self.speeds) - 1)]
        self.calls.append(what)
        return slowed(self.true, k)

    def probe(self) -> ph.Probe:
        p = self._now("probe")
        return ph.Probe(
            {n: p.step_s(n) for n in self.args.batches},
            {q: p.step_s(1) + p.prefill_s(q) for q in self.args.ttft_prompts},
        )

    def run(self, name: str) -> object:
        p = self._now(name)
        if name.startswith("c="):
            p = slowed(p, self.inside.get(name, 1.0))
            done = m.replay_closed_loop(p, level_requests(int(name[2:]), 12, 128, 64))
            # the engine's own time per token and latency over the phase (vLLM's histograms);
            # ``off`` makes the clients wait that much longer than the engine timed
            off = self.off.get(name, [])
            latency = sum(d.latency_s for d in done) / len(done) / (1 + (off.pop(0) if off else 0))
            if not self.engine_timed:
                return m.ClosedPhase(done, None)
            return m.ClosedPhase(done, m.mean_tpot(done), latency)
        n, prompt, output = m.KV_CASES[name.removeprefix("kv ")]
        return m.replay_burst(p, [m.Request(prompt, output, i) for i in range(n)], 0.25)

    def measured(self) -> dict[str, object]:
        names = ph.phase_names(self.args.levels, self.args.kv_cases)
        runs = ph.interleave(
            names, self.probe, self.run, self.args.tolerance, self.args.max_repeats, _off_engine
        )
        cache = {"block_size": "128", "num_gpu_blocks": "40", "kv_cache_size_tokens": "5120"}
        return {"cache": cache, "runs": runs}


def test_an_engine_that_is_the_emulator_passes_every_check() -> None:
    # The measuring half's output, made by the emulator itself: the fit recovers its profile,
    # the replays equal the "measures", and every check passes with a drift of 0.
    from inflight.bench.calibrate.run import _evaluate, _report

    true = replace(profile(), prefill_fixed_ms=30.0)
    args = parse("--engine", "vllm-cpu")
    engine = FakeEngine(true, args, [1.0])
    result = _evaluate(args, engine.measured())
    assert result["profile"]["prefill_fixed_ms"] == pytest.approx(30.0)
    assert [c["what"] for c in result["checks"] if not c["ok"]] == []
    assert len(result["checks"]) == 16 and result["drift"]["steady"]
    # A/B/A/B: a probe before the first phase and after each one, no repeat
    phases = ["c=1", "c=2", "c=4", "c=8", "kv two-at-a-time", "kv preemption"]
    assert engine.calls == ["probe", *(x for name in phases for x in (name, "probe"))]
    assert result["spread"]["repeats"] == 0
    assert result["spread"]["ratios"]["throughput_rps"] == pytest.approx([1.0, 1.0])
    result["run"] = {"command": "x", "wall_s": 1.0, "load_average": (0.1, 0.1, 0.1)}
    report = _report(result)
    assert "Checks: 16 of 16 passed." in report
    assert (
        "Repeats (a phase whose probes drifted, or whose clients' latency exceeded the engine's "
        "own, beyond ±10%, at most 2 each): 0." in report
    )


def test_a_machine_that_slows_between_phases_is_judged_phase_by_phase() -> None:
    """Issue 41: the engine 50 % slower from the third phase on (steady within each phase).
    One profile fitted at the start would put the later levels 30 % off; each phase judged
    on the probes around it passes, side by side, and the spread shows the machine moved."""
    from inflight.bench.calibrate.run import _evaluate, _report

    args = parse("--engine", "vllm-cpu")
    # probe, c=1, probe, c=2, then 1.5× slower from the probe after c=2 on: that probe drifts
    # from the one before, so c=2 is run again at the new speed
    speeds = [1.0, 1.0, 1.0, 1.0, 1.5]
    engine = FakeEngine(profile(), args, speeds)
    result = _evaluate(args, engine.measured())
    assert [c["what"] for c in result["checks"] if not c["ok"]] == []
    assert engine.calls[:8] == ["probe", "c=1", "probe", "c=2", "probe", "c=2", "probe", "c=4"]
    assert [(p["phase"], p["attempt"], p["judged"]) for p in result["phases"][:3]] == [
        ("c=1", 1, True), ("c=2", 1, False), ("c=2", 2, True)
    ]  # fmt: skip
    assert result["spread"]["repeats"] == 1 and result["spread"]["unsteady"] == []
    assert result["spread"]["speed_moved"] == pytest.approx(0.5)
    assert result["drift"]["relative"] == pytest.approx(0.5) and result["drift"]["steady"]
    # the old way: one fit on the first probe, checked on a level measured later
    first = FakeEngine(profile(), args, [1.0]).probe()
    early = m.fit_profile(m.fit(first.tpot, first.ttft), 4, 128, 40, 2048, 128, 64)
    late = slowed(profile(), 1.5)
    reqs = level_requests(8, 12, 128, 64)
    real_fig = m.figures(8, m.replay_closed_loop(late, reqs))
    old = m.compare(real_fig, m.figures(8, m.replay_closed_loop(early, reqs)), 0.10)
    assert not all(c.ok for c in old)
    result["run"] = {"command": "x", "wall_s": 1.0, "load_average": (0.1, 0.1, 0.1)}
    assert "): 1 (c=2 (attempt 1: +50%))." in _report(result)


def test_a_level_slower_than_the_probes_around_it_is_judged_at_its_own_engine_speed() -> None:
    """Issue 41, run g: c=4 ran 2× slower than the probes before and after it said (the
    client's latency was the engine's within 2 %, so the engine slowed, not its API server).
    Judged at the probes' speed it fails by 100 %; at the speed the engine timed over the
    phase it passes, and the report shows the phase speed and the probes' error beside."""
    from inflight.bench.calibrate.run import _evaluate, _report

    args = parse("--engine", "vllm-cpu", "--kv-cases", "two-at-a-time")
    engine = FakeEngine(profile(), args, [1.0])
    engine.inside = {"c=4": 2.0}
    result = _evaluate(args, engine.measured())
    assert [c["what"] for c in result["checks"] if not c["ok"]] == []
    c4 = result["levels"][2]
    assert c4["phase_speed"] == pytest.approx(2.0)
    assert c4["from_probes"]["throughput_rps"] == pytest.approx(
        2 * c4["real"]["throughput_rps"], rel=0.05
    )
    assert result["spread"]["phase_speed"] == pytest.approx([1.0, 2.0])
    result["run"] = {"command": "x", "wall_s": 1.0, "load_average": (0.1, 0.1, 0.1)}
    report = _report(result)
    assert "| 4 |" in report and "| 2.00 |" in report
    assert "phase speed ÷ the probes' 1.00–2.00" in report

    # An engine without the decode histogram: judged at the probes' speed, and it says so.
    engine = FakeEngine(profile(), args, [1.0])
    engine.inside, engine.engine_timed = {"c=4": 2.0}, False
    result = _evaluate(args, engine.measured())
    failed = {c["what"] for c in result["checks"] if not c["ok"]}
    assert failed == {"c=4 throughput_rps", "c=4 mean_latency_s"}
    assert result["levels"][2]["judged_on"] == "the probes' speed"
    assert result["spread"]["phase_speed"] is None


def test_a_level_whose_clients_waited_longer_than_the_engine_is_run_again() -> None:
    """Issue 41: time the engine never saw (its API server or the client starved of the
    CPU for a moment) is not the emulator's to model, so the level is run again."""
    from inflight.bench.calibrate.run import _evaluate, _report

    args = parse("--engine", "vllm-cpu", "--levels", "1,2", "--kv-cases", "two-at-a-time")
    engine = FakeEngine(profile(), args, [1.0])
    engine.off = {"c=2": [0.5]}  # its first attempt: clients 50 % over the engine
    result = _evaluate(args, engine.measured())
    assert engine.calls[:6] == ["probe", "c=1", "probe", "c=2", "probe", "c=2"]
    assert [(p["phase"], p["attempt"], p["judged"]) for p in result["phases"][:3]] == [
        ("c=1", 1, True), ("c=2", 1, False), ("c=2", 2, True)
    ]  # fmt: skip
    assert result["phases"][1]["off_engine"] == pytest.approx(0.5)
    assert result["levels"][1]["off_engine"] == pytest.approx(0.0)
    assert result["spread"]["repeats"] == 1 and result["spread"]["unsteady"] == []
    result["run"] = {"command": "x", "wall_s": 1.0, "load_average": (0.1, 0.1, 0.1)}
    assert "c=2 (attempt 1: +0%, clients +50% over the engine)" in _report(result)


def test_a_phase_that_keeps_drifting_is_repeated_a_bounded_number_of_times_then_judged() -> None:
    """A machine whose speed moves at every measurement: each phase runs 1 + --max-repeats
    times, is judged on its last attempt (never left unjudged), and is named unsteady."""
    from inflight.bench.calibrate.run import _evaluate, _report

    args = parse("--engine", "vllm-cpu", "--levels", "2", "--kv-cases", "two-at-a-time",
                 "--max-repeats", "1")  # fmt: skip
    speeds = [1.0 + 0.2 * i for i in range(20)]
    engine = FakeEngine(profile(), args, speeds)
    result = _evaluate(args, engine.measured())
    assert [p["phase"] for p in result["phases"]] == ["c=2", "c=2", "kv two-at-a-time",
                                                      "kv two-at-a-time"]  # fmt: skip
    assert result["spread"]["unsteady"] == ["c=2", "kv two-at-a-time"]
    assert not result["drift"]["steady"]
    assert len(result["checks"]) == 2 + 5  # judged all the same
    result["run"] = {"command": "x", "wall_s": 1.0, "load_average": (0.1, 0.1, 0.1)}
    assert "still drifting, judged on their last attempt: c=2, kv two-at-a-time" in _report(result)


def test_the_schedule_repeats_only_the_phase_that_drifted() -> None:
    probes = iter([1.0, 1.0, 1.3, 1.3, 1.3])
    runs = ph.interleave(
        ["a", "b", "c"],
        lambda: ph.Probe({1: next(probes)}, {}),
        lambda name: name,
        tolerance=0.1,
        max_repeats=3,
    )
    assert [(r.name, r.attempt) for r in runs] == [("a", 1), ("b", 1), ("b", 2), ("c", 1)]
    assert {n: r.attempt for n, r in ph.judged(runs).items()} == {"a": 1, "b": 2, "c": 1}
