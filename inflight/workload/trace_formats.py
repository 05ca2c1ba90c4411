"""Traces in the public datasets' own formats, and a window of one (issue #24, item 2).

``--trace FILE`` reads three formats, told apart by the file's first non-blank line:

* **inflight JSONL** (:mod:`inflight.workload.trace`): ``{"t": seed_s, "prompt_tokens": n,
  "max_tokens": n}`` a line.
* **Azure LLM inference trace** (2023: ``AzureLLMInferenceTrace_conv.csv`` and ``_code.csv``
  in ``Azure/AzurePublicDataset``, CC-BY 4.0; the 2024 week-long files share it): CSV with the
  header ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is a date and time,
  ``2023-11-16 18:17:03.9799600`` (any number of fractional digits), read as seconds.
  ContextTokens → ``prompt_tokens``, GeneratedTokens → ``max_tokens``.
* **Mooncake JSONL** (``kvcache-ai/Mooncake``, ``FAST25-release/traces/*.jsonl``):
  ``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`` a line;
  ``timestamp`` is in milliseconds; ``hash_ids`` (optional) are the prompt's blocks of
  :data:`MOONCAKE_BLOCK_TOKENS` tokens as published, equal ids for equal prefixes: each
  request carries them (``PlannedRequest.prefix_ids``) for the simulator's prefix cache
  (``inflight.prefix_blocks.rechunk``); other fields are ignored.

A name ending ``.gz`` is read through gzip. Time 0 is the file's earliest request (an
inflight trace's times are already seconds from the run's start: there, 0). The two
public formats are sorted by time if a line is out of order (counted in the meta: a
production log is not always in order), and a length of 0 is raised to 1 (the replica
needs one token; counted too); the inflight format stays strict (its own reader). Every
error is a :class:`TraceError` that starts ``FILE:LINE:`` and names the field.

**The window** (:class:`TraceWindow`, flags ``--trace-start-s``, ``--trace-duration-s``,
``--trace-rate-scale``): the requests with ``start ≤ t < start + duration`` (seconds of the
trace), moved so ``start`` is 0, then every time divided by the rate scale (2 = the same
requests twice as fast; lengths unchanged). The traffic ends at ``duration ÷ scale`` when a
duration is given (quiet at the window's end is part of it), else at the last request.

**The warm-up** (``TraceWindow.warmup_s``, flag ``--trace-warmup-s`` of ``inflight sim``): a
window cut from the middle of a trace follows traffic that a deployed autoscaler would have
been running on. The ``warmup_s`` seconds of the trace before ``start`` (fewer when the
window starts earlier: ``min(warmup_s, start)``) come back apart, as
:attr:`LoadedTrace.warmup` (times from the warm-up's own start, scaled alike, lasting
:attr:`LoadedTrace.warmup_s`): the simulator replays them before the window, unmeasured, so
every policy and every fixed fleet enters the window in the state that traffic left it in
(``inflight.sim.core.simulate``). The window's own requests are the same with or without it.

Only :func:`load_trace` does I/O; the parsers take lines.
"""

from __future__ import annotations

import csv
import gzip
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from inflight.workload.trace import PlannedRequest, TraceError, parse_trace_lines

INFLIGHT, AZURE, MOONCAKE = "inflight", "azure", "mooncake"
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
MOONCAKE_BLOCK_TOKENS = 512  # tokens a hash_ids block stands for (Mooncake's traces' README)
_STAMP = re.compile(
    r"^(?P<dt>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?(?P<z>Z|[+-]00:?00)?$"
)


@dataclass(frozen=True)
class Row:
    """One request of a public trace: seconds from the file's first request, lengths as
    in the file, and the line it came from."""

    t_s: float
    prompt_tokens: int
    max_tokens: int
    line: int
    prefix_ids: tuple[int, ...] = ()  # the prompt's block ids (Mooncake's hash_ids)
    prefix_block_tokens: int = 0  # tokens an id stands for


