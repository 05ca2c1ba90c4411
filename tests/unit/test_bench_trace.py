"""inflight/workload/trace.py: the JSONL trace of planned requests."""

from __future__ import annotations

from pathlib import Path

import pytest

from inflight.workload.trace import PlannedRequest, TraceError, read_trace, write_trace


def test_write_then_read_gives_the_same_requests(tmp_path: Path) -> None:
    reqs = [
        PlannedRequest(0.0, 3000, 300),
        PlannedRequest(0.1 + 0.2, 1, 2),
        PlannedRequest(0.3 + 1e-12, 5, 5),
    ]
    path = tmp_path / "trace.jsonl"
    write_trace(path, reqs)
    assert read_trace(path) == reqs
    assert (
        path.read_text().splitlines()[0] == '{"t": 0.0, "prompt_tokens": 3000, "max_tokens": 300}'
    )


def test_blank_lines_are_ignored_and_integer_times_accepted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('\n{"t": 1, "prompt_tokens": 2, "max_tokens": 3}\n  \n'
                    '{"max_tokens": 3, "t": 1.0, "prompt_tokens": 4}\n')  # fmt: skip
    assert read_trace(path) == [PlannedRequest(1.0, 2, 3), PlannedRequest(1.0, 4, 3)]


_GOOD = '{"t": 1.0, "prompt_tokens": 10, "max_tokens": 5}'


@pytest.mark.parametrize(
    ("line", "fragment"),
    [
        ("{not json", "bad JSON"),
        ("[1, 2, 3]", "expected a JSON object, got list"),
        ('{"t": 2.0, "prompt_tokens": 10}', "missing field(s) max_tokens"),
        ('{"t": 2.0, "prompt_tokens": 10, "max_tokens": 5, "x": 1}', "unknown field(s) x"),
        ('{"t": "2", "prompt_tokens": 10, "max_tokens": 5}', '"t" must be a number, got "2"'),
        ('{"t": true, "prompt_tokens": 10, "max_tokens": 5}', '"t" must be a number'),
        ('{"t": 2.0, "prompt_tokens": 10.0, "max_tokens": 5}', '"prompt_tokens" must be an'),
        ('{"t": 2.0, "prompt_tokens": 10, "max_tokens": null}', '"max_tokens" must be an integer'),
        ('{"t": 2.0, "prompt_tokens": 0, "max_tokens": 5}', "prompt_tokens must be >= 1, got 0"),
        ('{"t": 2.0, "prompt_tokens": 1, "max_tokens": -1}', "max_tokens must be >= 1"),
        ('{"t": 0.5, "prompt_tokens": 10, "max_tokens": 5}', "t=0.5 is before the previous"),
        ('{"t": NaN, "prompt_tokens": 10, "max_tokens": 5}', "finite number >= 0"),
    ],
)  # fmt: skip
def test_errors_name_the_file_and_the_line(tmp_path: Path, line: str, fragment: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(f"{_GOOD}\n\n{line}\n")
    with pytest.raises(TraceError) as err:
        read_trace(path)
    assert str(err.value).startswith(f"{path}:3: ")
    assert fragment in str(err.value)


def test_a_negative_first_time_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"t": -1, "prompt_tokens": 10, "max_tokens": 5}\n')
    with pytest.raises(TraceError, match=r":1: t must be a finite number >= 0, got -1"):
        read_trace(path)


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_empty_trace_is_an_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match=r"t\.jsonl: the trace has no requests"):
        read_trace(path)


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.jsonl: cannot read the trace"):
        read_trace(tmp_path / "nope.jsonl")


def test_write_refuses_what_read_would_refuse(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="empty trace"):
        write_trace(tmp_path / "a.jsonl", [])
    with pytest.raises(ValueError, match="non-decreasing"):
        write_trace(tmp_path / "b.jsonl", [PlannedRequest(2.0, 1, 1), PlannedRequest(1.0, 1, 1)])
    assert not (tmp_path / "a.jsonl").exists() and not (tmp_path / "b.jsonl").exists()


def test_planned_request_checks_its_fields() -> None:
    with pytest.raises(ValueError, match="t must be"):
        PlannedRequest(float("inf"), 1, 1)
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        PlannedRequest(0.0, 1, 0)
