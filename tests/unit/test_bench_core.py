"""Pure parts of the bench: statistics, Little's Law, validity, result files, tables, SSE."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from inflight.bench.sse import SseCounter
from inflight.measure.records import LevelWindow, RequestRecord, RouterSample, WarmupResult
from inflight.measure.results import ResultFileExists, check_writable, write_new
from inflight.measure.stats import (
    level_stats,
    littles_law_error,
    percentile,
    rate_series,
    time_average,
)
from inflight.measure.sweep_result import build_result, write_result
from inflight.measure.table import comparison_table, run_table
from inflight.measure.timeline import changes
from inflight.measure.validity import run_reasons
from inflight.statedir import (
    STACK,
    TIMELINE,
    StackInfo,
    StateDir,
    StateFileError,
    TimelinePoint,
    parse_timeline,
    read_stack,
    read_timeline,
)


# --- Little's Law arithmetic ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("l_router", "lam", "w", "expected"),
    [
        (8.0, 0.24, 33.0, abs(8.0 - 7.92) / 8.0),  # the seed's c8: 1%
        (4.0, 1.0, 4.0, 0.0),
        (10.0, 1.0, 8.0, 0.2),  # router reads 25% more than the client implies
        (8.0, 1.0, 9.0, 0.125),
        (0.0, 0.0, 5.0, 0.0),
    ],
)
def test_littles_law_error(l_router: float, lam: float, w: float, expected: float) -> None:
    assert littles_law_error(l_router, lam, w) == pytest.approx(expected)


def test_littles_law_error_zero_l_with_traffic_is_infinite() -> None:
    assert math.isinf(littles_law_error(0.0, 1.0, 1.0))


def test_littles_law_error_rejects_negative() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        littles_law_error(-1.0, 1.0, 1.0)


def test_percentile_interpolates() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([5.0], 99) == 5.0
    assert percentile([1.0, 2.0, 3.0, 4.0, 5.0], 100) == 5.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_time_average_weights_by_duration() -> None:
    samples = [RouterSample(0.0, 4, 0, 1), RouterSample(2.0, 8, 4, 1), RouterSample(4.0, 0, 0, 1)]
    # midpoint rule over [0, 4]: 4 on [0, 1), 8 on [1, 3), 0 on [3, 4] -> (4 + 16) / 4 = 5
    assert time_average(samples, 0.0, 4.0) == pytest.approx(5.0)
    # a sample before the window (the idle gap) is not held into it
    assert time_average([RouterSample(0.0, 0, 0, 1), RouterSample(6.0, 8, 0, 1)], 5.0, 7.0) == 8.0
    assert time_average(samples, 10.0, 11.0) is None
    assert time_average([], 0.0, 1.0) is None


def test_rate_series_counts_a_trailing_window() -> None:
    series = rate_series([1.0, 2.0, 3.0, 11.5], 0.0, 12.0, window_s=10.0, step_s=4.0)
    assert series == [(0.0, 0.0), (4.0, 0.3), (8.0, 0.3), (12.0, 0.2)]


# --- windows built by hand -------------------------------------------------------------------
def _window(
    concurrency: int,
    t0: float,
    *,
    latency_s: float = 4.0,
    rounds: int = 4,
    ready: tuple[int, ...] = (1,),
    l_value: int | None = None,
    failed: int = 0,
) -> LevelWindow:
    """A perfect closed loop: ``concurrency`` requests at a time, ``rounds`` back to back."""
    records = []
    for k in range(rounds):
        for i in range(concurrency):
            ok = not (k == 0 and i < failed)
            start = t0 + k * latency_s
            records.append(
                RequestRecord(start, start + latency_s, start + 0.5, 300 if ok else 0, ok)
            )
    end = t0 + rounds * latency_s
    n = len(ready)
    samples = tuple(
        RouterSample(
            t0 + j * (end - t0) / 20,
            concurrency if l_value is None else l_value,
            0,
            ready[min(n - 1, j * n // 20)],
        )
        for j in range(20)
    )
    return LevelWindow(concurrency, t0, end, tuple(records), samples)


WARM = WarmupResult(requested=8, completed=8, failed=0, finished=True)


def test_level_stats_are_in_seed_time() -> None:
    w = _window(4, 1000.0, latency_s=1.0, rounds=4)  # wall: 16 requests in 4 s
    lv = level_stats(w, time_scale=0.25)
    assert lv.duration_s == pytest.approx(16.0)  # 4 wall s / 0.25
    assert lv.throughput_rps == pytest.approx(1.0)
    assert lv.e2e_p50_s == pytest.approx(4.0)
    assert lv.ttft_p50_s == pytest.approx(2.0)
    assert lv.output_tokens_per_s == pytest.approx(300.0)
    assert lv.lambda_rps * lv.w_s == pytest.approx(4.0)  # type: ignore[operator]
    assert lv.l_router == pytest.approx(4.0)
    assert lv.littles_law_error == pytest.approx(0.0)


def _run(
    windows: list[LevelWindow],
    *,
    frozen: bool,
    warmup: WarmupResult | None = WARM,
    timeline: tuple[TimelinePoint, ...] = (),
):
    return build_result(
        url="http://router",
        time_scale=0.5,
        frozen=frozen,
        policy="fixed:1",
        created_at="2026-11-29T00:00:00+00:00",
        command=["inflight", "bench", "run"],
        warmup=warmup,
        windows=windows,
        timeline=timeline,
    )


def test_valid_frozen_run() -> None:
    result = _run([_window(4, 0.0), _window(8, 100.0)], frozen=True)
    assert result.valid, result.invalid_reasons


def test_frozen_run_whose_timeline_has_two_values_is_invalid() -> None:
    result = _run([_window(4, 0.0), _window(8, 100.0, ready=(1, 2))], frozen=True)
    assert not result.valid
    assert any(
        "replica count changed during a frozen level: [1, 2]" in r for r in result.invalid_reasons
    )


def test_frozen_run_invalid_from_up_timeline_alone() -> None:
    """The router saw one replica, but inflight up's timeline shows a second one ready."""
    timeline = (TimelinePoint(0.0, 1, 1), TimelinePoint(5.0, 2, 2), TimelinePoint(9.0, 1, 1))
    result = _run([_window(4, 0.0)], frozen=True, timeline=timeline)
    assert any("[1, 2]" in r for r in result.invalid_reasons)


