"""The scheduler core: ``max-num-seqs`` slots, an FCFS waiting queue and a step clock.

Pure: no I/O, no clock, no asyncio. The caller passes the wall time in (``now_s``) and the
engine replays every step that has ended by then from its own virtual step clock, so the
timing stays exact however late the caller wakes up (a 10 ms wake-up granularity changes
when a client *sees* tokens, never how many steps a second the replica does).

Like vLLM's scheduler: a step admits waiting sequences into free slots (FCFS, never
rejecting), pays their prefill, and gives every running sequence one token when it ends.
The first token of a sequence comes at the end of the step that admitted it. A sequence
that produced its ``output_tokens`` leaves at that step's end and frees its slot for the
next step. Aborting a sequence removes it at once; its slot is reused at the next step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from emulator.profile import Profile

# A guard against floating error when a wake-up hint lands a hair before the step end.
_EPS_S = 1e-6


class Observer(Protocol):
    """Receives what happened, for metrics. All durations in wall seconds."""

    def admitted(self, queue_s: float, prompt_tokens: int) -> None: ...

    def tokens(self, count: int, itl_s: float, itl_count: int) -> None: ...

    def first_token(self, ttft_s: float) -> None: ...

    def finished(self, reason: str, e2e_s: float) -> None: ...


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine. Mutated only by the engine."""

    prompt_tokens: int
    output_tokens: int
    arrival_s: float
    stream: bool = False  # the caller wants a wake-up for every step, not just the end
    natural_stop: bool = False  # finish as "stop" (no max_tokens given) rather than "length"
    tokens: int = 0
    admitted_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None
    finished_reason: str | None = None
    cold: bool = False

    @property
    def done(self) -> bool:
        return self.finished_reason is not None


class _NullObserver:
    def admitted(self, queue_s: float, prompt_tokens: int) -> None:
        pass

    def tokens(self, count: int, itl_s: float, itl_count: int) -> None:
        pass

    def first_token(self, ttft_s: float) -> None:
        pass

    def finished(self, reason: str, e2e_s: float) -> None:
        pass


