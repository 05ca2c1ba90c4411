"""inflight.sim.prom_trace without a Prometheus: flags and their errors, the chunked raw-sample
reads,
histograms of several layouts, and what the summary reports (a stand-in answers the range
selectors; the real Prometheus is in tests/integration/test_sim_trace_from_prometheus.py)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from inflight.sim import prom_trace
from inflight.sim.prom_trace import Options, Source, TraceFromPromError, parse_time


# --- --start / --end -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "unix_s"),
    [
        ("1764604800", 1764604800.0),
        ("1764604800.25", 1764604800.25),
        ("2025-12-01T16:00:00Z", 1764604800.0),
        ("2025-12-01t16:00:00z", 1764604800.0),
        ("2025-12-01T17:30:00+01:30", 1764604800.0),
        ("2025-12-01T16:00:00.5Z", 1764604800.5),
    ],
)
def test_times_are_rfc3339_or_unix_seconds(text: str, unix_s: float) -> None:
    assert parse_time(text, "--start") == unix_s


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("2025-12-01T16:00:00", "needs a time zone"),
        ("yesterday", "expected RFC 3339"),
        ("-5", "expected RFC 3339"),
        ("inf", "expected RFC 3339"),
        ("", "expected RFC 3339"),
    ],
)
def test_a_bad_time_names_its_flag(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=f"^--end: .*{why}"):
        parse_time(text, "--end")


# --- flags -----------------------------------------------------------------------------------
def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = prom_trace.main(argv)
    return code, capsys.readouterr().err


BASE = ["--url", "http://127.0.0.1:9", "--start", "1000", "--end", "2000"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--end", "1000"], "--end (1000) must be after --start (1000)"),
        (["--selector", 'job="a" or 1'], "--selector: "),
        (["--selector", '__name__="x"'], "label '__name__' is reserved"),
        (["--vllm-selector", 'model=~"(?=x)"'], "--vllm-selector: "),
        (["--prompt-tokens", "lognormal:3000"], "--prompt-tokens"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--time-scale", "0"], "--time-scale: must be > 0"),
        (["--url", "prom:9090"], "--url: expected http://"),
    ],
)
def test_bad_flags_are_refused_naming_the_flag(
    extra: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = run_main([*BASE, *extra, "--out", str(tmp_path / "t.jsonl")], capsys)
    assert code == 2
    assert err.startswith(f"{prom_trace.PROG}: error: ")
    assert message in err


def test_an_existing_out_file_is_refused_before_anything_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trace.jsonl"
    out.write_text("keep me\n")
    code, err = run_main([*BASE, "--out", str(out)], capsys)  # port 9: nothing is asked
    assert code == 2
    assert f"--out: {out} exists; a trace is never overwritten" in err
    assert out.read_text() == "keep me\n"


def test_the_selectors_are_canonical_and_the_lengths_parsed(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    prom_trace.add_arguments(parser)
    args = parser.parse_args(
        [*BASE, "--selector", ' job = "router" ', "--prompt-tokens", "uniform:5:5",
         "--out", str(tmp_path / "t.jsonl")]
    )  # fmt: skip
    opts = prom_trace.options_from_args(args)
    assert opts.selector == 'job="router"'
    assert opts.vllm_selector == ""
    assert opts.prompt_fallback is not None and opts.output_fallback is None
    assert (opts.start_s, opts.end_s) == (1000.0, 2000.0)


def test_register_adds_the_subcommand() -> None:
    parser = argparse.ArgumentParser(prog="inflight sim")
    prom_trace.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["trace-from-prometheus", *BASE, "--out", "t.jsonl"])
    assert args.func is prom_trace.run


# --- reads, through a stand-in for Prometheus' range selectors ------------------------------
class FakeSource(Source):
    """Answers ``expr[Nms]`` at ``time`` with the samples of ``expr`` in ``(t − N, t]``."""

    def __init__(self, data: dict[str, list[tuple[dict[str, str], list[tuple[float, float]]]]]):
        self.url = "http://fake"
        self.data = data
        self.queries: list[tuple[str, float]] = []

    def close(self) -> None:
        pass

    def instant(self, query: str, at_s: float) -> list[dict[str, Any]]:
        self.queries.append((query, at_s))
        match = re.fullmatch(r"(.*)\[(\d+)ms\]", query)
        if match is None:  # the hint's count by (job)
            jobs = {labels.get("job", "") for v in self.data.values() for labels, _ in v}
            return [{"metric": {"job": j}, "value": [at_s, "1"]} for j in sorted(jobs)]
        expr, width_s = match[1], int(match[2]) / 1000
        out: list[dict[str, Any]] = []
        for labels, samples in self.data.get(expr, []):
            values = [(t, str(v)) for t, v in samples if at_s - width_s < t <= at_s]
            if values:
                out.append({"metric": {"__name__": expr, **labels}, "values": values})
        return out


def options(tmp_path: Path, start_s: float, end_s: float, **kw: Any) -> Options:
    fields: dict[str, Any] = dict(
        url="http://fake", selector='job="router"', vllm_selector="", start_s=start_s,
        end_s=end_s, out=tmp_path / "t.jsonl", prompt_fallback=lambda rng: 11,
        output_fallback=lambda rng: 3, seed=0, time_scale=1.0, timeout_s=5.0,
    )  # fmt: skip
    fields.update(kw)
    return Options(**fields)


COUNTER = 'router_requests_received_total{job="router"}'


def test_long_windows_are_read_in_chunks_that_neither_overlap_nor_leave_gaps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prom_trace, "CHUNK_S", 100)
    samples = [(float(t), float(t)) for t in range(0, 1000, 7)]
    source = FakeSource({COUNTER: [({"job": "router"}, samples)]})
    got = source.samples(COUNTER, 3.0, 950.0)
    assert got == {(("job", "router"),): [s for s in samples if 3.0 < s[0] <= 950.0]}
    assert len(source.queries) == 10  # 947 s in chunks of 100


def test_the_summary_counts_series_resets_and_what_it_cannot_place(tmp_path: Path) -> None:
    a = [(900.0, 0.0), (1000.0, 0.0), (1010.0, 5.0), (1020.0, 2.0), (1030.0, 2.0)]
    b = [(1015.0, 40.0), (1025.0, 44.0)]  # first scraped inside the window: 40 not placed
    source = FakeSource(
        {COUNTER: [({"job": "router", "pod": "a"}, a), ({"job": "router", "pod": "b"}, b)]}
    )
    requests, summary = prom_trace.build(options(tmp_path, 1000.0, 1030.0), source)
    assert len(requests) == 5 + 2 + 4
    assert (summary.series, summary.resets, summary.unplaced) == (2, 1, 40)
    assert summary.largest_gap_s == 100.0
    assert (summary.prompt_from, summary.output_from) == ("--prompt-tokens", "--max-tokens")
    assert {(r.prompt_tokens, r.max_tokens) for r in requests} == {(11, 3)}


def test_no_series_is_an_error_with_the_jobs_that_have_the_counter(tmp_path: Path) -> None:
    source = FakeSource({"router_requests_received_total": [({"job": "edge"}, [(1.0, 1.0)])]})
    with pytest.raises(TraceFromPromError, match=r"no series .*job=\"router\".*'edge'"):
        prom_trace.build(options(tmp_path, 1000.0, 1030.0), source)


def test_histograms_of_two_layouts_are_read_each_with_its_own_buckets(tmp_path: Path) -> None:
    def bucket(le: str, pod: str, before: float, after: float) -> tuple[dict[str, str], Any]:
        return {"le": le, "pod": pod}, [(990.0, before), (1010.0, after)]

    data = {
        "vllm:request_prompt_tokens_bucket": [
            bucket("10", "a", 0, 4), bucket("100", "a", 0, 4), bucket("+Inf", "a", 0, 4),
            bucket("50", "b", 2, 2), bucket("500", "b", 2, 14), bucket("+Inf", "b", 2, 14),
        ],
        COUNTER: [({"job": "router"}, [(995.0, 0.0), (1005.0, 16.0)])],
    }  # fmt: skip
    source = FakeSource(data)
    opts = options(tmp_path, 980.0, 1020.0)
    buckets, observed = prom_trace.histogram_buckets(source, prom_trace.PROMPT_HISTOGRAM, opts)
    assert observed == 16
    nonzero = sorted((b.lo, b.hi, b.weight) for b in buckets if b.weight)
    assert nonzero == [(0.0, 10.0, 4.0), (50.0, 500.0, 12.0)]
    requests, summary = prom_trace.build(opts, source)
    assert summary.prompt_from == "vllm:request_prompt_tokens (16 observations)"
    prompts = sorted(r.prompt_tokens for r in requests)
    assert sum(1 <= p <= 10 for p in prompts) == 4
    assert sum(51 <= p <= 500 for p in prompts) == 12


def test_a_missing_histogram_without_a_fallback_names_the_flag(tmp_path: Path) -> None:
    source = FakeSource({COUNTER: [({"job": "router"}, [(995.0, 0.0), (1005.0, 3.0)])]})
    opts = options(tmp_path, 990.0, 1010.0, output_fallback=None)
    with pytest.raises(TraceFromPromError, match="give --max-tokens"):
        prom_trace.build(opts, source)


def test_a_quiet_window_is_an_error_not_an_empty_trace(tmp_path: Path) -> None:
    source = FakeSource({COUNTER: [({"job": "router"}, [(995.0, 7.0), (1005.0, 7.0)])]})
    with pytest.raises(TraceFromPromError, match=r"no request arrived.*not written"):
        prom_trace.build(options(tmp_path, 990.0, 1010.0), source)