@dataclass(frozen=True)
class TraceWindow:
    """Which part of a trace to replay, and how fast (module docstring)."""

    start_s: float = 0.0
    duration_s: float | None = None
    rate_scale: float = 1.0
    warmup_s: float = 0.0  # seconds of the trace before start_s replayed first (module doc)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.start_s) and self.start_s >= 0):
            raise ValueError(f"--trace-start-s: must be >= 0, got {self.start_s}")
        if self.duration_s is not None and not (
            math.isfinite(self.duration_s) and self.duration_s > 0
        ):
            raise ValueError(f"--trace-duration-s: must be > 0, got {self.duration_s}")
        if not (math.isfinite(self.rate_scale) and self.rate_scale > 0):
            raise ValueError(f"--trace-rate-scale: must be > 0, got {self.rate_scale}")
        if not (math.isfinite(self.warmup_s) and self.warmup_s >= 0):
            raise ValueError(f"--trace-warmup-s: must be >= 0, got {self.warmup_s}")

    @property
    def is_whole(self) -> bool:
        return self.start_s == 0 and self.duration_s is None and self.rate_scale == 1

    @property
    def warmup_span_s(self) -> float:
        """Seconds of the trace replayed before the window: ``warmup_s``, at most ``start_s``."""
        return min(self.warmup_s, self.start_s)


@dataclass(frozen=True)
class LoadedTrace:
    """A trace file, windowed: the requests to send, the traffic's end and what was read."""

    requests: tuple[PlannedRequest, ...]
    end_s: float
    meta: dict[str, Any]
    # The warm-up (module docstring): the requests of the trace's ``warmup_s`` before the
    # window, times from the warm-up's start; it lasts ``warmup_s`` seed s (scaled).
    warmup: tuple[PlannedRequest, ...] = ()
    warmup_s: float = 0.0


def detect_format(first_line: str, where: str) -> str:
    """:data:`INFLIGHT`, :data:`AZURE` or :data:`MOONCAKE` from the first non-blank line."""
    text = first_line.lstrip("\ufeff").strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: bad JSON: {exc.msg}") from None
        if isinstance(obj, dict) and "t" in obj:
            return INFLIGHT
        if isinstance(obj, dict) and "timestamp" in obj:
            return MOONCAKE
        keys = ", ".join(sorted(obj)) if isinstance(obj, dict) else type(obj).__name__
        raise TraceError(
            f'{where}: not a known JSONL trace: expected {{"t", "prompt_tokens", "max_tokens"}}'
            f" (inflight) or {{{', '.join(MOONCAKE_FIELDS)}}} (Mooncake), got {keys}"
        )
    header = [c.strip() for c in next(csv.reader([text]))]
    if "TIMESTAMP" in header:
        return AZURE
    raise TraceError(
        f"{where}: not a known trace: expected a JSONL line (inflight or Mooncake) or the Azure"
        f" CSV header {','.join(AZURE_COLUMNS)}, got {text[:60]!r}"
    )


