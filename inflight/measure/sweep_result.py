"""A closed-loop sweep's raw windows → its judged ``RunResult`` (pure), and its files (edge).

The live sweep (``inflight.bench.closedloop.run``) and the simulated one
(``inflight.sim.closed_loop``) both end here, so a run is judged the same way wherever it
ran. Kept apart from the sweep so the arithmetic and the validity verdict are tested
without a network: a test builds windows by hand and checks the result files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inflight.measure.records import LevelWindow, WarmupResult
from inflight.measure.results import RunResult, dumps, write_new
from inflight.measure.stats import level_stats
from inflight.measure.table import run_table
from inflight.measure.timeline import in_window
from inflight.measure.validity import run_reasons
from inflight.statedir import TimelinePoint


def build_result(
    *,
    url: str,
    time_scale: float,
    frozen: bool,
    policy: str | None,
    created_at: str,
    command: Sequence[str],
    warmup: WarmupResult | None,
    windows: Sequence[LevelWindow],
    timeline: Sequence[TimelinePoint] = (),
    t0: float | None = None,
    extra: dict[str, Any] | None = None,
) -> RunResult:
    """Compute each level's figures in seed time and list every reason the run is invalid.

    A level's replica timeline is the union of the router's ready counts during the level
    and, when ``inflight up`` ran the stack, the ``ready`` values of its timeline.jsonl.
    """
    levels = tuple(
        level_stats(
            w,
            time_scale,
            timeline_ready=[p.ready for p in in_window(timeline, w.start_t, w.end_t)],
        )
        for w in windows
    )
    reasons = run_reasons(levels, warmup, frozen=frozen)
    start = t0 if t0 is not None else (min(w.start_t for w in windows) if windows else 0.0)
    return RunResult(
        url=url,
        time_scale=time_scale,
        frozen=frozen,
        policy=policy,
        created_at=created_at,
        command=tuple(command),
        t0=start,
        warmup=warmup,
        levels=levels,
        windows=tuple(windows),
        invalid_reasons=tuple(reasons),
        timeline=tuple(timeline),
        extra=dict(extra or {}),
    )


def write_result(
    result: RunResult, results_file: Path, summary_file: Path | None, force: bool
) -> dict[str, Any]:
    """Write the JSON (and Markdown summary); refuse existing files unless ``force``."""
    doc = result.to_json()
    write_new(results_file, dumps(doc), force)
    if summary_file is not None:
        write_new(summary_file, run_table(doc), force)
    return doc