def test_changing_replicas_is_fine_when_not_frozen() -> None:
    result = _run([_window(4, 0.0), _window(8, 100.0, ready=(1, 2))], frozen=False)
    assert result.valid, result.invalid_reasons
    assert result.levels[1].replicas == (1, 2)


def test_unfinished_warmup_is_invalid() -> None:
    warm = WarmupResult(requested=8, completed=5, failed=3, finished=True)
    result = _run([_window(4, 0.0)], frozen=True, warmup=warm)
    assert "warm-up did not finish: 5 of 8 requests completed (3 failed)" in result.invalid_reasons


def test_littles_law_violation_is_invalid() -> None:
    # 4 workers in flight, but the router reads 5 (a leaked slot): error 20%
    result = _run([_window(4, 0.0, l_value=5)], frozen=True)
    assert any("Little's Law error 20.0% > 10%" in r for r in result.invalid_reasons)


def test_within_ten_percent_is_valid() -> None:
    # client in flight 10, router 10.9 -> 8.3%
    result = _run([_window(10, 0.0, l_value=11)], frozen=True)
    assert not any("Little" in r for r in result.invalid_reasons)


def test_errors_are_invalid_and_not_counted_as_throughput() -> None:
    result = _run([_window(4, 0.0, failed=2)], frozen=True)
    assert "c=4: 2 of 16 requests failed" in result.invalid_reasons
    assert result.levels[0].throughput_rps == pytest.approx(14 / (16 / 0.5))


def test_every_reason_is_listed_not_just_the_first() -> None:
    warm = WarmupResult(requested=8, completed=0, failed=0, finished=False)
    reasons = run_reasons(
        _run([_window(4, 0.0, ready=(1, 2), l_value=6)], frozen=True).levels, warm, frozen=True
    )
    assert len(reasons) >= 4  # warm-up, frozen (run), frozen (level), Little's Law