def _count(value: Any, where: str, field: str) -> int:
    """A token count: an integer >= 0 (a JSON number or CSV text)."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise TraceError(f"{where}: {field} must be an integer, got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(f"{where}: {field} must be an integer, got {json.dumps(value)}")
    if value < 0:
        raise TraceError(f"{where}: {field} must be >= 0, got {value}")
    return value


def _azure_time(text: str, where: str) -> tuple[datetime, float]:
    """``2023-11-16 18:17:03.9799600`` → (whole seconds, fraction); UTC or no zone."""
    m = _STAMP.match(text.strip())
    if m is None:
        raise TraceError(
            f"{where}: TIMESTAMP must look like 2023-11-16 18:17:03.9799600, got {text!r}"
        )
    try:
        whole = datetime.strptime(m["dt"].replace("T", " "), "%Y-%m-%d %H:%M:%S")
    except ValueError as exc:
        raise TraceError(f"{where}: TIMESTAMP {text!r}: {exc}") from None
    frac = float(f"0.{m['frac']}") if m["frac"] else 0.0
    return whole, frac


def parse_azure(lines: Iterable[str], path: str) -> list[Row]:
    """The Azure LLM inference CSV (header first) → rows, t from the first row."""
    rows: list[Row] = []
    columns: dict[str, int] | None = None
    width = 0
    origin: tuple[datetime, float] | None = None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        cells = next(csv.reader([line.lstrip("\ufeff")]))
        if columns is None:
            header = [c.strip() for c in cells]
            missing = [c for c in AZURE_COLUMNS if c not in header]
            if missing:
                raise TraceError(
                    f"{path}:{lineno}: the Azure CSV header lacks {', '.join(missing)}"
                    f" (expected {','.join(AZURE_COLUMNS)}, got {','.join(header)})"
                )
            columns = {c: header.index(c) for c in AZURE_COLUMNS}
            width = len(header)
            continue
        where = f"{path}:{lineno}"
        if len(cells) != width:
            raise TraceError(f"{where}: expected {width} fields, got {len(cells)}")
        whole, frac = _azure_time(cells[columns["TIMESTAMP"]], where)
        if origin is None:
            origin = (whole, frac)
        t = (whole - origin[0]).total_seconds() + (frac - origin[1])
        rows.append(
            Row(
                t,
                _count(cells[columns["ContextTokens"]], where, "ContextTokens"),
                _count(cells[columns["GeneratedTokens"]], where, "GeneratedTokens"),
                lineno,
            )
        )
    return rows


def parse_mooncake(lines: Iterable[str], path: str) -> list[Row]:
    """Mooncake JSONL (``timestamp`` in ms) → rows, t from the first line."""
    rows: list[Row] = []
    origin_ms: float | None = None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{where}: bad JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise TraceError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        missing = [k for k in MOONCAKE_FIELDS if k not in obj]
        if missing:
            raise TraceError(f"{where}: missing field(s) {', '.join(missing)}")
        ts = obj["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
            raise TraceError(f"{where}: timestamp must be a number (ms), got {json.dumps(ts)}")
        if origin_ms is None:
            origin_ms = float(ts)
        ids = _hash_ids(obj.get("hash_ids", []), where)
        rows.append(
            Row(
                (float(ts) - origin_ms) / 1000.0,
                _count(obj["input_length"], where, "input_length"),
                _count(obj["output_length"], where, "output_length"),
                lineno,
                ids,
                MOONCAKE_BLOCK_TOKENS if ids else 0,
            )
        )
    return rows


def _hash_ids(value: Any, where: str) -> tuple[int, ...]:
    """Mooncake's ``hash_ids``: a list of integers (absent: none)."""
    if not isinstance(value, list) or any(
        isinstance(v, bool) or not isinstance(v, int) for v in value
    ):
        raise TraceError(f"{where}: hash_ids must be a list of integers, got {json.dumps(value)}")
    return tuple(value)


def out_of_order(rows: Sequence[Row]) -> int:
    """Lines earlier than a line above them."""
    count, latest = 0, -math.inf
    for r in rows:
        count += r.t_s < latest
        latest = max(latest, r.t_s)
    return count


def window_rows(
    rows: Sequence[Row], window: TraceWindow, path: str, origin_s: float | None = None
) -> tuple[list[PlannedRequest], float, dict[str, Any]]:
    """Order, window and scale the rows (module docstring); the requests, the traffic's end
    (seed s) and the counts for the meta. ``origin_s``: the trace's time 0 (None: its
    earliest request; an inflight trace's times are already seconds from the start: 0)."""
    requests, end_s, counts, _ = window_and_warmup(rows, window, path, origin_s)
    return requests, end_s, counts


