"""Frozen records passed between the bench's layers.

Times are unix seconds of the bench machine's wall clock (``time.time()``), so they line up
with ``timeline.jsonl`` of ``inflight up`` and with router samples. Durations and rates that
leave this package (results files, tables, plots) are converted to *seed time*: wall
seconds divided by the time-scale the stack ran at (see ``stats.seed_s``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """One request as the client saw it (wall clock, unix seconds)."""

    start_t: float
    end_t: float
    first_token_t: float | None  # arrival of the first SSE data event; None if none came
    output_tokens: int
    ok: bool
    error: str = ""

    @property
    def latency_s(self) -> float:
        return self.end_t - self.start_t

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_t is None else self.first_token_t - self.start_t


@dataclass(frozen=True)
class RouterSample:
    """One poll of the router's ``GET /router/status`` (unix seconds)."""

    t: float
    inflight: int  # L at the router, held requests included
    queued: int  # held at the router, not yet dispatched
    ready: int  # endpoints in state "ready": the replica count that served


@dataclass(frozen=True)
class LevelWindow:
    """What was measured during one closed-loop level: raw, in wall time."""

    concurrency: int
    start_t: float
    end_t: float
    records: tuple[RequestRecord, ...]
    samples: tuple[RouterSample, ...]
    cpu_loadgen_s: float = 0.0  # CPU seconds the bench process used during the level
    cpu_machine_busy: float | None = None  # fraction of all cores busy, 0..1


@dataclass(frozen=True)
class WarmupResult:
    """The unmeasured warm-up: it must finish (every request OK) for the run to be valid."""

    requested: int
    completed: int  # finished OK
    failed: int
    finished: bool  # all requested completed before the deadline

    @property
    def reason(self) -> str | None:
        if self.finished and self.completed == self.requested:
            return None
        return (
            f"warm-up did not finish: {self.completed} of {self.requested} requests completed"
            f" ({self.failed} failed)"
        )
