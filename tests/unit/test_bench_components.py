"""``inflight bench router|emulator|scaler|soak|upstream-client``: flags and the pure parts.

The component benchmarks moved from ``scripts/`` into ``inflight.bench.components`` (issue 16,
item 6); these check that each subcommand is registered, parses its flags, refuses a bad
value naming the flag, and that the arithmetic the figures rest on still holds.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from inflight.bench.components import emulator, load, wrk
from inflight.cli import build_parser
from inflight.emulator.profile import Profile

ROOT = Path(__file__).resolve().parents[2]


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


@pytest.mark.parametrize(
    ("command", "func", "defaults"),
    [
        ("router", "_bench_router", {"duration_s": 8.0, "balance_requests": 480,
         "scenarios": ["capacity", "latency", "streaming", "balance"], "out": None}),
        ("soak", "_bench_soak", {"seconds": 45.0, "seed": 7}),
        ("upstream-client", "_bench_upstream_client",
         {"requests": 40000, "concurrency": 64, "rounds": 2}),
        ("emulator", "_bench_emulator", {"time_scale": 0.1, "levels": [4, 8, 16, 64],
         "level_s": 20.0, "warmup_s": 3.0, "replicas": 1, "stream": False}),
        ("scaler", "_bench_scaler", {"calls": 1000, "warmup": 50, "json": None}),
    ],
)  # fmt: skip
def test_each_component_bench_is_a_subcommand_with_the_scripts_defaults(
    command: str, func: str, defaults: dict[str, object]
) -> None:
    args = _parse(command)
    assert args.func.__name__ == func
    for key, value in defaults.items():
        assert getattr(args, key) == value, key


def test_flags_parse_into_typed_values(tmp_path: Path) -> None:
    args = _parse("router", "--scenarios", "latency, capacity", "--duration-s", "1.5",
                  "--no-aiohttp-peer", "--out", str(tmp_path / "r.json"))  # fmt: skip
    assert args.scenarios == ["latency", "capacity"]
    assert args.duration_s == 1.5 and args.no_aiohttp_peer
    assert args.out == tmp_path / "r.json"
    args = _parse("emulator", "--levels", "2,6", "--replicas", "4", "--stream")
    assert args.levels == [2, 6] and args.replicas == 4 and args.stream
    assert _parse("scaler", "--calls", "100").calls == 100


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["router", "--scenarios", "capacity,bogus"], "argument --scenarios: unknown 'bogus'"),
        (["router", "--duration-s", "0"], "argument --duration-s: must be > 0"),
        (["router", "--balance-requests", "x"], "argument --balance-requests: expected an "
         "integer"),
        (["soak", "--seconds", "-1"], "argument --seconds: must be > 0"),
        (["upstream-client", "--rounds", "0"], "argument --rounds: must be >= 1"),
        (["upstream-client", "--concurrency", "1.5"], "argument --concurrency: expected an "
         "integer"),
        (["emulator", "--levels", "4,x"], "argument --levels: expected comma-separated"),
        (["emulator", "--levels", "4,0"], "argument --levels: every value must be >= 1"),
        (["emulator", "--warmup-s", "-1"], "argument --warmup-s: must be >= 0"),
        (["emulator", "--replicas", "0"], "argument --replicas: must be >= 1"),
        (["scaler", "--calls", "50"], "argument --calls: must be >= 100"),
        (["scaler", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_refused_naming_it(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse(*argv)
    assert exc.value.code == 2
    assert expected in capsys.readouterr().err


def test_only_one_off_tools_are_left_in_scripts() -> None:
    """The benchmarks live in the package (under mypy, no sys.path edits)."""
    assert sorted(p.name for p in (ROOT / "scripts").glob("*.py")) == ["gen_proto.py"]
    for path in (ROOT / "inflight" / "bench").rglob("*.py"):
        assert "sys.path" not in path.read_text(), path


WRK_REPORT = """Running 1s test @ http://127.0.0.1:1/v1/completions
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    51.20ms    1.10ms  60.00ms   90.00%
  Latency Distribution
     50%   50.90ms
     75%   51.30ms
     90%   52.10ms
     99%    1.20s
  1237 requests in 1.00s, 200.00KB read
  Non-2xx or 3xx responses: 3
Requests/sec:   1236.50
Transfer/sec:    199.00KB
"""


def test_wrk_report_is_read_in_milliseconds() -> None:
    got = wrk.parse_report(WRK_REPORT)
    assert got == {"rps": 1236.5, "p50_ms": pytest.approx(50.9), "p99_ms": pytest.approx(1200.0),
                   "non_2xx": 3.0, "socket_errors": 0.0}  # fmt: skip
    assert wrk.wrk_seconds("850us") == pytest.approx(0.00085)
    with pytest.raises(ValueError, match="cannot read wrk's report"):
        wrk.parse_report("wrk: connection refused\n")


def test_percentile_by_rank() -> None:
    assert load.percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 3.0
    assert load.percentile([1.0, 2.0], 0.99) == 2.0
    assert math.isnan(load.percentile([], 0.5))


def test_emulator_throughput_counts_from_the_end_of_a_burst() -> None:
    # The docstring's worked example: bursts of 4 at 1.0, 1.45, 1.90 → 8 / 0.9 s.
    done = [t for t in (1.0, 1.45, 1.90) for _ in range(4)]
    assert emulator.steady_throughput(done, 0.5, cluster_gap_s=0.05) == pytest.approx(8 / 0.9)
    assert math.isnan(emulator.steady_throughput([1.0, 2.0], 0.5, cluster_gap_s=0.05))


def test_emulator_prediction_is_slots_over_a_turnover() -> None:
    profile = Profile(time_scale=1.0)
    k = profile.max_num_seqs
    cycle_s = k * profile.prefill_s(emulator.PROMPT_TOKENS) + 300 * profile.step_s(k)
    assert emulator.predicted_rps(profile, 64) == pytest.approx(k / cycle_s)
    assert emulator.predicted_rps(profile, 0) == 0.0
