"""The pure half of ``inflight bench calibrate-emulator``: fits, the profile, and the
emulator replaying the real engine's requests in virtual time.

No I/O, no clock. The measuring half (``real.py``) hands in what the real engine did; this
module fits the emulator's timing model to it (:func:`fit_profile`), replays the same
requests on the emulator's engine (``inflight.emulator.engine.Engine``, the one the
emulator server and the simulator run) with that profile, closed loop
(:func:`replay_closed_loop`) and all at once for the KV-bound cases (:func:`replay_burst`),
and compares (:func:`compare`); the prefix check's requests share their group's leading token
ids (:func:`prompt_ids`, :func:`prefix_requests`), replayed with the emulator's prefix cache
(:func:`replay_prefix`) and judged on the hit rate and the TTFTs (:func:`prefix_checks`).

The fits, with the emulator's step model (``inflight/emulator/profile.py``):

* time per output token against the batch: ``step(n) = a + b·n`` by least squares over the
  measured batches, so ``step_full = a + b·slots`` and ``step_base_fraction = a ÷ step_full``;
* TTFT against the prompt: a lone request's TTFT is one step plus its prefill,
  ``ttft(P) = c + l·P + q·P²``: ``l`` gives ``prefill_ms_per_1k_tokens`` (ms per 1,000 tokens),
  ``q`` ``prefill_ms_per_1k_tokens_sq`` (dropped when the fit makes it negative) and
  ``c − step(1)`` ``prefill_fixed_ms`` (the engine's cost of a request beyond its tokens);
* ``service_s`` follows from ``step_full`` for the reference request
  (``inflight.emulator.profile``'s formula read backwards).

Worked example: batches 1, 2, 4 at 17, 20, 26 ms → b = 3.0 ms, a = 14.0 ms, step_full =
26.0 ms, base fraction 0.54; a prefill slope of 1.4 ms a token is 1,400 ms per 1k tokens.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence as Seq
from dataclasses import dataclass, replace

from inflight.emulator.engine import Engine, Sequence
from inflight.emulator.profile import Profile
from inflight.prefix_blocks import token_blocks

#: vLLM's CPU build: ``max_num_batched_tokens`` for the OpenAI server (2,048 × world size,
#: ``vllm/engine/arg_utils.py``), chunked prefill on.
VLLM_CPU_BATCHED_TOKENS = 2048

#: The KV-bound cases measured by hand (docs/vllm-cpu.md): name → (requests, prompt, output).
KV_CASES: dict[str, tuple[int, int, int]] = {
    "two-at-a-time": (4, 1800, 200),
    "preemption": (6, 1000, 1000),
}


#: The prefix check's output a request (its TTFT is what is judged; a few tokens keep it short).
PREFIX_OUTPUT_TOKENS = 8

#: The prefix check's tolerances (docs/vllm-cpu.md: measured): hit rates (absolute) and the
#: mean TTFTs (relative), chosen from the runs in results/2026-12-06-calibrate-prefix.
PREFIX_HIT_TOLERANCE = 0.01
PREFIX_TTFT_TOLERANCE = 0.25

#: Prompts are random token ids below this (the models ``make vllm-cpu`` builds have ~8k).
VOCAB = 8000


@dataclass(frozen=True)
class Request:
    """One request as sent: its prompt and output lengths, the client that sent it; in the
    prefix check, the group whose first ``prefix_tokens`` token ids it shares (-1: none)."""

    prompt_tokens: int
    output_tokens: int
    client: int = 0
    prefix_group: int = -1
    prefix_tokens: int = 0


def prompt_ids(req: Request, seed: int | str, first_id: int) -> list[int]:
    """``req``'s prompt as token ids in ``[first_id, VOCAB)``: its group's shared prefix
    (the same ids for every request of the group), then its own ids drawn from ``seed``
    (every id its own without a group: what the real engine's other requests send).

    >>> a = prompt_ids(Request(6, 1, prefix_group=0, prefix_tokens=4), 1, 3)
    >>> b = prompt_ids(Request(6, 1, prefix_group=0, prefix_tokens=4), 2, 3)
    >>> a[:4] == b[:4], a[4:] == b[4:], len(a)
    (True, False, 6)
    """
    shared = req.prefix_tokens if req.prefix_group >= 0 else 0
    head = random.Random(f"calibrate-prefix:{req.prefix_group}")
    own = random.Random(seed)
    return [head.randrange(first_id, VOCAB) for _ in range(shared)] + [
        own.randrange(first_id, VOCAB) for _ in range(req.prompt_tokens - shared)
    ]


def prefix_requests(
    groups: int, rounds: int, prefix_tokens: int, suffix_tokens: int, first_group: int = 0
) -> list[Request]:
    """The prefix check's requests, one client (one after another): ``rounds`` rounds, each
    one request of every group (a shared ``prefix_tokens`` prefix, its own ``suffix_tokens``),
    so a group's first request finds nothing cached and its later ones find its prefix.
    Groups are numbered from ``first_group`` (a repeat of the phase takes new ones: the
    prefixes of the attempt before may still be cached).

    >>> [(r.prefix_group, r.prompt_tokens) for r in prefix_requests(2, 2, 256, 64)]
    [(0, 320), (1, 320), (0, 320), (1, 320)]
    """
    return [
        Request(prefix_tokens + suffix_tokens, PREFIX_OUTPUT_TOKENS, 0, g, prefix_tokens)
        for _ in range(rounds)
        for g in range(first_group, first_group + groups)
    ]


@dataclass(frozen=True)
class Done:
    """One request as answered (seconds from the run's start)."""

    request: Request
    sent_s: float
    first_token_s: float
    finished_s: float

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.sent_s

    @property
    def latency_s(self) -> float:
        return self.finished_s - self.sent_s


@dataclass(frozen=True)
class ClosedPhase:
    """A closed-loop level as the real engine ran it: the requests answered, and the
    engine's own mean time per output token over them (vLLM's decode histogram, its change
    over the phase: ``real.engine_tpot``); None when the engine exports no decode time."""

    done: list[Done]
    engine_tpot_s: float | None
    #: the engine's own mean latency over them (arrival at its API server to the last
    #: token, ``vllm:e2e_request_latency_seconds``); None when it exports none
    engine_latency_s: float | None = None

    @property
    def off_engine(self) -> float:
        """How much longer the client's mean latency was than the engine's own, relative
        (0 without the engine's): time the engine never saw, such as an API server or a
        client starved of the CPU for a moment. The emulator does not model it, so a level
        where it is beyond the tolerance is run again (:mod:`.phases`)."""
        if not self.engine_latency_s:
            return 0.0
        client = sum(d.latency_s for d in self.done) / len(self.done)
        return client / self.engine_latency_s - 1.0


def mean_tpot(done: Seq[Done]) -> float:
    """The mean over ``done`` of each request's time per output token after the first.

    >>> mean_tpot([Done(Request(8, 3), 0.0, 0.1, 0.3), Done(Request(8, 3), 0.0, 0.2, 0.6)])
    0.15
    """
    each = [
        (d.finished_s - d.first_token_s) / (d.request.output_tokens - 1)
        for d in done
        if d.request.output_tokens > 1
    ]
    if not each:
        raise ValueError("no request with more than one output token")
    return sum(each) / len(each)


def at_speed(profile: Profile, replayed: Seq[Done], engine_tpot_s: float) -> tuple[Profile, float]:
    """``profile`` at the speed the engine ran a phase: every duration × ``k``, where ``k`` is
    the engine's own time per token over the phase ÷ what ``profile`` gave on the phase's
    requests (``replayed``: :func:`replay_closed_loop` of ``profile``); (that profile,
    ``k``). ``k`` is how far the machine's speed during the phase was from its probes' (1:
    as they said); what the phase is then judged on is the rest of the model (batching,
    queueing, prefill, KV), not the speed.
    """
    k = engine_tpot_s / mean_tpot(replayed)
    return replace(profile, time_scale=profile.time_scale * k), k


@dataclass(frozen=True)
class Figures:
    """A closed-loop level's figures."""

    concurrency: int
    requests: int
    throughput_rps: float
    mean_latency_s: float
    mean_ttft_s: float


def figures(concurrency: int, done: Seq[Done]) -> Figures:
    """Throughput over the level (first send to last finish) and the mean latencies."""
    if not done:
        raise ValueError("no request finished")
    span_s = max(d.finished_s for d in done) - min(d.sent_s for d in done)
    return Figures(
        concurrency=concurrency,
        requests=len(done),
        throughput_rps=len(done) / span_s,
        mean_latency_s=sum(d.latency_s for d in done) / len(done),
        mean_ttft_s=sum(d.ttft_s for d in done) / len(done),
    )


# --- fits ------------------------------------------------------------------------------


def least_squares(xs: Seq[float], ys: Seq[float], degree: int) -> list[float]:
    """Polynomial coefficients (constant first) minimising the squared error.

    >>> [round(c, 6) for c in least_squares([1, 2, 4], [0.017, 0.020, 0.026], 1)]
    [0.014, 0.003]
    """
    n = degree + 1
    if len(xs) != len(ys) or len(set(xs)) < n:
        raise ValueError(
            f"need {n} distinct x values for a degree-{degree} fit, got {len(set(xs))}"
        )
    # normal equations, solved by Gauss-Jordan elimination (n ≤ 3)
    a = [[sum(x ** (i + j) for x in xs) for j in range(n)] for i in range(n)]
    b = [sum(y * x**i for x, y in zip(xs, ys, strict=True)) for i in range(n)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        a[col], a[pivot], b[col], b[pivot] = a[pivot], a[col], b[pivot], b[col]
        for r in range(n):
            if r != col and a[col][col]:
                f = a[r][col] / a[col][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col], strict=True)]
                b[r] -= f * b[col]
    return [b[i] / a[i][i] for i in range(n)]


@dataclass(frozen=True)
class Fit:
    """The fitted timing model, in seconds (and seconds per token)."""

    step_base_s: float  # a
    step_per_seq_s: float  # b
    ttft_intercept_s: float  # c
    prefill_s_per_token: float  # l
    prefill_s_per_token_sq: float  # q

    def step_s(self, n: int) -> float:
        return self.step_base_s + self.step_per_seq_s * n


def fit(tpot_by_batch: dict[int, float], ttft_by_prompt: dict[int, float]) -> Fit:
    """Fit the step line to ``tpot_by_batch`` and the TTFT curve to ``ttft_by_prompt``."""
    batches = sorted(tpot_by_batch)
    a, b = least_squares(batches, [tpot_by_batch[n] for n in batches], 1)
    if b < 0:  # steps do not get shorter with more sequences: a flat line
        a, b = sum(tpot_by_batch.values()) / len(tpot_by_batch), 0.0
    prompts = sorted(ttft_by_prompt)
    ys = [ttft_by_prompt[p] for p in prompts]
    c, lin, quad = (
        least_squares(prompts, ys, 2)
        if len(prompts) >= 3
        else (*least_squares(prompts, ys, 1), 0.0)
    )
    if quad < 0 or lin < 0:
        c, lin = least_squares(prompts, ys, 1)
        quad = 0.0
    return Fit(a, b, c, max(lin, 0.0), quad)


def fit_profile(
    f: Fit,
    slots: int,
    block_size: int,
    num_gpu_blocks: int,
    max_model_len: int,
    reference_prompt_tokens: int,
    reference_output_tokens: int,
    prefix_caching: bool = False,
) -> Profile:
    """The emulator profile of the fitted engine (time-scale 1, no start-up, no cold start;
    its prefix cache on as the engine's, ``prefix_caching``)."""
    step_full_s = f.step_s(slots)
    base = min(1.0, max(1e-3, f.step_base_s / step_full_s))
    fixed_s = max(0.0, f.ttft_intercept_s - f.step_s(1))  # a 0-token prompt's TTFT, less a step
    partial = Profile(
        max_num_seqs=slots,
        prefill_fixed_ms=fixed_s * 1e3,
        prefill_ms_per_1k_tokens=f.prefill_s_per_token * 1e6,
        prefill_ms_per_1k_tokens_sq=f.prefill_s_per_token_sq * 1e9,
        max_model_len=max_model_len,
        block_size=block_size,
        num_gpu_blocks=num_gpu_blocks,
        max_num_batched_tokens=VLLM_CPU_BATCHED_TOKENS,
        reference_prompt_tokens=reference_prompt_tokens,
        reference_output_tokens=reference_output_tokens,
        service_s=1e9,  # replaced below, once the prefill is known
    )
    service_s = reference_output_tokens * step_full_s + slots * partial.prefill_s(
        reference_prompt_tokens
    )
    return replace(
        partial,
        startup_s=0.0,
        cold_start_requests=0,
        service_s=service_s,
        step_base_fraction=base,
        default_max_tokens=reference_output_tokens,
        enable_prefix_caching=prefix_caching,
    )


# --- the emulator on the same requests ---------------------------------------------------


def _run(
    engine: Engine, pending: list[tuple[float, Sequence, Request]], closed: dict[int, list[Request]]
) -> list[Done]:
    """Drive ``engine`` in virtual time: ``pending`` submissions (time, sequence, request);
    in ``closed``, each client's next requests, sent when its previous one finishes."""
    out: list[Done] = []
    sent: dict[int, tuple[float, Request]] = {}
    now = 0.0
    running: list[Sequence] = []
    while pending or running:
        pending.sort(key=lambda p: p[0])
        hint = engine.next_finish_s()
        if pending and (hint is None or pending[0][0] <= hint):
            now, seq, req = pending.pop(0)
            sent[id(seq)] = (now, req)
            engine.submit(seq, now)
            running.append(seq)
            continue
        assert hint is not None, "requests left but the engine is idle"
        now = hint
        for seq in engine.advance(now):
            if not seq.done:
                continue
            running.remove(seq)
            sent_s, req = sent.pop(id(seq))
            assert seq.first_token_s is not None and seq.finished_s is not None
            out.append(Done(req, sent_s, seq.first_token_s, seq.finished_s))
            queue = closed.get(req.client)
            if queue:
                nxt = queue.pop(0)
                at = seq.finished_s
                pending.append((at, _sequence(nxt, at, engine.profile.block_size), nxt))
    return out


#: Seeds of the emulated requests' own token ids: every one its own, so only a group's
#: prefix is shared (the hashes' values never matter, only which are equal).
_OWN_IDS = itertools.count()


def _sequence(req: Request, arrival_s: float, block_size: int) -> Sequence:
    """``req`` in the emulator's engine; with a prefix group, its prompt's block hashes
    (:func:`prompt_ids` chained as vLLM keys its blocks, ``inflight.prefix_blocks``)."""
    hashes: tuple[int, ...] = ()
    if req.prefix_group >= 0:
        ids = prompt_ids(req, f"emulated:{next(_OWN_IDS)}", 0)
        hashes = tuple(token_blocks(ids, block_size))
    return Sequence(req.prompt_tokens, req.output_tokens, arrival_s, block_hashes=hashes)


def _closed_loop(engine: Engine, requests: Seq[Request]) -> list[Done]:
    clients: dict[int, list[Request]] = {}
    for r in requests:
        clients.setdefault(r.client, []).append(r)
    pending = []
    for queue in clients.values():
        first = queue.pop(0)
        pending.append((0.0, _sequence(first, 0.0, engine.profile.block_size), first))
    return _run(engine, pending, clients)


def replay_closed_loop(profile: Profile, requests: Seq[Request]) -> list[Done]:
    """``requests`` closed loop: each client sends its next one when its last one finishes."""
    return _closed_loop(Engine(profile), requests)


@dataclass(frozen=True)
class PrefixPhase:
    """The prefix check's requests as an engine answered them, and its prefix-cache
    counters over them, in tokens (vLLM's ``vllm:prefix_cache_hits`` and ``_queries``)."""

    done: list[Done]
    hits: float
    queries: float
    #: the real engine's counters before the phase (hits, queries): what the probes and the
    #: other phases found cached (their prompts are random: ~0 expected); None: emulated
    earlier: tuple[float, float] | None = None
    #: the real engine's own mean TTFT over them (arrival at its API server to the first
    #: token, ``vllm:time_to_first_token_seconds``); None: emulated, or not exported
    engine_ttft_s: float | None = None

    @property
    def off_engine(self) -> float:
        """How much longer the clients' mean TTFT was than the engine's own, relative (0
        without the engine's): on this 2-core VM other jobs' CPU load added ~30 ms to some
        requests' first token outside the engine (a cached request's ~22 ms became 50-60),
        which the emulator does not model, so the phase is run again (:mod:`.phases`)."""
        if not self.engine_ttft_s or not self.done:
            return 0.0
        client = sum(d.ttft_s for d in self.done) / len(self.done)
        return client / self.engine_ttft_s - 1.0


def replay_prefix(profile: Profile, requests: Seq[Request]) -> PrefixPhase:
    """``requests`` closed loop on the emulator, its prefix cache on as ``profile`` says."""
    engine = Engine(profile)
    done = _closed_loop(engine, requests)
    return PrefixPhase(done, engine.prefix_hits_total, engine.prefix_queries_total)


@dataclass(frozen=True)
class TracePoint:
    t_s: float
    running: int
    waiting: int
    preemptions: int  # vllm:num_preemptions_total
    kv_usage: float
    finished: int = 0  # requests finished by then


def replay_burst(
    profile: Profile, requests: Seq[Request], every_s: float
) -> tuple[list[Done], list[TracePoint]]:
    """``requests`` all sent at 0; (running, waiting, preemptions, KV) every ``every_s``."""
    engine = Engine(profile)

    class Counter:
        preemptions = 0

        def admitted(self, queue_s: float, prompt_tokens: int) -> None: ...
        def tokens(self, count: int, itl_s: float, itl_count: int) -> None: ...
        def first_token(self, ttft_s: float) -> None: ...
        def finished(
            self, reason: str, e2e_s: float, prompt_tokens: int, generation_tokens: int
        ) -> None: ...

        def preempted(self, count: int) -> None:
            self.preemptions += count

        def prefix_cache(self, queries: int, hits: int) -> None: ...

    counter = Counter()
    engine.observer = counter
    seqs = [Sequence(r.prompt_tokens, r.output_tokens, 0.0) for r in requests]
    for s in seqs:
        engine.submit(s, 0.0)
    points = []
    t = 0.0
    while True:
        engine.advance(t)
        finished = sum(s.done for s in seqs)
        points.append(
            TracePoint(
                t,
                engine.num_running,
                engine.num_waiting,
                counter.preemptions,
                engine.kv_cache_usage(),
                finished,
            )
        )
        if all(s.done for s in seqs):
            break
        t += every_s
    done = [
        Done(r, 0.0, s.first_token_s or 0.0, s.finished_s or 0.0)
        for r, s in zip(requests, seqs, strict=True)
    ]
    return done, points


# --- the comparison ---------------------------------------------------------------------


def ratio(emulated: float, real: float) -> float:
    return emulated / real if real else math.inf


@dataclass(frozen=True)
class Check:
    what: str
    real: float
    emulated: float
    ok: bool
    detail: str = ""


def compare(real: Figures, emulated: Figures, tolerance: float) -> list[Check]:
    """Throughput and mean latency within ``tolerance`` (a fraction) of the real engine's."""
    out = []
    for what, r, e in (
        ("throughput_rps", real.throughput_rps, emulated.throughput_rps),
        ("mean_latency_s", real.mean_latency_s, emulated.mean_latency_s),
    ):
        err = ratio(e, r) - 1.0
        out.append(
            Check(f"c={real.concurrency} {what}", r, e, abs(err) <= tolerance, f"{err:+.1%}")
        )
    return out


def most_at_once(done: Seq[Done]) -> int:
    """The most requests between their first and last token at once, from each request's
    own times (events its client recorded, not samples of the engine's gauge, which can
    fall on either side of a short peak). A request runs from its admission, before its
    first token, so this is the most running at once where each admission of a request
    came while the others it ran with were past their first token; a preempted request
    counts through its pause. An end and a start at the same instant do not overlap.

    >>> most_at_once([Done(Request(1, 1), 0, 1, 5), Done(Request(1, 1), 0, 2, 6),
    ...               Done(Request(1, 1), 0, 5, 9)])
    2
    """
    events = sorted([(d.first_token_s, 1) for d in done] + [(d.finished_s, -1) for d in done])
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def kv_checks(case: str, points: Seq[TracePoint], done: Seq[Done]) -> dict[str, bool | int]:
    """What a KV-bound burst showed: the most running at once (:func:`most_at_once`, from
    the requests' own times), the preemptions, whether running fell from 4 while requests
    waited before any request finished (only the cache preempting lowers it then), and
    whether requests waited while fewer than the slots ran (the last two from the trace's
    samples).

    The fall is not asked to reach a given level: the cache preempts one sequence at a
    time as the contexts grow (4, 3, 2), and a sample lands on whichever level is current;
    on this 2-core VM vLLM's ``/metrics`` once went unanswered for 3 s of such a burst
    (issue 41: seen 4, 3, then 1 after a finish), which made "4 then 2" a matter of when
    the scrape came back."""
    seen_four = False
    fell = False
    for p in points:
        seen_four = seen_four or p.running == 4
        if seen_four and 0 < p.running < 4 and p.waiting > 0 and p.finished == 0:
            fell = True
    waited_below_slots = any(0 < p.running < 4 and p.waiting > 0 for p in points)
    return {
        "max_running": most_at_once(done),
        "preemptions": points[-1].preemptions if points else 0,
        "fell_from_four_before_a_finish": fell,
        "waited_below_slots": waited_below_slots,
    }


def running_levels(points: Seq[TracePoint]) -> list[int]:
    """The running counts a trace went through while something ran, repeats dropped:
    e.g. [1, 4, 3, 2, 1, 2, 1] for a burst whose cache preempted twice."""
    out: list[int] = []
    for p in points:
        if p.running and (not out or out[-1] != p.running):
            out.append(p.running)
    return out


@dataclass(frozen=True)
class PrefixFigures:
    """The prefix check's figures on one side: the prefix-cache hit rate (hits ÷ queries,
    tokens) and the mean TTFT of each group's first request (nothing of it cached) and of
    its later ones (its group's prefix cached)."""

    requests: int
    hit_rate: float
    ttft_first_s: float
    ttft_cached_s: float


def prefix_figures(phase: PrefixPhase) -> PrefixFigures:
    """:class:`PrefixFigures` of ``phase`` (requests in the order they were sent)."""
    seen: set[int] = set()
    first: list[float] = []
    later: list[float] = []
    for d in sorted(phase.done, key=lambda d: d.sent_s):
        group = d.request.prefix_group
        (later if group in seen else first).append(d.ttft_s)
        seen.add(group)
    if not first or not later:
        raise ValueError("the prefix check needs a group sent at least twice")
    return PrefixFigures(
        requests=len(phase.done),
        hit_rate=phase.hits / phase.queries if phase.queries else 0.0,
        ttft_first_s=sum(first) / len(first),
        ttft_cached_s=sum(later) / len(later),
    )


def expected_hit_rate(requests: Seq[Request], block_size: int) -> float:
    """The hit rate of ``requests`` sent one after another when nothing is evicted: every
    request after its group's first finds the prefix's full blocks, never its prompt's last
    token (vLLM's ``num_tokens − 1``).

    >>> round(expected_hit_rate(prefix_requests(3, 4, 1024, 128), 128), 4)
    0.6667
    """
    seen: set[int] = set()
    hits = 0
    for r in requests:
        if r.prefix_group in seen:
            hits += min(r.prefix_tokens, r.prompt_tokens - 1) // block_size * block_size
        seen.add(r.prefix_group)
    return hits / sum(r.prompt_tokens for r in requests)


def prefix_checks(
    real: PrefixFigures, emulated: PrefixFigures, hit_tolerance: float, ttft_tolerance: float
) -> list[Check]:
    """The prefix check: both sides found prefixes cached at all; the hit rates within
    ``hit_tolerance`` of each other (absolute: a fraction of the tokens); each TTFT within
    ``ttft_tolerance`` (relative) of the real engine's."""
    hit_err = emulated.hit_rate - real.hit_rate
    out = [
        Check(
            "prefix cached at all (real, emulated)",
            real.hit_rate,
            emulated.hit_rate,
            real.hit_rate > 0 and emulated.hit_rate > 0,
        ),
        Check("prefix hit_rate", real.hit_rate, emulated.hit_rate,
              abs(hit_err) <= hit_tolerance, f"{hit_err:+.3f}"),
    ]  # fmt: skip
    for what, r, e in (
        ("prefix ttft_first_s", real.ttft_first_s, emulated.ttft_first_s),
        ("prefix ttft_cached_s", real.ttft_cached_s, emulated.ttft_cached_s),
    ):
        err = ratio(e, r) - 1.0
        out.append(Check(what, r, e, abs(err) <= ttft_tolerance, f"{err:+.1%}"))
    return out
