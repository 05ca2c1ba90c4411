"""Public traces as ``--trace`` inputs (``inflight.workload.trace_formats``): the Azure LLM
inference CSV and Mooncake JSONL read directly, windowed and sped up, bad input named by
file, line and field. Data: ``tests/data`` (NOTICE.md says where each file comes from)."""

from __future__ import annotations

import argparse
import gzip
from pathlib import Path
from typing import Any

import pytest

from inflight.workload.plan import plan_from_args
from inflight.workload.trace import PlannedRequest, TraceError, write_trace
from inflight.workload.trace_formats import (
    AZURE,
    INFLIGHT,
    MOONCAKE,
    TraceWindow,
    detect_format,
    load_trace,
    parse_azure,
    parse_mooncake,
)
from tests.support import open_loop_args

DATA = Path(__file__).resolve().parents[1] / "data"
AZURE_HEAD = DATA / "azure_llm_2023_code_head.csv"  # real: the first 69 requests
MOONCAKE_SYN = DATA / "mooncake_format_synthetic.jsonl"  # synthetic, Mooncake's format


def test_the_format_is_told_by_the_first_line() -> None:
    assert detect_format("TIMESTAMP,ContextTokens,GeneratedTokens", "f:1") == AZURE
    assert detect_format("\ufeffTIMESTAMP,ContextTokens,GeneratedTokens", "f:1") == AZURE
    assert detect_format('{"timestamp": 0, "input_length": 1, "output_length": 1}', "f:1") == (
        MOONCAKE
    )
    assert detect_format('{"t": 0, "prompt_tokens": 1, "max_tokens": 1}', "f:1") == INFLIGHT
    with pytest.raises(TraceError, match=r"^f:1: not a known JSONL trace.*got a, b"):
        detect_format('{"a": 1, "b": 2}', "f:1")
    with pytest.raises(TraceError, match=r"^f:3: not a known trace.*TIMESTAMP,ContextTokens"):
        detect_format("time,in,out", "f:3")


def test_the_azure_excerpt_reads_as_recorded() -> None:
    trace = load_trace(AZURE_HEAD)
    r = trace.requests
    assert len(r) == 69 and trace.meta["trace_format"] == AZURE
    # 18:17:03.9799600 is t=0; 18:17:04.0319600 is 0.052 s later; 7 fractional digits
    assert r[0] == PlannedRequest(0.0, 4808, 10)
    assert r[1].t_s == pytest.approx(0.052) and (r[1].prompt_tokens, r[1].max_tokens) == (3180, 8)
    # the last row, 18:20:07.4398690: 3 min 3.459909 s after the first; the traffic ends there
    assert r[-1].t_s == pytest.approx(183.459909) and trace.end_s == pytest.approx(183.459909)
    assert trace.meta["trace_requests_in_file"] == 69 and trace.meta["trace_reordered"] == 0
    assert "trace_window" not in trace.meta


def test_a_window_keeps_its_requests_moves_them_to_zero_and_speeds_them_up() -> None:
    # [29, 49) s holds the burst from 18:17:33.459 (t=29.479069) to 18:17:43.307: 51 rows
    trace = load_trace(AZURE_HEAD, TraceWindow(start_s=29.0, duration_s=20.0, rate_scale=2.0))
    r = trace.requests
    assert len(r) == 51
    assert r[0].t_s == pytest.approx((29.479069 - 29.0) / 2) and r[0].prompt_tokens == 1555
    assert r[-1].t_s == pytest.approx((39.327517 - 29.0) / 2) and r[-1].prompt_tokens == 7435
    assert trace.end_s == 10.0  # the window's end, quiet included: 20 s ÷ 2
    assert trace.meta["trace_window"] == {"start_s": 29.0, "duration_s": 20.0, "rate_scale": 2.0}
    # no duration: to the last request
    tail = load_trace(AZURE_HEAD, TraceWindow(start_s=100.0))
    assert len(tail.requests) == 6  # the burst from 18:20:07.04 (t=183.06)
    assert tail.end_s == pytest.approx(83.459909)
    with pytest.raises(TraceError, match=r"no request in the window \[50, 60\) s.*183\.46"):
        load_trace(AZURE_HEAD, TraceWindow(start_s=50.0, duration_s=10.0))


