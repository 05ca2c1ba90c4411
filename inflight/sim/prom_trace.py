"""``inflight sim trace-from-prometheus``: a deployment's own Prometheus history → a trace.

Reads, over ``--start`` … ``--end``, the raw samples of the router's request counter
(``router_requests_received_total{--selector}``) and, where present, vLLM's token histograms
(``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``, matched by
``--vllm-selector``; the emulator exports them too), and writes a JSONL trace
(``inflight/workload/trace.py``'s format) that ``inflight bench run --trace`` and
``inflight sim run --trace`` replay. The arithmetic —
exact counts per scrape interval, resets, arrivals as a Poisson stream conditioned on each
interval's count, lengths from histogram buckets — is the pure :mod:`inflight.sim.trace_rebuild`;
this module is the I/O: flags, PromQL through ``prometheus-api-client`` (blocking, offline),
the output file.

Raw samples, not ``rate()``/``increase()``: a range selector evaluated at ``t`` returns every
sample in ``(t − d, t]`` with its scrape timestamp, so successive chunks never overlap and
each interval between two scrapes is known exactly. The fetch reaches ``LOOKBACK_S`` before
``--start`` (the sample before the window bounds its first interval) and after ``--end``.

``vllm:request_generation_tokens`` (tokens a request actually generated) becomes the trace's
``max_tokens``: replayed on the emulator, which generates ``max_tokens`` tokens, it gives the
work the requests really did; ``vllm:request_params_max_tokens`` (the caps clients asked for)
would overstate it for requests that stopped early.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inflight import extras, names

PROG = "inflight sim trace-from-prometheus"
COUNTER = names.ROUTER_REQUESTS_RECEIVED
# vLLM's (and the emulator's) tokens per finished request
PROMPT_HISTOGRAM = names.VLLM_REQUEST_PROMPT_TOKENS
OUTPUT_HISTOGRAM = names.VLLM_REQUEST_GENERATION_TOKENS
LOOKBACK_S = 300.0  # Prometheus' default lookback delta: the sample before/after the window
CHUNK_S = 3600  # one range selector reads at most this much history
TIME_FORMS = "RFC 3339 (2026-12-01T16:00:00Z, or with an offset) or unix seconds"

Series = dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]


class TraceFromPromError(Exception):
    """Prometheus could not give a trace; the message says why and what to check."""


# --- flags ---------------------------------------------------------------------------------
def parse_time(text: str, flag: str) -> float:
    """``--start``/``--end``: RFC 3339 with a zone, or unix seconds → unix seconds.

    >>> parse_time("1764604800", "--start"), parse_time("2025-12-01T16:00:00Z", "--start")
    (1764604800.0, 1764604800.0)
    """
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{flag}: expected {TIME_FORMS}, got {text!r}")
        return value
    iso = text.strip()
    if iso[-1:] in ("Z", "z"):
        iso = iso[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        raise ValueError(f"{flag}: expected {TIME_FORMS}, got {text!r}") from None
    if moment.tzinfo is None:
        raise ValueError(
            f"{flag}: RFC 3339 needs a time zone (Z or ±HH:MM), got {text!r}: "
            "a local time would depend on this machine's zone"
        )
    return moment.timestamp()


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "trace-from-prometheus",
        help="turn a deployment's Prometheus history into a replayable JSONL trace",
        description=(
            "Arrival times from the router's request counter (exact counts per scrape "
            "interval, placed as a Poisson stream within each), lengths from vLLM's token "
            "histograms where Prometheus has them, else from --prompt-tokens/--max-tokens."
        ),
    )
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="Prometheus base URL, e.g. http://prom:9090")
    p.add_argument(
        "--selector",
        default="",
        help=f'label matchers for {COUNTER}, e.g. job="router",namespace="llm" (default: all)',
    )
    p.add_argument(
        "--vllm-selector",
        default="",
        help=f"label matchers for {PROMPT_HISTOGRAM} and {OUTPUT_HISTOGRAM} (default: all)",
    )
    p.add_argument("--start", required=True, help=f"window start: {TIME_FORMS}")
    p.add_argument("--end", required=True, help=f"window end: {TIME_FORMS}")
    p.add_argument("--out", required=True, type=Path, help="the trace to write (never replaced)")
    p.add_argument(
        "--prompt-tokens",
        default=None,
        help=f"N | lognormal:MEAN:SIGMA | uniform:A:B, used when {PROMPT_HISTOGRAM} has no "
        "observations in the window",
    )
    p.add_argument(
        "--max-tokens",
        default=None,
        help=f"N | lognormal:MEAN:SIGMA | uniform:A:B, used when {OUTPUT_HISTOGRAM} has no "
        "observations in the window",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of every random draw (default 0)")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per seed second of the recorded stack (its --time-scale; default 1)",
    )
    p.add_argument("--timeout-s", type=float, default=30.0, help="per-query timeout (default 30 s)")


@dataclass(frozen=True)
class Options:
    """The validated flags."""

    url: str
    selector: str
    vllm_selector: str
    start_s: float
    end_s: float
    out: Path
    prompt_fallback: Callable[[random.Random], int] | None
    output_fallback: Callable[[random.Random], int] | None
    seed: int
    time_scale: float
    timeout_s: float


def options_from_args(args: argparse.Namespace) -> Options:
    """Validate the flags; ValueError naming the flag."""
    from external_scaler.errors import MetadataError
    from external_scaler.selector import ACCEPTED_FORM, parse_selector
    from inflight.workload.lengths import parse_length

    selectors = {}
    for flag, text in (("--selector", args.selector), ("--vllm-selector", args.vllm_selector)):
        try:
            selectors[flag] = parse_selector(flag, text)
        except MetadataError as exc:
            detail = f": {exc.detail}" if exc.detail else ""
            raise ValueError(f"{flag}: {text!r}{detail}; expected {ACCEPTED_FORM}") from None
    start_s = parse_time(args.start, "--start")
    end_s = parse_time(args.end, "--end")
    if not end_s > start_s:
        raise ValueError(f"--end ({args.end}) must be after --start ({args.start})")
    if not args.url.startswith(("http://", "https://")):
        raise ValueError(f"--url: expected http://HOST:PORT or https://…, got {args.url!r}")
    if not (math.isfinite(args.time_scale) and args.time_scale > 0):
        raise ValueError(f"--time-scale: must be > 0, got {args.time_scale}")
    if not args.timeout_s > 0:
        raise ValueError(f"--timeout-s: must be > 0, got {args.timeout_s}")
    if args.out.exists():
        raise ValueError(f"--out: {args.out} exists; a trace is never overwritten")
    fallbacks = []
    for flag, text in (("--prompt-tokens", args.prompt_tokens), ("--max-tokens", args.max_tokens)):
        fallbacks.append(None if text is None else parse_length(text, flag).sample)
    return Options(
        url=args.url.rstrip("/"),
        selector=selectors["--selector"],
        vllm_selector=selectors["--vllm-selector"],
        start_s=start_s,
        end_s=end_s,
        out=args.out,
        prompt_fallback=fallbacks[0],
        output_fallback=fallbacks[1],
        seed=args.seed,
        time_scale=args.time_scale,
        timeout_s=args.timeout_s,
    )


# --- Prometheus ----------------------------------------------------------------------------
class Source:
    """Raw samples from one Prometheus, through ``prometheus-api-client``."""

    def __init__(self, url: str, timeout_s: float) -> None:
        from prometheus_api_client import PrometheusConnect, prometheus_connect

        self.url = url
        # Two quick retries, not the client's default 3 with 1 s back-off: a refused
        # connection is an answer, not something to wait out. (Its own Retry class, urllib3's,
        # so this module imports nothing the sim extra does not declare.)
        retry = prometheus_connect.Retry(
            total=2, backoff_factor=0.1, status_forcelist=(502, 503, 504)
        )
        self.client = PrometheusConnect(url=url, retry=retry, timeout=timeout_s)

    def close(self) -> None:
        self.client.close()

    def instant(self, query: str, at_s: float) -> list[dict[str, Any]]:
        from prometheus_api_client import PrometheusApiClientException

        try:
            result: list[dict[str, Any]] = self.client.custom_query(
                query, params={"time": f"{at_s:.3f}"}
            )
        except PrometheusApiClientException as exc:
            raise TraceFromPromError(
                f"Prometheus at {self.url} refused the query {query!r}: {exc}"
            ) from None
        except OSError as exc:  # requests' errors are OSErrors: refused, timed out, DNS
            raise TraceFromPromError(f"cannot reach Prometheus at {self.url}: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:  # not Prometheus' JSON
            raise TraceFromPromError(
                f"{self.url} did not answer like Prometheus' HTTP API: {exc}"
            ) from None
        return result

    def samples(self, selector_expr: str, start_s: float, end_s: float) -> Series:
        """Every raw sample of ``selector_expr`` in ``(start_s, end_s]``, per series (labels
        without ``__name__``), in time order; read in chunks of ``CHUNK_S``."""
        out: Series = {}
        at = end_s
        chunks: list[tuple[float, float]] = []
        while at > start_s:
            width = min(CHUNK_S, at - start_s)
            chunks.append((at, width))
            at -= width
        for at_s, width_s in reversed(chunks):
            query = f"{selector_expr}[{max(1, math.ceil(width_s * 1000))}ms]"
            for item in self.instant(query, at_s):
                labels = tuple(sorted((k, v) for k, v in item["metric"].items() if k != "__name__"))
                values = [(float(t), float(v)) for t, v in item.get("values", [])]
                # a chunk boundary rounded to ms: keep only samples after what we have
                have = out.setdefault(labels, [])
                last = have[-1][0] if have else -math.inf
                have.extend((t, v) for t, v in values if t > last)
        return out


def _selector_expr(metric: str, selector: str) -> str:
    # a metric name with a colon is fine bare; the matchers were validated and re-quoted
    return f"{metric}{{{selector}}}" if selector else metric


def counter_series(source: Source, opts: Options) -> Series:
    expr = _selector_expr(COUNTER, opts.selector)
    series = source.samples(expr, opts.start_s - LOOKBACK_S, opts.end_s + LOOKBACK_S)
    if not series:
        raise TraceFromPromError(
            f"no series {expr} on {opts.url} between {_iso(opts.start_s)} and "
            f"{_iso(opts.end_s)}: is the router scraped then, and does --selector match "
            f"its labels?{_known_jobs(source, opts)}"
        )
    return series


def _known_jobs(source: Source, opts: Options) -> str:
    """A hint: the jobs that do have the counter in the window."""
    window = max(1, math.ceil(opts.end_s - opts.start_s + LOOKBACK_S))
    try:
        found = source.instant(f"count by (job) (last_over_time({COUNTER}[{window}s]))", opts.end_s)
    except TraceFromPromError:
        return ""
    jobs = sorted(str(item["metric"].get("job", "")) for item in found)
    if not jobs:
        return f" (no {COUNTER} series at all in that window)"
    return f" (jobs with {COUNTER} then: {', '.join(repr(j) for j in jobs)})"


def histogram_buckets(source: Source, metric: str, opts: Options) -> tuple[list[Any], float]:
    """The buckets (``inflight.sim.trace_rebuild.Bucket``) of ``metric``'s histograms over the
    window,
    every series its own layout; and the number of observations in them."""
    from inflight.sim import trace_rebuild as tr

    expr = _selector_expr(f"{metric}_bucket", opts.vllm_selector)
    series = source.samples(expr, opts.start_s - LOOKBACK_S, opts.end_s + LOOKBACK_S)
    histograms: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    for labels, samples in series.items():
        le = dict(labels).get("le")
        if le is None:
            continue
        bound = math.inf if le == "+Inf" else float(le)
        rest = tuple(kv for kv in labels if kv[0] != "le")
        intervals = tr.counter_intervals(samples).intervals
        histograms.setdefault(rest, {})[bound] = tr.overlap_count(
            intervals, opts.start_s, opts.end_s
        )
    buckets = [b for cumulative in histograms.values() for b in tr.histogram_buckets(cumulative)]
    return buckets, sum(b.weight for b in buckets)


def _iso(t_s: float) -> str:
    return datetime.fromtimestamp(t_s, UTC).isoformat().replace("+00:00", "Z")


# --- the command ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Summary:
    requests: int
    series: int
    resets: int
    unplaced: int
    largest_gap_s: float
    prompt_from: str
    output_from: str


def build(opts: Options, source: Source) -> tuple[list[Any], Summary]:
    """The trace's requests (``inflight.workload.trace.PlannedRequest``) and what they came from."""
    from inflight.sim import trace_rebuild as tr
    from inflight.workload.trace import PlannedRequest

    series = counter_series(source, opts)
    ordered = [series[k] for k in sorted(series)]
    cut = [tr.counter_intervals(s) for s in ordered]
    lengths = []
    sources = []
    for metric, fallback, flag in (
        (PROMPT_HISTOGRAM, opts.prompt_fallback, "--prompt-tokens"),
        (OUTPUT_HISTOGRAM, opts.output_fallback, "--max-tokens"),
    ):
        buckets, observed = histogram_buckets(source, metric, opts)
        if observed > 0:
            lengths.append(tr.Lengths(buckets=tuple(buckets)))
            sources.append(f"{metric} ({observed:.0f} observations)")
        elif fallback is not None:
            lengths.append(tr.Lengths(sample=fallback))
            sources.append(flag)
        else:
            raise TraceFromPromError(
                f"{metric} has no observations matching --vllm-selector in the window "
                f"(no vLLM scraped, or another exporter); give {flag} "
                "(N | lognormal:MEAN:SIGMA | uniform:A:B)"
            )
    try:
        rebuilt = tr.rebuild(
            ordered, opts.start_s, opts.end_s, lengths[0], lengths[1], opts.seed, opts.time_scale
        )
    except tr.NoArrivals as exc:
        raise TraceFromPromError(
            f"{exc}: {_selector_expr(COUNTER, opts.selector)} did not increase between "
            f"{_iso(opts.start_s)} and {_iso(opts.end_s)} ({len(series)} series); an empty "
            "trace is not written"
        ) from None
    requests = [PlannedRequest(t_s=t, prompt_tokens=p, max_tokens=m) for t, p, m in rebuilt.rows]
    gaps = [b[0] - a[0] for s in ordered for a, b in itertools.pairwise(s)]
    summary = Summary(
        requests=len(requests),
        series=len(series),
        resets=sum(c.resets for c in cut),
        # a series first scraped inside the window: what it counted before is not placed
        unplaced=sum(
            c.baseline for c, s in zip(cut, ordered, strict=True) if s[0][0] > opts.start_s
        ),
        largest_gap_s=max(gaps, default=0.0),
        prompt_from=sources[0],
        output_from=sources[1],
    )
    return requests, summary