@dataclass
class Engine:
    """Step-clock continuous batching over ``profile.max_num_seqs`` slots."""

    profile: Profile
    observer: Observer = field(default_factory=_NullObserver)
    waiting: deque[Sequence] = field(default_factory=deque)
    running: list[Sequence] = field(default_factory=list)
    step_end_s: float | None = None  # None: idle (nothing running)
    step_start_s: float | None = None
    step_dur_s: float = 0.0
    step_prefill_s: float = 0.0  # prefill paid by the current step
    admitted_total: int = 0
    fast_path: bool = True  # False: replay every step one by one (the tests' reference)

    # --- queries -----------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def kv_cache_usage(self) -> float:
        """Fraction (0–1) of the KV cache the running sequences hold, as vLLM reports it."""
        used = sum(s.prompt_tokens + s.tokens for s in self.running)
        return min(1.0, used / self.profile.kv_cache_tokens)

    def next_finish_s(self) -> float | None:
        """A wall time by which the next sequence finishes (never after it), None when idle.

        Until a sequence finishes or is aborted the running set, hence the step duration,
        stays fixed. A waiting sequence that the next step admits (a free slot) may finish
        before every running one (a short answer joining long ones), so it is counted too,
        at the current decode step, which its admission can only lengthen. Admissions
        therefore only make the answer early (harmless: the caller wakes, advances and asks
        again), never late. Aborts and submissions go through the caller, which asks again
        after them.
        """
        if self.step_end_s is None:
            return None
        if not self.running:
            return self.step_end_s + _EPS_S
        remaining = min(s.output_tokens - s.tokens for s in self.running)
        steady_s = self._decode_step_s(self.running)
        at_s = self.step_end_s + (remaining - 1) * steady_s
        free = self.profile.max_num_seqs - len(self.running)
        for seq, _ in zip(self.waiting, range(free), strict=False):
            # Admitted when this step ends, finished ``output_tokens`` steps later.
            at_s = min(at_s, self.step_end_s + seq.output_tokens * steady_s)
        return at_s + _EPS_S

    def wants_steps(self) -> bool:
        """True when a streaming sequence runs or will be admitted at the next step."""
        if self.step_end_s is None:
            return False
        if any(s.stream for s in self.running):
            return True
        free = self.profile.max_num_seqs - len(self.running)
        return any(s.stream for s, _ in zip(self.waiting, range(free), strict=False))

    # --- commands ----------------------------------------------------------------------
    def submit(self, seq: Sequence, now_s: float) -> None:
        """Queue ``seq`` (arrived at ``now_s``); start a step at once if the engine idles."""
        self.advance(now_s)
        self.waiting.append(seq)
        if self.step_end_s is None or now_s == self.step_start_s:
            # Idle, or a step that starts at this very instant: it takes the newcomer.
            self._start_step(now_s)

    def abort(self, seq: Sequence, now_s: float) -> bool:
        """Remove ``seq`` wherever it is (finished reason ``abort``); False if already done."""
        self.advance(now_s)
        if seq.done:
            return False
        if seq in self.running:
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        seq.finished_reason = "abort"
        seq.finished_s = now_s
        self.observer.finished("abort", now_s - seq.arrival_s)
        return True

    def advance(self, now_s: float) -> list[Sequence]:
        """Replay every step that ended by ``now_s``; return the sequences to notify.

        Returned: streaming sequences that got tokens, and every sequence that finished.
        """
        touched: list[Sequence] = []
        while self.step_end_s is not None and self.step_end_s <= now_s:
            if self.fast_path:
                self._skip_plain_steps(now_s)
            end_s = self.step_end_s
            if end_s > now_s:
                break
            self._end_step(end_s, touched)
            self._start_step(end_s)
        return touched

    def _skip_plain_steps(self, now_s: float) -> None:
        """The fast path: replay, cheaply, the steps that change nothing but token counts.

        While no sequence finishes, nothing is admitted (``_start_step`` already filled
        every free slot, so the queue is empty or the batch full) and the running set, its
        cold flags, hence the decode step's duration, stay the same: such a step only adds
        one token to each running sequence. Exact, not an approximation: the step ends are
        summed one by one, as the step-by-step loop sums them (bit-identical times), the
        observer gets the same calls, and the step that lets a sequence finish (or gives a
        first token, or serves a streaming caller that wants a wake-up per step) is left
        to the normal loop. It is what lets the simulator (``sim/``) replay an hour of
        eight busy replicas in seconds.
        """
        running = self.running
        if not running or (self.waiting and len(running) < self.profile.max_num_seqs):
            return  # nothing runs, or the next step admits (after an abort or a submit)
        steps = min(s.output_tokens - s.tokens for s in running) - 1  # none finishes in them
        if steps <= 0:
            return
        for seq in running:
            if seq.stream or seq.first_token_s is None:
                return
        end_s = self.step_end_s
        assert end_s is not None
        if end_s > now_s:
            return
        count = len(running)
        decode_s = self._decode_step_s(running) + 0.0  # what _start_step gives a step
        observer = None if type(self.observer) is _NullObserver else self.observer
        dur_s = self.step_dur_s
        done = 0
        last_s = end_s
        while done < steps and end_s <= now_s:
            if observer is not None:
                observer.tokens(count, dur_s, count)
            last_s = end_s
            end_s = last_s + decode_s
            dur_s = decode_s
            done += 1
        if done == 0:
            return
        for seq in running:
            seq.tokens += done
            seq.last_token_s = last_s
        self.step_start_s = last_s
        self.step_prefill_s = 0.0
        self.step_dur_s = dur_s
        self.step_end_s = end_s

    # --- the step clock ----------------------------------------------------------------
    def _end_step(self, end_s: float, touched: list[Sequence]) -> None:
        itl_count = 0
        still: list[Sequence] = []
        for seq in self.running:
            seq.tokens += 1
            if seq.first_token_s is None:
                seq.first_token_s = end_s
                self.observer.first_token(end_s - seq.arrival_s)
            else:
                itl_count += 1
            seq.last_token_s = end_s
            if seq.tokens >= seq.output_tokens:
                seq.finished_s = end_s
                seq.finished_reason = "stop" if seq.natural_stop else "length"
                self.observer.finished(seq.finished_reason, end_s - seq.arrival_s)
                touched.append(seq)
            else:
                still.append(seq)
                if seq.stream:
                    touched.append(seq)
        if self.running:
            self.observer.tokens(len(self.running), self.step_dur_s, itl_count)
        self.running = still

    def _start_step(self, start_s: float) -> None:
        """Fill free slots from the queue and time the step that starts at ``start_s``.

        Called again for the same ``start_s`` when more sequences arrive at that instant;
        the prefill already paid by this step is kept.
        """
        prefill_s = self.step_prefill_s if start_s == self.step_start_s else 0.0
        while self.waiting and len(self.running) < self.profile.max_num_seqs:
            seq = self.waiting.popleft()
            seq.admitted_s = start_s
            seq.cold = self.admitted_total < self.profile.cold_start_requests
            self.admitted_total += 1
            prefill_s += self.profile.prefill_s(seq.prompt_tokens)
            self.running.append(seq)
            self.observer.admitted(start_s - seq.arrival_s, seq.prompt_tokens)
        self.step_start_s = start_s
        self.step_prefill_s = prefill_s
        if not self.running:
            self.step_end_s = None
            self.step_start_s = None
            self.step_dur_s = 0.0
            return
        self.step_dur_s = self._decode_step_s(self.running) + prefill_s
        self.step_end_s = start_s + self.step_dur_s

    def _decode_step_s(self, running: list[Sequence]) -> float:
        step_s = self.profile.step_s(len(running))
        if any(s.cold for s in running):
            step_s *= self.profile.cold_start_factor
        return step_s
