"""The closed-loop sweep in virtual time: N clients, each sending its next request when its
previous one ends, level after level, as ``inflight bench compare --scenario sweep`` runs it.

The sweep's structure is the live bench's own, read from its pieces, not restated:

* the levels are ``inflight.workload.sweep.sweep_levels(concurrency, requests,
  max_tokens)`` (or any ``inflight.workload.sweep.Level``: a request count or a duration,
  and an answer-length schedule, as ``inflight.bench.loadgen.LevelPlan`` takes them: the
  slowing model's ``inflight.workload.slowing.slowing_level``, whose answers lengthen at
  the schedule's seed times);
* warm-up (``warmup_requests`` at ``min(warmup_concurrency, warmup_requests)``), the idle
  gap after it and between levels, and the router sampler's period come from the
  ``inflight.workload.sweep.SweepConfig`` that ``inflight.workload.sweep.sweep_config``
  builds from ``inflight bench compare``'s flags, at the live comparison's time-scale
  (``inflight.workload.sweep.DEFAULT_TIME_SCALE``; :meth:`SweepPlan.from_bench`);
* the measures are the live bench's: each level becomes a
  ``inflight.measure.records.LevelWindow`` (``RequestRecord``s and ``RouterSample``s) and
  :func:`inflight.measure.sweep_result.build_result` turns them into the same
  ``RunResult`` document (per-level throughput, latency percentiles, Little's Law,
  replica counts, validity), so ``inflight.measure.repro``, ``inflight.measure.table``
  and ``inflight.measure.plots`` read a simulated run as they read a live one.

What the live sweep does that is not a function to call, mirrored here and cited:

* ``inflight.bench.loadgen.closed_loop``: a level issues at most ``requests`` requests (or none
  after ``duration_s``); every worker loops send → wait → send; a refused request counts
  as issued and its worker sends the next at once;
* ``inflight.bench.closedloop.sweep._run_level``: after a level's last answer the bench pauses
  ``min(2 × sample_interval_wall_s, 0.5)`` wall seconds (a last router sample), then
  the gap; the window of a level is [first send, last end].

Times are seed seconds from the warm-up's start (the live run's ``t0``); the document is
written at time-scale 1 (``RunResult.time_scale``), so its seconds are seed seconds.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import cast

from inflight.measure.records import LevelWindow, RequestRecord, RouterSample, WarmupResult
from inflight.measure.results import RunResult
from inflight.measure.sweep_result import build_result
from inflight.sim.core import RequestResult, SimConfig, SimResult, Simulation
from inflight.statedir import TimelinePoint
from inflight.workload.meeting import DEFAULT_MAX_TOKENS, DEFAULT_PROMPT_TOKENS
from inflight.workload.sweep import Level, SweepConfig, sweep_config, sweep_levels

# The sampler runs after the requests and replicas of an instant (inflight.sim.core's priorities).
_P_SAMPLE = 1
# A request's latest end, seed s, when nothing else bounds a run (the live bench's own
# request timeout): only a bound for the event loop, never reached by a finishing run.
_REQUEST_TIMEOUT_S = cast(float, SweepConfig.__dataclass_fields__["request_timeout_s"].default)


@dataclass(frozen=True)
class SweepPlan:
    """The closed-loop sweep, seed seconds: levels, warm-up, gaps, the sampler's period.

    ``settle_s``: the bench's pause after a level before the next gap
    (``inflight.bench.closedloop.sweep._run_level``: ``min(2 × sample_interval_wall_s, 0.5)`` wall
    seconds).
    ``max_tokens``: the workload's answer length, the warm-up's
    (``inflight.bench.closedloop.sweep.run_sweep``
    sends it the workload's body, whatever the levels' lengths).
    The defaults are what :meth:`from_bench` reads from the bench's own defaults at
    time-scale 0.2 (a test holds them equal).
    """

    levels: tuple[Level, ...]
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    max_tokens: int = DEFAULT_MAX_TOKENS
    warmup_requests: int = 8
    warmup_concurrency: int = 4
    gap_s: float = 10.0
    settle_s: float = 1.0
    sample_interval_s: float = 0.5

    def __post_init__(self) -> None:
        if not self.levels:
            raise ValueError("--concurrency needs at least one level")
        for lv in self.levels:
            if lv.concurrency < 1:
                raise ValueError(f"--concurrency values must be >= 1, got {lv.concurrency}")
            if lv.requests is None and lv.duration_s is None:
                raise ValueError("a level needs a request count or a duration")
            if lv.requests is not None and lv.requests < 1:
                raise ValueError(f"--requests must be >= 1, got {lv.requests}")
        if self.prompt_tokens < 1:
            raise ValueError(f"--prompt-tokens must be >= 1, got {self.prompt_tokens}")
        if self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be >= 1, got {self.max_tokens}")
        if self.warmup_requests < 0:
            raise ValueError(f"--warmup must be >= 0, got {self.warmup_requests}")
        if self.warmup_concurrency < 1:
            raise ValueError(f"--warmup-concurrency must be >= 1, got {self.warmup_concurrency}")
        if self.gap_s < 0:
            raise ValueError(f"--gap-s must be >= 0, got {self.gap_s}")
        if self.settle_s < 0 or self.sample_interval_s <= 0:
            raise ValueError("settle_s must be >= 0 and sample_interval_s > 0")

    @classmethod
    def from_bench(
        cls,
        args: argparse.Namespace,
        time_scale: float,
        levels: Sequence[Level] | None = None,
        gap_s: float | None = None,
    ) -> SweepPlan:
        """The sweep ``inflight bench compare`` runs for its flags ``args`` (resolved by
        ``inflight.workload.sweep.closed_loop_args``) at ``time_scale``: the levels of
        ``inflight.workload.sweep.sweep_levels`` (or ``levels``) and the ``SweepConfig`` that
        ``inflight.workload.sweep.sweep_config`` builds (``gap_s``: its override of
        ``--gap-s``, as the slowing runs pass it), its wall periods turned into seed seconds."""
        if levels is None:
            levels = sweep_levels(args.concurrency, args.requests, args.max_tokens)
        cfg = sweep_config(args, "sim:", "sim", levels, time_scale, gap_s)
        return cls(
            levels=cfg.levels,
            prompt_tokens=cfg.workload.prompt_tokens,
            max_tokens=cfg.workload.max_tokens,
            warmup_requests=cfg.warmup_requests,
            warmup_concurrency=cfg.warmup_concurrency,
            gap_s=cfg.gap_s,
            settle_s=min(cfg.sample_interval_wall_s * 2, 0.5) / time_scale,
            sample_interval_s=cfg.sample_interval_wall_s / time_scale,
        )

    def bound_s(self) -> float:
        """A time by which any run of this plan has ended: every round of requests at the
        bench's request timeout (the event loop's limit, never reached by a sane run)."""
        total = 0.0
        phases = [(self.warmup_requests, self.warmup_concurrency, None)] + [
            (lv.requests, lv.concurrency, lv.duration_s) for lv in self.levels
        ]
        for requests, concurrency, duration_s in phases:
            total += self.gap_s + self.settle_s + (duration_s or 0.0)
            rounds = 1 if requests is None else math.ceil(requests / concurrency)
            total += (rounds + 1) * _REQUEST_TIMEOUT_S
        return total


@dataclass
class _Phase:
    """One closed-loop phase being run: the warm-up or a level."""

    level: Level
    warmup: bool
    start_s: float
    issued: int = 0
    ended: int = 0
    results: list[RequestResult] | None = None

    def may_send(self, now_s: float) -> bool:
        """``inflight.bench.loadgen.closed_loop``'s ``may_send``: a count, or a stop time."""
        lv = self.level
        if lv.requests is not None and self.issued >= lv.requests:
            return False
        if lv.duration_s is not None and now_s >= self.start_s + lv.duration_s:
            return False
        self.issued += 1
        return True

    def max_tokens(self, now_s: float) -> int:
        """The level's answer length at ``now_s`` (the last schedule entry begun)."""
        chosen = self.level.max_tokens
        for offset_s, max_tokens in sorted(self.level.schedule):
            if self.start_s + offset_s <= now_s:
                chosen = max_tokens
        return chosen