def write_new(path: Path, requests: Sequence[Any]) -> None:
    """Write the trace to ``path``, which must not exist (checked again atomically: the file
    is written beside it and linked into place, which fails if ``path`` appeared)."""
    from inflight.workload.trace import write_trace

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write_trace(tmp, requests)
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise TraceFromPromError(
                f"--out: {path} exists; a trace is never overwritten"
            ) from None
    finally:
        tmp.unlink(missing_ok=True)


def run(args: argparse.Namespace) -> int:
    missing = extras.require("sim", PROG)
    if missing is not None:
        return missing
    try:
        opts = options_from_args(args)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    from inflight.sim.trace_rebuild import RebuildError

    source = Source(opts.url, opts.timeout_s)
    try:
        requests, summary = build(opts, source)
        write_new(opts.out, requests)
    except (TraceFromPromError, RebuildError) as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    finally:
        source.close()
    span_s = (opts.end_s - opts.start_s) / opts.time_scale
    lines = [
        f"wrote {summary.requests} requests over {span_s:.1f} seed s "
        f"({summary.requests / span_s:.3f} req/s) to {opts.out}",
        f"  arrivals: {summary.series} series of {COUNTER}, {summary.resets} counter "
        f"reset(s), largest gap between samples {summary.largest_gap_s:.1f} s",
        f"  prompt_tokens from {summary.prompt_from}; max_tokens from {summary.output_from}",
    ]
    if summary.unplaced:
        lines.append(
            f"  not placed: {summary.unplaced} requests counted by a series before its first "
            "scrape in the window (when they arrived is unknown; increase() ignores them too)"
        )
    print("\n".join(lines))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command alone (tests; the lead wires it under ``inflight sim``)."""
    parser = argparse.ArgumentParser(prog=PROG)
    add_arguments(parser)
    return run(parser.parse_args(argv))
