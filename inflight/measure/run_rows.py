"""The rows of a run document's tables, with named fields.

A run document (``inflight.measure.results.RunResult.to_json``, closed loop;
``inflight.bench.openloop.run``, open loop) keeps its requests, router samples and replica
timeline as JSON arrays of rows, each table with a ``<name>_columns`` list naming its
columns. These types are those lists: the writers take the column names from them
(:func:`columns`), and the readers turn each row into one (:func:`named`) instead of
indexing it by position.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar


@dataclass(frozen=True, slots=True)
class ClosedLoopRequest:
    """One request of a closed-loop run (``requests``), seed seconds since ``t0_unix``."""

    concurrency: int
    start_s: float
    end_s: float
    ttft_s: float | None
    output_tokens: int
    ok: bool
    error: str


@dataclass(frozen=True, slots=True)
class OpenLoopRequest:
    """One request of an open-loop run (``requests``, ``warmup_requests``), seed seconds
    since the first request was due: ``t_s`` planned, ``sent_s`` sent."""

    index: int
    t_s: float
    prompt_tokens: int
    max_tokens: int
    sent_s: float
    first_s: float | None
    end_s: float | None
    output_tokens: int
    ok: bool
    cause: str | None  # why it failed; None when it did not
    error: str


@dataclass(frozen=True, slots=True)
class RouterSampleRow:
    """One poll of the router's status (``router_samples``)."""

    t_s: float
    inflight: float  # L, held requests included
    queued: float  # held at the router
    ready: float  # endpoints ready


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One change of the replica counts (``timeline``): the desired count and the replicas
    there were (the closed loop's ``ready``; the open loop's ``replica_field``, ``live`` or
    ``ready`` in older documents). Simulated timelines may have no third column."""

    t_s: float
    desired: float
    replicas: float | None = None

    @property
    def counted(self) -> float:
        """``replicas``, which every live run's row has."""
        if self.replicas is None:
            raise ValueError(f"a timeline row without its replica count: {self}")
        return self.replicas


Row = TypeVar("Row", ClosedLoopRequest, OpenLoopRequest, RouterSampleRow, TimelineRow)


def named(kind: type[Row], rows: Iterable[Sequence[Any]]) -> list[Row]:
    """``rows`` (a document's table) as ``kind``: one named row each."""
    return [kind(*row) for row in rows]


def as_row(
    record: ClosedLoopRequest | OpenLoopRequest | RouterSampleRow | TimelineRow,
) -> list[Any]:
    """``record`` as its table's JSON row: its values in column order."""
    return [getattr(record, f.name) for f in dataclasses.fields(record)]


def columns(kind: type[Row]) -> list[str]:
    """The names of ``kind``'s columns, in order: a table's ``<name>_columns``."""
    return [f.name for f in dataclasses.fields(kind)]