@dataclass(frozen=True)
class SweepRun:
    """A simulated sweep: the stack's run, each level's window and the warm-up."""

    sim: SimResult
    warmup: WarmupResult | None
    windows: tuple[LevelWindow, ...]
    samples: tuple[RouterSample, ...]


class ClosedLoop:
    """The clients of a sweep, driving a :class:`inflight.sim.core.Simulation` through its hooks
    (``on_end``, ``send``, ``run(done=…)``)."""

    def __init__(self, sim: Simulation, plan: SweepPlan) -> None:
        self.sim = sim
        self.plan = plan
        self.samples: list[RouterSample] = []
        self.windows: list[LevelWindow] = []
        self.warmup: WarmupResult | None = None
        self.done = False
        self._phases: list[tuple[Level, bool]] = []
        if plan.warmup_requests:
            warm = Level(
                concurrency=min(plan.warmup_concurrency, plan.warmup_requests),
                requests=plan.warmup_requests,
                max_tokens=plan.max_tokens,
            )
            self._phases.append((warm, True))
        self._phases += [(lv, False) for lv in plan.levels]
        self._next = 0
        self._phase: _Phase | None = None
        self._owner: dict[int, _Phase] = {}
        sim.on_end = self._on_end

    # --- the clients --------------------------------------------------------------------
    def _start_phase(self) -> None:
        level, warmup = self._phases[self._next]
        self._next += 1
        now = self.sim.events.now_s
        phase = _Phase(level, warmup, now, results=[])
        self._phase = phase
        for _ in range(level.concurrency):
            self._send(phase)

    def _send(self, phase: _Phase) -> None:
        now = self.sim.events.now_s
        if not phase.may_send(now):
            return
        res = self.sim.send(self.plan.prompt_tokens, phase.max_tokens(now))
        assert phase.results is not None
        phase.results.append(res)
        self._owner[id(res)] = phase

    def _on_end(self, res: RequestResult) -> None:
        phase = self._owner.pop(id(res))
        phase.ended += 1
        self._send(phase)  # the worker's next request (none once the level is spent)
        if phase.ended == phase.issued:
            self._end_phase(phase)

    def _end_phase(self, phase: _Phase) -> None:
        assert phase.results is not None
        records = tuple(_record(r) for r in phase.results)
        now = self.sim.events.now_s
        if phase.warmup:
            ok = sum(1 for r in records if r.ok)
            self.warmup = WarmupResult(
                requested=self.plan.warmup_requests,
                completed=ok,
                failed=len(records) - ok,
                finished=len(records) == self.plan.warmup_requests,
            )
            pause_s = (
                self.plan.gap_s
            )  # inflight.bench.closedloop.sweep.run_sweep: the gap after the warm-up
        else:
            start_t = min(r.start_t for r in records)
            end_t = max(r.end_t for r in records)
            self.windows.append(
                LevelWindow(
                    concurrency=phase.level.concurrency,
                    start_t=start_t,
                    end_t=end_t,
                    records=records,
                    samples=tuple(s for s in self.samples if start_t <= s.t <= end_t),
                )
            )
            # _run_level's last-sample pause, then run_sweep's gap before the next level
            pause_s = self.plan.settle_s + (self.plan.gap_s if self._more() else 0.0)
        self._phase = None
        if self._more():
            self.sim.events.at(now + pause_s, self._start_phase)
        else:
            self.sim.events.at(now + pause_s, self._finish)

    def _more(self) -> bool:
        return self._next < len(self._phases)

    def _finish(self) -> None:
        self.done = True

    # --- the router sampler ------------------------------------------------------------
    def _sample(self) -> None:
        r = self.sim.router
        now = self.sim.events.now_s
        self.samples.append(RouterSample(now, r.inflight, r.queued, r.ready_endpoints()))
        self.sim.events.at(now + self.plan.sample_interval_s, self._sample, _P_SAMPLE)

    # --- run ---------------------------------------------------------------------------
    def run(self) -> SweepRun:
        events = self.sim.events
        events.at(0.0, self._sample, _P_SAMPLE)
        events.at(0.0, self._start_phase)
        result = self.sim.run(done=lambda: self.done)
        if not self.done:
            raise RuntimeError(f"the sweep did not end by {self.sim.end_s:.0f} s (simulated)")
        end_s = max(w.end_t for w in self.windows)
        return SweepRun(
            sim=replace(result, end_s=end_s),
            warmup=self.warmup,
            windows=tuple(self.windows),
            samples=tuple(self.samples),
        )


