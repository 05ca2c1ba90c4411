"""Result files: one JSON per run (or comparison), an optional Markdown summary.

The seed's benchmark overwrote its own result files (docs/workload.md, trap 5), so files are
created exclusively: an existing file is refused unless ``--force``, and the check runs
*before* the sweep too, so a long run is never wasted on a name that cannot be written.
Raw per-request records and router samples are kept, in seed seconds from the run's
start, so every figure can be recomputed from the file. A file may be stored gzipped
(``x.json.gz``, as the committed runs under ``results/`` are): :func:`read_json` reads
either form, so readers name ``x.json`` and never care which is on disk.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inflight.measure.records import LevelWindow, WarmupResult
from inflight.measure.run_rows import ClosedLoopRequest, RouterSampleRow, as_row, columns
from inflight.measure.stats import LevelStats
from inflight.statedir import TimelinePoint

SCHEMA_RUN = "inflight-bench-run/1"
GZ = ".gz"  # a result file stored gzipped: x.json.gz


class ResultFileExists(FileExistsError):
    """A results or summary file is already there and ``--force`` was not given."""


def check_writable(paths: Iterable[Path | None], force: bool) -> None:
    """Refuse up front: every named file must be absent (or ``force``) and its folder creatable."""
    for path in paths:
        if path is None:
            continue
        if path.exists() and not force:
            raise ResultFileExists(
                f"{path} exists; results are never overwritten: choose a new name "
                "(put the date in it) or pass --force"
            )
        if path.exists() and path.is_dir():
            raise ResultFileExists(f"{path} is a directory, not a results file")


def new_out_dir(out: Path, what: str, force: bool) -> Path:
    """Create ``--out-dir`` ``out``; refuse one that holds anything unless ``force``.

    ``what`` names what would be overwritten ("results", "comparisons").
    """
    if out.exists() and any(out.iterdir()) and not force:
        raise ResultFileExists(
            f"--out-dir {out} exists and is not empty; {what} are never overwritten: "
            "choose a new folder (put the date in it) or pass --force"
        )
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_new(path: Path, text: str, force: bool) -> Path:
    """Write ``text`` to ``path`` (gzipped when its name ends in ``.gz``); refuse an existing
    file unless ``force`` (atomic either way)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8")
    if path.name.endswith(GZ):
        data = gzip.compress(data, compresslevel=9, mtime=0)  # same text, same bytes
    if not force:
        try:
            with path.open("xb") as fh:
                fh.write(data)
        except FileExistsError as exc:
            raise ResultFileExists(
                f"{path} exists; results are never overwritten: choose a new name or pass --force"
            ) from exc
        return path
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class RunResult:
    """A whole sweep: configuration, per-level figures, validity and the raw data."""

    url: str
    time_scale: float
    frozen: bool
    policy: str | None
    created_at: str  # ISO 8601, UTC
    command: tuple[str, ...]
    t0: float  # unix seconds: zero of every relative time in the file
    warmup: WarmupResult | None
    levels: tuple[LevelStats, ...]
    windows: tuple[LevelWindow, ...]
    invalid_reasons: tuple[str, ...]
    timeline: tuple[TimelinePoint, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. stack CPU, scenario phases

    @property
    def valid(self) -> bool:
        return not self.invalid_reasons

    def to_json(self) -> dict[str, Any]:
        s = self.time_scale

        def rel(t: float) -> float:
            return round((t - self.t0) / s, 4)

        requests = [
            as_row(
                ClosedLoopRequest(
                    concurrency=w.concurrency,
                    start_s=rel(r.start_t),
                    end_s=rel(r.end_t),
                    ttft_s=None if r.ttft_s is None else round(r.ttft_s / s, 4),
                    output_tokens=r.output_tokens,
                    ok=r.ok,
                    error=r.error,
                )
            )
            for w in self.windows
            for r in w.records
        ]
        samples = sorted(
            {(x.t, x.inflight, x.queued, x.ready) for w in self.windows for x in w.samples}
        )
        return {
            "schema": SCHEMA_RUN,
            "created_at": self.created_at,
            "command": list(self.command),
            "url": self.url,
            "policy": self.policy,
            "time_scale": s,
            "units": "seed time: wall seconds / time_scale; rates per seed second",
            "frozen": self.frozen,
            "valid": self.valid,
            "invalid_reasons": list(self.invalid_reasons),
            "t0_unix": self.t0,
            "warmup": None if self.warmup is None else dataclasses.asdict(self.warmup),
            "levels": [
                {**dataclasses.asdict(lv), "replicas": list(lv.replicas)} for lv in self.levels
            ],
            "requests_columns": columns(ClosedLoopRequest),
            "requests": requests,
            "router_samples_columns": columns(RouterSampleRow),
            "router_samples": [[rel(t), i, q, r] for t, i, q, r in samples],
            "timeline_columns": ["t_s", "desired", "ready"],
            "timeline": [[rel(p.t), p.desired, p.ready] for p in self.timeline],
            **self.extra,
        }


def dumps(obj: dict[str, Any]) -> str:
    """JSON text; non-finite floats (an infinite Little's Law error) become null."""
    return json.dumps(sanitize(obj), indent=1, allow_nan=False) + "\n"


def finite(x: float | None) -> float | None:
    """JSON has no infinity: an infinite Little's Law error is written as null."""
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return None
    return x


def sanitize(obj: Any) -> Any:
    """Replace non-finite floats by None, recursively (JSON forbids them)."""
    if isinstance(obj, float):
        return finite(obj)
    if isinstance(obj, dict):
        return {k: sanitize(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [sanitize(v) for v in obj]
    return obj


def stored_path(path: Path | str) -> Path:
    """The file that holds ``path``'s JSON: ``path`` itself when it exists, else its other form
    (``x.json`` ↔ ``x.json.gz``) when that one does; else ``path`` (so reading it says what is
    missing)."""
    p = Path(path)
    if p.exists():
        return p
    other = p.with_name(p.name[: -len(GZ)]) if p.name.endswith(GZ) else p.with_name(p.name + GZ)
    return other if other.exists() else p


def read_json(path: Path | str) -> Any:
    """A result file's JSON, from ``x.json`` or gzipped ``x.json.gz``; naming either form finds
    the other when the named one is missing. Errors: ``OSError`` (missing, unreadable, a bad
    gzip stream), ``EOFError`` (a truncated one), ``ValueError`` (not JSON)."""
    p = stored_path(path)
    if p.name.endswith(GZ):
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            return json.load(fh)
    return json.loads(p.read_text(encoding="utf-8"))


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = read_json(path)
    return data


def distinct(values: Sequence[int]) -> list[int]:
    return sorted(set(values))
