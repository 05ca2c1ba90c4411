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

The KV cache, as vLLM's v1 scheduler keeps it (``vllm/v1/core/sched/scheduler.py``,
``kv_cache_manager.py``; :class:`Profile` has the sizes): a step first schedules the running
sequences in order, each taking the blocks its context needs (a new block every
``block_size`` tokens); when none is free it preempts the newest running sequence (its
blocks freed, its context to be recomputed, back at the head of the queue) until the
allocation fits or it preempted the sequence itself. Only a step that preempted nothing
admits from the queue, FCFS, while a slot is free and the head's whole context (prompt and
the tokens it already produced) fits with the watermark to spare. A resumed sequence pays
the prefill of its whole context again and keeps its tokens. ``vllm:num_preemptions`` counts
a preemption when the preempted sequence next produces a token, as vLLM's output processor
does (it reads the engine's events from a request's outputs), so the counter rises late.
A step computes at most ``max_num_batched_tokens`` tokens (chunked prefill): running
sequences first, then admissions, the last one possibly a partial prefill. A sequence's
first token comes at the end of the step that computed the rest of its prompt.

The prefix cache, as vLLM's automatic prefix caching keeps it (``Profile.enable_prefix_caching``;
``kv_cache_manager.py``, ``block_pool.py``). A sequence may carry its prompt's full-block
hashes (``block_hashes``, chained: ``inflight.prefix_blocks``); one without behaves exactly
as before. When a sequence is admitted (or resumed after a preemption) its longest prefix of
cached blocks is not computed again: its prefill starts after them (the fixed cost is still
paid once). As vLLM's ``get_computed_blocks``, the hit stops one token short of the
context (``num_tokens − 1``, block-aligned), so a fully cached prompt still computes its
last block. A block is cached once it is scheduled (vLLM caches a request's full blocks when
it allocates them, so a sequence admitted later in the same step already hits them); a
cached block a running sequence holds is shared by reference count, not held twice (the
KV usage counts it once, and admission needs only the blocks not already held). A block
nobody holds stays cached in vLLM's free-block queue: a finished, aborted or preempted
sequence frees its blocks last first (its tail before its head), a new block is taken from
the queue's head (least recently freed first), evicting what was cached there, and a hit
takes a block out of the queue. Blocks of a prompt that hashes do not cover (the decode
tokens, a trailing partial block) are freed uncached. ``prefix_queries_total`` and
``prefix_hits_total`` count, in tokens, what vLLM's ``vllm:prefix_cache_queries`` and
``vllm:prefix_cache_hits`` count: each new request's prompt and its cached part at
admission (a resumed one is left out, as vLLM counts it apart).