def _record(r: RequestResult) -> RequestRecord:
    """A simulated request as the live client records it (seed s)."""
    end = r.end_s if r.end_s is not None else r.sent_s
    return RequestRecord(
        start_t=r.sent_s,
        end_t=end,
        first_token_t=r.first_s,
        output_tokens=r.output_tokens,
        ok=r.ok,
        error="" if r.ok else (r.cause or "error"),
    )


def simulate_sweep(config: SimConfig, plan: SweepPlan) -> SweepRun:
    """The sweep ``plan`` through the stack ``config`` describes."""
    sim = Simulation(config, [], end_s=plan.bound_s())
    return ClosedLoop(sim, plan).run()


def timeline_points(result: SimResult) -> list[TimelinePoint]:
    """The simulated replica timeline as ``inflight up``'s ``timeline.jsonl`` has it."""
    return [
        TimelinePoint(p["t"], int(p["desired"]), int(p["ready"]), int(p["live"]))
        for p in result.timeline
    ]


def sweep_result(
    run: SweepRun,
    *,
    policy: str,
    frozen: bool,
    command: Sequence[str],
    extra: dict[str, object] | None = None,
) -> RunResult:
    """The live bench's ``RunResult`` of a simulated sweep
    (``inflight.measure.sweep_result.build_result``),
    at time-scale 1 with ``t0`` = the warm-up's start."""
    return build_result(
        url="sim:",
        time_scale=1.0,
        frozen=frozen,
        policy=policy,
        created_at="",  # no clock is read: a simulated run is the same file every time
        command=list(command),
        warmup=run.warmup,
        windows=run.windows,
        timeline=timeline_points(run.sim),
        t0=0.0,
        extra={"source": "sim", **(extra or {})},
    )
