"""A planned open-loop request list, and its file form (JSONL): what to send, and when.

One request a line: ``{"t": 12.5, "prompt_tokens": 3000, "max_tokens": 300}``; ``t`` is the
send time in seed seconds from the run's start. Blank lines are ignored. Times must be
non-decreasing: a trace is read as the order requests are sent in, so an out-of-order line
is reported (with its line number) rather than silently sorted. An empty trace is an error.

Only :func:`read_trace` and :func:`write_trace` do I/O (:func:`parse_trace_lines` is the
reading without it); the public datasets' formats and windows are
:mod:`inflight.workload.trace_formats`; :class:`PlannedRequest` is the frozen
value the rest of the bench and the simulator use.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FIELDS = ("t", "prompt_tokens", "max_tokens")


class TraceError(ValueError):
    """A bad trace file; the message starts with "FILE:LINE: " (or "FILE: ")."""


@dataclass(frozen=True)
class PlannedRequest:
    """One request to send at seed time ``t_s`` (seconds from the run's start)."""

    t_s: float
    prompt_tokens: int
    max_tokens: int
    priority: int = 0  # x-request-priority (vLLM's: lower first; optional "priority")
    # The prompt's prefix as block ids (inflight.prefix_blocks.rechunk): one id per
    # ``prefix_block_tokens`` tokens, each standing for every token up to its block's end
    # (Mooncake's hash_ids; the shared-prefix scenarios). Empty: nothing known of it.
    prefix_ids: tuple[int, ...] = ()
    prefix_block_tokens: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.t_s) and self.t_s >= 0):
            raise ValueError(f"t must be a finite number >= 0, got {self.t_s}")
        for name in ("prompt_tokens", "max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.prefix_ids and self.prefix_block_tokens < 1:
            raise ValueError("prefix ids need their block size (prefix_block_tokens >= 1)")


def _request_from(obj: Any) -> PlannedRequest:
    """One parsed JSON line to a request; ValueError says what is wrong (no FILE:LINE)."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in _FIELDS if k not in obj]
    if missing:
        raise ValueError(f"missing field(s) {', '.join(missing)}")
    extra = sorted(k for k in obj if k not in _FIELDS and k != "priority")
    if extra:
        raise ValueError(
            f"unknown field(s) {', '.join(extra)} (allowed: {', '.join(_FIELDS)}, priority)"
        )
    t = obj["t"]
    if isinstance(t, bool) or not isinstance(t, int | float):
        raise ValueError(f'"t" must be a number, got {json.dumps(t)}')
    for name in ("prompt_tokens", "max_tokens"):
        if isinstance(obj[name], bool) or not isinstance(obj[name], int):
            raise ValueError(f'"{name}" must be an integer, got {json.dumps(obj[name])}')
    priority = obj.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f'"priority" must be an integer, got {json.dumps(priority)}')
    return PlannedRequest(float(t), obj["prompt_tokens"], obj["max_tokens"], priority)


def read_trace(path: str | Path) -> list[PlannedRequest]:
    """Read a JSONL trace; every problem is a TraceError "FILE:LINE: ..."."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: cannot read the trace: {exc}") from None
    return parse_trace_lines(text.splitlines(), str(path))


def parse_trace_lines(lines: Iterable[str], path: str) -> list[PlannedRequest]:
    """The JSONL trace's lines → requests; every problem is a TraceError "PATH:LINE: ..."."""
    requests: list[PlannedRequest] = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{lineno}: bad JSON: {exc.msg}") from None
        try:
            req = _request_from(obj)
        except ValueError as exc:
            raise TraceError(f"{path}:{lineno}: {exc}") from None
        if requests and req.t_s < requests[-1].t_s:
            raise TraceError(
                f"{path}:{lineno}: t={req.t_s:g} is before the previous line's"
                f" t={requests[-1].t_s:g}; times must be non-decreasing"
            )
        requests.append(req)
    if not requests:
        raise TraceError(f"{path}: the trace has no requests")
    return requests


def write_trace(path: str | Path, requests: Iterable[PlannedRequest]) -> None:
    """Write requests as JSONL (``read_trace`` reads it back equal); refuses what it can't read."""
    items = list(requests)
    if not items:
        raise ValueError(f"{path}: refusing to write an empty trace")
    for prev, cur in itertools.pairwise(items):
        if cur.t_s < prev.t_s:
            raise ValueError(f"{path}: request times must be non-decreasing")
    lines = [
        json.dumps({"t": r.t_s, "prompt_tokens": r.prompt_tokens, "max_tokens": r.max_tokens})
        for r in items
    ]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