Holding the clock (tests; the emulator's ``--hold-control``): :meth:`Engine.hold` stops the
step clock at an instant, or at the step that admits the Nth sequence, and
:meth:`Engine.release` lets it run on from that instant. While held nothing happens: no
step ends, no token is produced, nothing is admitted or finishes; a sequence submitted is
queued and an abort still removes its sequence. The engine keeps the most sequences it held
at once (``most_running``; ``most_in_engine``, running and waiting), events a test reads
instead of sampling the gauges.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Protocol

from inflight.emulator.profile import Profile

# A guard against floating error when a wake-up hint lands a hair before the step end.
_EPS_S = 1e-6


class Observer(Protocol):
    """Receives what happened, for metrics. All durations in wall seconds."""

    def admitted(self, queue_s: float, prompt_tokens: int) -> None: ...

    def tokens(self, count: int, itl_s: float, itl_count: int) -> None: ...

    def first_token(self, ttft_s: float) -> None: ...

    def preempted(self, count: int) -> None:
        """``count`` preemptions of a sequence that produced a token again (vLLM's counter)."""

    def finished(
        self, reason: str, e2e_s: float, prompt_tokens: int, generation_tokens: int
    ) -> None:
        """A sequence left (stop, length or abort) with the tokens it generated by then."""

    def prefix_cache(self, queries: int, hits: int) -> None:
        """A new sequence's prefix-cache lookup (prefix caching on): tokens asked, found."""


class _FreeRun:
    """Uncached blocks in the prefix cache's free-block queue (a count, keyed by identity)."""

    __slots__ = ()


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine. Mutated only by the engine."""

    prompt_tokens: int
    output_tokens: int
    arrival_s: float
    stream: bool = False  # the caller wants a wake-up for every step, not just the end
    natural_stop: bool = False  # finish as "stop" (no max_tokens given) rather than "length"
    block_hashes: tuple[int, ...] = ()  # the prompt's full-block hashes (prefix caching)
    tokens: int = 0
    admitted_s: float | None = None
    first_token_s: float | None = None
    last_token_s: float | None = None
    finished_s: float | None = None
    finished_reason: str | None = None
    cold: bool = False
    computed: int = 0  # context tokens whose KV the engine holds (vLLM's num_computed_tokens)
    blocks: int = 0  # KV blocks held
    prefilling: bool = False  # admitted (or resumed) and not yet given a token since
    preemptions: int = 0
    preemptions_unreported: int = 0  # not yet counted by vllm:num_preemptions
    cached_tokens: int = 0  # context found in the prefix cache at its last admission
    held: list[int] = field(default_factory=list)  # its first blocks: cached, shared ones

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

    def preempted(self, count: int) -> None:
        pass

    def finished(
        self, reason: str, e2e_s: float, prompt_tokens: int, generation_tokens: int
    ) -> None:
        pass

    def prefix_cache(self, queries: int, hits: int) -> None:
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
    blocks_used: int = 0  # KV blocks the running sequences hold
    preemptions_total: int = 0  # every preemption, at the instant it happened
    step_new: dict[Sequence, int] = field(default_factory=dict)  # tokens computed this step
    step_budget: int = 0  # tokens the current step may still compute
    step_preempted: bool = False  # the current step preempted: it admits nothing
    held_s: float | None = None  # the instant the clock is held at; None: it runs
    hold_after_admitted: int | None = None  # hold at the step that admits this many in all
    most_running: int = 0  # the most sequences running at once
    most_in_engine: int = 0  # the most sequences running and waiting at once
    # The prefix cache (module docstring): cached blocks running sequences hold (hash →
    # holders), and the part of vLLM's free-block queue behind its first cached block
    # (hash → 1, or a _FreeRun → uncached blocks), oldest first; free blocks ahead of it
    # are uncached. ``cache_free_blocks`` is that part's size.
    cache_held: dict[int, int] = field(default_factory=dict)
    cache_free: OrderedDict[object, int] = field(default_factory=OrderedDict)
    cache_free_blocks: int = 0
    prefix_queries_total: int = 0  # tokens (vllm:prefix_cache_queries)
    prefix_hits_total: int = 0  # tokens (vllm:prefix_cache_hits)

    # --- queries -----------------------------------------------------------------------
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    def kv_cache_usage(self) -> float:
        """Fraction (0–1) of the KV blocks the running sequences hold, as vLLM reports it
        (its null block left out)."""
        return min(1.0, self.blocks_used / self.profile.usable_blocks)

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
        if self.step_end_s is None or self.held_s is not None:
            return None
        if not self.running:
            return self.step_end_s + _EPS_S
        remaining = min(s.output_tokens - s.tokens for s in self.running)
        steady_s = self._decode_step_s(self.running)
        # The running set changes no later than the step that lacks a block (a preemption
        # shortens the steps after it).
        free = self.profile.max_num_seqs - len(self.running)
        joining = None
        if free > 0 and self.waiting:
            joining = [s for s, _ in zip(self.waiting, range(free), strict=False)]
        plain = self._plain_kv_steps(remaining, joining)
        if plain < remaining:
            remaining = plain + 1
        at_s = self.step_end_s + (remaining - 1) * steady_s
        for seq, _ in zip(self.waiting, range(free), strict=False):
            # Admitted when this step ends, finished ``output_tokens`` steps later.
            at_s = min(at_s, self.step_end_s + seq.output_tokens * steady_s)
        return at_s + _EPS_S

    def wants_steps(self) -> bool:
        """True when a streaming sequence runs or will be admitted at the next step."""
        if self.step_end_s is None or self.held_s is not None:
            return False
        if any(s.stream for s in self.running):
            return True
        free = self.profile.max_num_seqs - len(self.running)
        return any(s.stream for s, _ in zip(self.waiting, range(free), strict=False))

    # --- commands ----------------------------------------------------------------------
    def submit(self, seq: Sequence, now_s: float) -> None:
        """Queue ``seq`` (arrived at ``now_s``); start a step at once if the engine idles."""
        self.advance(now_s)
        if seq.block_hashes:
            if not self.profile.enable_prefix_caching:
                seq.block_hashes = ()
            elif len(seq.block_hashes) > seq.prompt_tokens // self.profile.block_size:
                seq.block_hashes = seq.block_hashes[: seq.prompt_tokens // self.profile.block_size]
        self.waiting.append(seq)
        self.most_in_engine = max(self.most_in_engine, len(self.running) + len(self.waiting))
        self._start_arrivals(now_s)

    def _start_arrivals(self, now_s: float) -> None:
        """Start the step that takes the queue's newcomers, unless the clock is held."""
        if self.held_s is None and (self.step_end_s is None or now_s == self.step_start_s):
            # Idle, or a step that starts at this very instant: it takes the newcomer.
            self._start_step(now_s)
            self._hold_if_admitted(now_s)

    def hold(self, now_s: float, after_admitted: int | None = None) -> None:
        """Hold the clock at ``now_s``, or (``after_admitted``) at the start of the step
        that admits the ``after_admitted``-th sequence of all, once that many were admitted
        in all: its sequences are running, none has produced its token. An engine already
        held stays held, and the later hold is pending until :meth:`release`."""
        self.advance(now_s)
        if after_admitted is not None and self.admitted_total < after_admitted:
            self.hold_after_admitted = after_admitted
        elif self.held_s is None:
            self.held_s = now_s

    def release(self) -> None:
        """Run the clock on from the instant it was held (the caller's clock stood still
        meanwhile: its next ``now_s`` continues from there). The sequences submitted while
        held arrived at that instant; a pending hold stays and may hold at once."""
        at_s = self.held_s
        if at_s is None:
            return
        self.held_s = None
        if self.waiting:
            self._start_arrivals(at_s)

    def _hold_if_admitted(self, at_s: float) -> None:
        after = self.hold_after_admitted
        if after is not None and self.admitted_total >= after:
            self.held_s = at_s
            self.hold_after_admitted = None

    def abort(self, seq: Sequence, now_s: float) -> bool:
        """Remove ``seq`` wherever it is (finished reason ``abort``); False if already done."""
        self.advance(now_s)
        if seq.done:
            return False
        if seq in self.running:
            self.running.remove(seq)
            self._free(seq)
            self.step_new.pop(seq, None)
        else:
            self.waiting.remove(seq)
        seq.finished_reason = "abort"
        seq.finished_s = now_s
        self.observer.finished("abort", now_s - seq.arrival_s, seq.prompt_tokens, seq.tokens)
        return True

    def advance(self, now_s: float) -> list[Sequence]:
        """Replay every step that ended by ``now_s``; return the sequences to notify.

        Returned: streaming sequences that got tokens, and every sequence that finished.
        """
        touched: list[Sequence] = []
        while self.step_end_s is not None and self.step_end_s <= now_s and self.held_s is None:
            if self.fast_path:
                self._skip_plain_steps(now_s)
            end_s = self.step_end_s
            if end_s > now_s:
                break
            self._end_step(end_s, touched)
            self._start_step(end_s)
            if self.hold_after_admitted is not None:
                self._hold_if_admitted(end_s)
        return touched

    def _skip_plain_steps(self, now_s: float) -> None:
        """The fast path: replay, cheaply, the steps that change nothing but token counts.

        While no sequence finishes, nothing is admitted (``_start_step`` already filled
        every free slot, or the head of the queue does not fit in the KV cache and cannot
        until a sequence leaves) and nothing is preempted (the steps are cut before the
        first that lacks a block), the running set, its cold flags, hence the decode step's
        duration, stay the same: such a step only adds one token to each running sequence.
        Exact, not an approximation: the step ends are summed one by one, as the
        step-by-step loop sums them (bit-identical times), the observer gets the same
        calls, and the step that lets a sequence finish (or gives a first token, or serves
        a streaming caller that wants a wake-up per step) is left to the normal loop. It is
        what lets the simulator (``inflight/sim/``) replay an hour of eight busy replicas in
        seconds.
        """
        running = self.running
        if not running or len(self.step_new) != len(running):
            return  # idle, or a sequence waits for the token budget: not a plain step
        remaining = 1 << 62
        for seq in running:
            if seq.stream or seq.first_token_s is None or seq.prefilling:
                return
            left = seq.output_tokens - seq.tokens
            if left < remaining:
                remaining = left
        steps = remaining - 1  # none finishes in them
        if steps <= 0:
            return
        if self.waiting and len(running) < self.profile.max_num_seqs and self._head_fits():
            return  # the next step admits (after an abort or a submit)
        if len(running) > self.profile.token_budget:
            return
        steps = self._plain_kv_steps(steps)
        if steps <= 0:
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
        size = self.profile.block_size
        for seq in running:
            seq.tokens += done
            seq.computed += done
            seq.last_token_s = last_s
            blocks = -(-(seq.computed + 1) // size)
            self.blocks_used += blocks - seq.blocks
            seq.blocks = blocks
        if self.cache_free_blocks:
            self._evict()
        self.step_start_s = last_s
        self.step_prefill_s = 0.0
        self.step_dur_s = dur_s
        self.step_end_s = end_s
        self.step_preempted = False

    def _plain_kv_steps(self, steps: int, joining: list[Sequence] | None = None) -> int:
        """How many of the next ``steps`` step starts find the blocks the running sequences
        (and ``joining``, counted as running from the next step) need, each one token
        longer a step, without preempting: ``steps`` when all do. May be low, never high."""
        running = self.running if not joining else [*self.running, *joining]
        size = self.profile.block_size
        usable = self.profile.usable_blocks

        size_sum = 0
        for s in running:
            size_sum += s.prompt_tokens + s.tokens
        if (size_sum + len(running) * steps) // size + len(running) <= usable:
            return steps  # even with a partial block each, all fit (the common case)

        def fits(d: int) -> bool:
            # Step d from now computes each sequence's token at context P + tokens + d.
            need = 0
            for s in running:
                need += -(-(s.prompt_tokens + s.tokens + d) // size)
            return need <= usable

        if fits(steps):
            return steps
        lo, hi = 0, steps  # fits(lo) holds or lo == 0; fits(hi) does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    # --- the KV cache ------------------------------------------------------------------
    def _head_fits(self) -> bool:
        """Whether the head of the queue would be admitted now (KV blocks, watermark)."""
        seq = self.waiting[0]
        need = -(-(seq.prompt_tokens + seq.tokens) // self.profile.block_size)
        if seq.block_hashes:
            need -= self._held_hits(seq)  # shared with a running sequence: already held
        if not self.running:
            return True  # an empty cache takes anything (a longer one over-commits alone)
        free = self.profile.usable_blocks - self.blocks_used
        return need + self.profile.watermark_blocks <= free

    def _take(self, seq: Sequence, context_tokens: int) -> None:
        blocks = -(-context_tokens // self.profile.block_size)
        if blocks > seq.blocks:
            self.blocks_used += blocks - seq.blocks
            seq.blocks = blocks
            if self.cache_free_blocks:
                self._evict()
        if seq.block_hashes:
            self._cache(seq, context_tokens)

    def _free(self, seq: Sequence) -> None:
        self.blocks_used -= seq.blocks
        held = seq.held
        if held or self.cache_free_blocks:
            # vLLM frees a request's blocks last first: the uncached tail, then the
            # cached blocks from the longest prefix back; a block another holds stays.
            free = self.cache_free
            plain = seq.blocks - len(held)
            if plain and self.cache_free_blocks:
                free[_FreeRun()] = plain
                self.cache_free_blocks += plain
            holders = self.cache_held
            for h in reversed(held):
                n = holders[h] - 1
                if n:
                    holders[h] = n
                    self.blocks_used += 1  # still held by another sequence
                else:
                    del holders[h]
                    free[h] = 1
                    self.cache_free_blocks += 1
            held.clear()
        seq.blocks = 0

    # --- the prefix cache --------------------------------------------------------------
    def _hit_limit(self, seq: Sequence) -> int:
        """Blocks of ``seq`` a lookup may find: its hashes, and never its context's last
        token (vLLM's ``max_cache_hit_length = num_tokens − 1``, in whole blocks)."""
        context = seq.prompt_tokens + seq.tokens
        return min(len(seq.block_hashes), (context - 1) // self.profile.block_size)

    def _held_hits(self, seq: Sequence) -> int:
        """Blocks of ``seq``'s cached prefix that running sequences hold (no new block)."""
        held = self.cache_held
        free = self.cache_free
        n = 0
        for h in seq.block_hashes[: self._hit_limit(seq)]:
            if h in held:
                n += 1
            elif h not in free:
                break
        return n

    def _lookup(self, seq: Sequence) -> None:
        """Admission's lookup: ``seq`` takes its longest cached prefix (vLLM's
        ``get_computed_blocks``, then the hit blocks touched: out of the free queue)."""
        held = self.cache_held
        free = self.cache_free
        hits = 0
        for h in seq.block_hashes[: self._hit_limit(seq)]:
            if h in held:
                held[h] += 1
            elif h in free:
                del free[h]
                self.cache_free_blocks -= 1
                held[h] = 1
                self.blocks_used += 1
            else:
                break
            seq.held.append(h)
            hits += 1
        seq.blocks = hits
        seq.computed = hits * self.profile.block_size
        seq.cached_tokens = seq.computed

    def _cache(self, seq: Sequence, context_tokens: int) -> None:
        """The full prompt blocks scheduled up to ``context_tokens`` are cached now (vLLM's
        ``cache_full_blocks``); one whose hash is cached already stays ``seq``'s own."""
        hashes = seq.block_hashes
        held = seq.held
        upto = min(len(hashes), context_tokens // self.profile.block_size)
        holders = self.cache_held
        while len(held) < upto:
            h = hashes[len(held)]
            if h in holders or h in self.cache_free:
                return  # a duplicate (the recomputed last block): uncached
            holders[h] = 1
            held.append(h)

    def _evict(self) -> None:
        """New blocks come from the free queue's head: evict what the blocks now held
        took (the uncached free blocks ahead of the first cached one go first)."""
        free = self.cache_free
        over = self.cache_free_blocks - (self.profile.usable_blocks - self.blocks_used)
        while over > 0 and free:
            key, n = next(iter(free.items()))
            if n > over:
                free[key] = n - over
                self.cache_free_blocks -= over
                return
            del free[key]
            self.cache_free_blocks -= n
            over -= n

    def _short_of_blocks(self, seq: Sequence, context_tokens: int) -> bool:
        blocks = -(-context_tokens // self.profile.block_size)
        return blocks - seq.blocks > self.profile.usable_blocks - self.blocks_used

    def _preempt(self, seq: Sequence) -> None:
        """vLLM's recompute preemption: blocks freed, context forgotten, head of the queue."""
        self.running.remove(seq)
        self._free(seq)
        self.step_new.pop(seq, None)
        seq.computed = 0
        seq.cached_tokens = 0
        seq.prefilling = False
        seq.preemptions += 1
        seq.preemptions_unreported += 1
        self.preemptions_total += 1
        self.waiting.appendleft(seq)
        self.step_preempted = True

    # --- the step clock ----------------------------------------------------------------
    def _end_step(self, end_s: float, touched: list[Sequence]) -> None:
        itl_count = 0
        produced = 0
        still: list[Sequence] = []
        step_new = self.step_new
        for seq in self.running:
            new = step_new.get(seq, 0)
            seq.computed += new
            if new == 0 or seq.computed < seq.prompt_tokens + seq.tokens:
                still.append(seq)  # waited for the budget, or a prefill chunk: no token
                continue
            produced += 1
            seq.tokens += 1
            if seq.prefilling:
                seq.prefilling = False
                if seq.preemptions_unreported:
                    self.observer.preempted(seq.preemptions_unreported)
                    seq.preemptions_unreported = 0
            if seq.first_token_s is None:
                seq.first_token_s = end_s
                self.observer.first_token(end_s - seq.arrival_s)
            else:
                itl_count += 1
            seq.last_token_s = end_s
            if seq.tokens >= seq.output_tokens:
                seq.finished_s = end_s
                seq.finished_reason = "stop" if seq.natural_stop else "length"
                self._free(seq)
                self.observer.finished(
                    seq.finished_reason, end_s - seq.arrival_s, seq.prompt_tokens, seq.tokens
                )
                touched.append(seq)
            else:
                still.append(seq)
                if seq.stream:
                    touched.append(seq)
        if produced:
            self.observer.tokens(produced, self.step_dur_s, itl_count)
        self.running = still

    def _start_step(self, start_s: float) -> None:
        """Schedule the step that starts at ``start_s`` and time it.

        Called again for the same ``start_s`` when more sequences arrive at that instant:
        the sequences already scheduled and the prefill already paid by this step are kept.
        """
        if start_s == self.step_start_s and self.step_new:
            prefill_s = self.step_prefill_s
        else:  # a new step (or every sequence scheduled at this instant was aborted since)
            prefill_s = 0.0
            self.step_new = {}
            self.step_budget = self.profile.token_budget
            self.step_preempted = False
            prefill_s = self._schedule_running(prefill_s)
        if not self.step_preempted:
            prefill_s = self._admit(start_s, prefill_s)
        self.step_start_s = start_s
        self.step_prefill_s = prefill_s
        if not self.step_new:  # nothing runs (the first running sequence is always scheduled)
            self.step_end_s = None
            self.step_start_s = None
            self.step_dur_s = 0.0
            return
        scheduled = self.running
        if len(self.step_new) != len(scheduled):
            scheduled = [s for s in scheduled if s in self.step_new]
        self.step_dur_s = self._decode_step_s(scheduled) + prefill_s
        self.step_end_s = start_s + self.step_dur_s

    def _compute(self, seq: Sequence, prefill_s: float) -> float:
        """Schedule ``seq``'s tokens of this step (blocks already checked); its prefill."""
        todo = seq.prompt_tokens + seq.tokens - seq.computed
        new = min(max(todo, 1), self.step_budget)
        self._take(seq, seq.computed + new)
        self.step_new[seq] = new
        self.step_budget -= new
        if seq.prefilling:
            first = seq.computed == seq.cached_tokens  # the admission's first chunk
            prefill_s += self.profile.prefill_s(min(new, todo), seq.computed, first)
        return prefill_s

    def _schedule_running(self, prefill_s: float) -> float:
        """The running sequences, in order, each with the blocks it needs (preempting).

        ``_compute`` inlined: this runs every step of every replica the simulator replays.
        """
        running = self.running
        step_new = self.step_new
        profile = self.profile
        size = profile.block_size
        usable = profile.usable_blocks
        i = 0
        while i < len(running) and self.step_budget > 0:
            seq = running[i]
            todo = seq.prompt_tokens + seq.tokens - seq.computed
            new = todo if todo > 1 else 1
            if new > self.step_budget:
                new = self.step_budget
            blocks = -(-(seq.computed + new) // size)
            if blocks - seq.blocks > usable - self.blocks_used:
                while self._short_of_blocks(seq, seq.computed + new):
                    victim = running[-1]
                    if victim is seq and len(running) == 1:
                        break  # alone and longer than the cache: it over-commits
                    self._preempt(victim)
                    if victim is seq:
                        return prefill_s  # vLLM stops scheduling running sequences here
            if blocks > seq.blocks:
                self.blocks_used += blocks - seq.blocks
                seq.blocks = blocks
                if self.cache_free_blocks:
                    self._evict()
            if seq.block_hashes:
                self._cache(seq, seq.computed + new)
            step_new[seq] = new
            self.step_budget -= new
            if seq.prefilling:
                prefill_s += profile.prefill_s(min(new, todo), seq.computed)
            i += 1
        return prefill_s

    def _admit(self, start_s: float, prefill_s: float) -> float:
        """Admit from the queue, FCFS, while a slot is free and the head's context fits."""
        while (
            self.waiting
            and len(self.running) < self.profile.max_num_seqs
            and self.step_budget > 0
            and self._head_fits()
        ):
            seq = self.waiting.popleft()
            seq.prefilling = True
            self.running.append(seq)
            if len(self.running) > self.most_running:
                self.most_running = len(self.running)
            if seq.block_hashes:
                self._lookup(seq)
            if seq.admitted_s is None:
                seq.admitted_s = start_s
                seq.cold = self.admitted_total < self.profile.cold_start_requests
                self.admitted_total += 1
                self.observer.admitted(start_s - seq.arrival_s, seq.prompt_tokens)
                if self.profile.enable_prefix_caching:
                    self.prefix_queries_total += seq.prompt_tokens
                    self.prefix_hits_total += seq.cached_tokens
                    self.observer.prefix_cache(seq.prompt_tokens, seq.cached_tokens)
            prefill_s = self._compute(seq, prefill_s)
        return prefill_s

    def _decode_step_s(self, running: list[Sequence]) -> float:
        step_s = self.profile.step_s(len(running))
        if any(s.cold for s in running):
            step_s *= self.profile.cold_start_factor
        return step_s