def test_mooncake_is_read_in_milliseconds_sorted_and_zero_lengths_raised() -> None:
    trace = load_trace(MOONCAKE_SYN)
    assert trace.meta["trace_format"] == MOONCAKE
    assert [(q.t_s, q.prompt_tokens, q.max_tokens) for q in trace.requests] == [
        (0.0, 6000, 400), (0.0, 2100, 300), (1.5, 900, 1), (2.5, 1000, 25), (3.0, 12000, 70),
        (9.0, 3800, 310),
    ]  # fmt: skip
    assert trace.meta["trace_reordered"] == 1  # the 2.5 s line came after the 3.0 s one
    assert trace.meta["trace_lengths_raised_to_1"] == 1  # output_length 0
    assert trace.end_s == 9.0


def test_gzip_is_read(tmp_path: Path) -> None:
    gz = tmp_path / "code.csv.gz"
    gz.write_bytes(gzip.compress(AZURE_HEAD.read_bytes()))
    assert load_trace(gz).requests == load_trace(AZURE_HEAD).requests


def test_an_inflight_trace_windows_on_its_own_times(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    write_trace(path, [PlannedRequest(float(t), 100, 10) for t in (5, 6, 12, 20)])
    whole = load_trace(path)
    assert [q.t_s for q in whole.requests] == [5.0, 6.0, 12.0, 20.0] and whole.end_s == 20.0
    part = load_trace(path, TraceWindow(start_s=6.0, duration_s=10.0, rate_scale=0.5))
    assert [q.t_s for q in part.requests] == [0.0, 12.0] and part.end_s == 20.0


AZ_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens"


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ([AZ_HEAD, "2023-11-16 18:17:03.97,10"], r"f:2: expected 3 fields, got 2"),
        ([AZ_HEAD, "yesterday,10,5"], r"f:2: TIMESTAMP must look like"),
        ([AZ_HEAD, "2023-13-16 18:17:03,10,5"], r"f:2: TIMESTAMP '2023-13-16 18:17:03'"),
        ([AZ_HEAD, "", "2023-11-16 18:17:03,x,5"], r"f:3: ContextTokens must be an integer"),
        ([AZ_HEAD, "2023-11-16 18:17:03,10,-1"], r"f:2: GeneratedTokens must be >= 0, got -1"),
        (["TIMESTAMP,ContextTokens", "x,1"], r"f:1: the Azure CSV header lacks GeneratedTokens"),
    ],
)
def test_bad_azure_rows_name_the_line_and_field(lines: list[str], says: str) -> None:
    with pytest.raises(TraceError, match=says):
        parse_azure(lines, "f")


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"timestamp": 0, "input_length": 5}', r"f:2: missing field\(s\) output_length"),
        ('{"timestamp": "0", "input_length": 5, "output_length": 1}', r"f:2: timestamp must"),
        ('{"timestamp": 0, "input_length": 5.5, "output_length": 1}', r"f:2: input_length must"),
        ('{"timestamp": 0, "input_length": 5, "output_length": true}', r"f:2: output_length"),
        ("[1, 2]", r"f:2: expected a JSON object"),
        ("{nope", r"f:2: bad JSON"),
    ],
)
def test_bad_mooncake_lines_name_the_line_and_field(line: str, says: str) -> None:
    good = '{"timestamp": 0, "input_length": 5, "output_length": 1}'
    with pytest.raises(TraceError, match=says):
        parse_mooncake([good, line], "f")


def _ns(**kw: Any) -> argparse.Namespace:
    return open_loop_args(**kw)


def test_the_flags_reach_the_plan_and_are_checked() -> None:
    plan = plan_from_args(
        _ns(trace=AZURE_HEAD, trace_start_s=29.0, trace_duration_s=20.0, trace_rate_scale=2.0)
    )
    assert len(plan.requests) == 51 and plan.end_s == 10.0
    assert plan.meta["trace_format"] == AZURE and "azure format" in plan.description
    assert plan.scenario_meta()["trace_window"]["rate_scale"] == 2.0
    for kw, flag in (
        ({"trace_rate_scale": 0.0}, "--trace-rate-scale"),
        ({"trace_duration_s": -1.0}, "--trace-duration-s"),
        ({"trace_start_s": -5.0}, "--trace-start-s"),
    ):
        with pytest.raises(ValueError, match=flag):
            plan_from_args(_ns(trace=AZURE_HEAD, **kw))
    with pytest.raises(ValueError, match="--trace-start-s: only with --trace"):
        plan_from_args(_ns(arrivals="poisson:0:1,10:1", trace_start_s=5.0))