# --- result files ------------------------------------------------------------------------------
def test_result_files_are_written_and_never_overwritten(tmp_path: Path) -> None:
    result = _run([_window(4, 0.0), _window(8, 100.0)], frozen=True)
    results_file = tmp_path / "out" / "2026-11-29-fixed1.json"
    summary_file = tmp_path / "out" / "2026-11-29-fixed1.md"
    doc = write_result(result, results_file, summary_file, force=False)
    on_disk = json.loads(results_file.read_text())
    assert on_disk == doc
    assert on_disk["time_scale"] == 0.5 and on_disk["valid"] is True
    assert [lv["concurrency"] for lv in on_disk["levels"]] == [4, 8]
    assert len(on_disk["requests"]) == 16 + 32
    assert "| 4 | 16 | 0 |" in summary_file.read_text()

    with pytest.raises(ResultFileExists, match="--force"):
        check_writable([results_file], force=False)
    with pytest.raises(ResultFileExists):
        write_result(result, results_file, None, force=False)
    check_writable([results_file], force=True)
    write_new(results_file, "{}", force=True)
    assert results_file.read_text() == "{}"


def test_infinite_error_is_written_as_null(tmp_path: Path) -> None:
    result = _run([_window(4, 0.0, l_value=0)], frozen=True)
    assert math.isinf(result.levels[0].littles_law_error)
    doc = write_result(result, tmp_path / "r.json", None, force=False)
    assert json.loads((tmp_path / "r.json").read_text())["levels"][0]["littles_law_error"] is None
    assert doc["valid"] is False


def test_tables() -> None:
    a = _run([_window(4, 0.0, latency_s=4.0), _window(16, 100.0, latency_s=16.0)], frozen=True)
    b = _run([_window(4, 0.0, latency_s=4.0), _window(16, 100.0, latency_s=8.0)], frozen=True)
    text = comparison_table({"fixed:1": a.to_json(), "fixed:2": b.to_json()})
    assert "(2.00×)" in text and "(0.50×)" in text
    assert "VALID" in run_table(a.to_json())


# --- SSE and timeline parsing ------------------------------------------------------------------
def test_sse_counter_handles_split_events_and_usage() -> None:
    stream = (
        b'data: {"choices":[{"text":"a"}]}\n\n'
        b'data: {"choices":[{"text":"b"}]}\n\ndata: {"choices":[{"te'
        b'xt":"c"}]}\n\n'
        b'data: {"choices":[],"usage":{"completion_tokens":300}}\n\n'
        b"data: [DONE]\n\n"
    )
    counter = SseCounter()
    for i in range(0, len(stream), 7):
        counter.feed(stream[i : i + 7])
    assert counter.done
    assert counter.events == 4
    assert counter.output_tokens() == 300


def test_sse_counter_without_usage_counts_events() -> None:
    counter = SseCounter()
    counter.feed(b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[{"text":"b"}]}\n\n')
    assert not counter.done
    assert counter.output_tokens() == 2


def test_timeline_parsing_and_changes() -> None:
    text = (
        '{"t": 1, "desired": 1, "ready": 1}\n{"t": 2, "desired": 2, "ready": 1}\n'
        '{"t": 3, "desired": 2, "ready": 2}\n{"t": 4, "desi'
    )
    points = parse_timeline(text)  # a half-written last line is skipped
    assert [p.ready for p in points] == [1, 1, 2]
    assert changes(points, "desired") == [(2.0, 1, 2)]
    with pytest.raises(StateFileError, match=":1:"):
        parse_timeline('{"t": 1}\n')


def test_the_bench_reads_what_inflight_up_writes(tmp_path: Path) -> None:
    """One format, one module: StateDir writes, read_stack / read_timeline read back."""
    state_dir = StateDir(tmp_path)
    state_dir.acquire()
    try:
        assert read_timeline(tmp_path / TIMELINE) == []
        points = [TimelinePoint(1.5, 1, 0), TimelinePoint(2.5, 2, 1)]
        for p in points:
            state_dir.append_timeline(p)
        info = StackInfo(
            pid=42, router_url="http://127.0.0.1:1", prometheus_url=None,
            scaler_address="127.0.0.1:2", time_scale=0.2, policy="qps", started_at=3.5,
        )  # fmt: skip
        state_dir.write_stack(info)
        assert read_timeline(tmp_path / TIMELINE) == points
        assert read_stack(tmp_path / STACK) == info
    finally:
        state_dir.release()
    (tmp_path / STACK).write_text('{"pid": 42}')
    with pytest.raises(StateFileError, match=r"stack\.json: KeyError"):
        read_stack(tmp_path / STACK)