def window_and_warmup(
    rows: Sequence[Row], window: TraceWindow, path: str, origin_s: float | None = None
) -> tuple[list[PlannedRequest], float, dict[str, Any], list[PlannedRequest]]:
    """:func:`window_rows`, and the warm-up's requests: those with ``start − warmup ≤ t <
    start`` (``warmup`` = ``window.warmup_span_s``), times from the warm-up's start, divided
    by the rate scale as the window's are."""
    if not rows:
        raise TraceError(f"{path}: the trace has no requests")
    ordered = sorted(rows, key=lambda r: r.t_s)  # stable: ties keep the file's order
    origin = ordered[0].t_s if origin_s is None else origin_s
    span = ordered[-1].t_s - origin
    lo = window.start_s
    hi = math.inf if window.duration_s is None else lo + window.duration_s
    inside = [r for r in ordered if lo <= r.t_s - origin < hi]
    if not inside:
        raise TraceError(
            f"{path}: no request in the window [{lo:g}, {hi:g}) s of the trace "
            f"(it spans 0 to {span:g} s)"
        )
    warm_lo = lo - window.warmup_span_s
    before = [r for r in ordered if warm_lo <= r.t_s - origin < lo] if warm_lo < lo else []
    raised = 0

    def planned(r: Row, zero_s: float) -> PlannedRequest:
        nonlocal raised
        raised += (r.prompt_tokens < 1) + (r.max_tokens < 1)
        return PlannedRequest(
            (r.t_s - origin - zero_s) / window.rate_scale,
            max(1, r.prompt_tokens),
            max(1, r.max_tokens),
            prefix_ids=r.prefix_ids,
            prefix_block_tokens=r.prefix_block_tokens,
        )

    requests = [planned(r, lo) for r in inside]
    warmup = [planned(r, warm_lo) for r in before]
    end_s = requests[-1].t_s if window.duration_s is None else window.duration_s / window.rate_scale
    counts = {
        "trace_requests_in_file": len(rows),
        "trace_span_s": span,
        "trace_reordered": out_of_order(rows),
        "trace_lengths_raised_to_1": raised,
    }
    with_ids = sum(1 for r in rows if r.prefix_ids)
    if with_ids:
        counts["trace_requests_with_prefix_ids"] = with_ids
    return requests, end_s, counts, warmup


def _lines(path: Path) -> list[str]:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None


def load_trace(path: str | Path, window: TraceWindow | None = None) -> LoadedTrace:
    """Read ``path`` in whichever format it is, then apply ``window``; TraceError names the
    file, the line and the field."""
    path = Path(path)
    window = window or TraceWindow()
    lines = _lines(path)
    first = next(((i, line) for i, line in enumerate(lines, 1) if line.strip()), None)
    if first is None:
        raise TraceError(f"{path}: the trace has no requests")
    fmt = detect_format(first[1], f"{path}:{first[0]}")
    requests: list[PlannedRequest]
    counts: dict[str, Any]
    warmup: list[PlannedRequest] = []
    if fmt == INFLIGHT:
        planned = parse_trace_lines(lines, str(path))
        if window.is_whole:  # unchanged: the file's own times and end
            requests, end_s, counts = planned, planned[-1].t_s, {}
        else:
            rows = [Row(r.t_s, r.prompt_tokens, r.max_tokens, 0) for r in planned]
            requests, end_s, counts, warmup = window_and_warmup(
                rows, window, str(path), origin_s=0.0
            )
    else:
        parse = parse_azure if fmt == AZURE else parse_mooncake
        requests, end_s, counts, warmup = window_and_warmup(
            parse(lines, str(path)), window, str(path)
        )
    meta: dict[str, Any] = {"trace": str(path), "trace_format": fmt}
    if not window.is_whole:
        meta["trace_window"] = {
            "start_s": window.start_s,
            "duration_s": window.duration_s,
            "rate_scale": window.rate_scale,
        }
    warmup_s = window.warmup_span_s / window.rate_scale
    if warmup_s > 0:
        meta["trace_warmup"] = {
            "start_s": window.start_s - window.warmup_span_s,
            "duration_s": window.warmup_span_s,
            "requests": len(warmup),
        }
    meta.update(counts)
    return LoadedTrace(tuple(requests), end_s, meta, tuple(warmup), warmup_s)
