"""The emulator's pure core: slots, FCFS queue, step clock, cold start, abort; the profile."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inflight.emulator.engine import Engine, Sequence
from inflight.emulator.metrics import EngineMetrics, Histogram
from inflight.emulator.profile import Profile, ProfileError

REF = Profile(startup_s=0.0, cold_start_requests=0)


def ref_seq(arrival_s: float = 0.0, **kw: object) -> Sequence:
    return Sequence(prompt_tokens=3000, output_tokens=300, arrival_s=arrival_s, **kw)  # type: ignore[arg-type]


def test_reference_profile_worked_example() -> None:
    # 4.5 s per request at a full batch: 300 steps of 14.2 ms plus 4 prefills of 60 ms.
    assert REF.prefill_s(3000) == pytest.approx(0.06)
    assert REF.step_full_s == pytest.approx(0.0142)
    assert REF.step_s(4) == pytest.approx(0.0142)
    assert REF.step_s(1) == pytest.approx(0.0142 * 0.625)
    assert REF.predicted_throughput_rps == pytest.approx(4 / 4.5)


def test_time_scale_multiplies_every_duration() -> None:
    fast = Profile(time_scale=0.1)
    assert fast.step_full_s == pytest.approx(REF.step_full_s * 0.1)
    assert fast.prefill_s(3000) == pytest.approx(REF.prefill_s(3000) * 0.1)
    assert fast.startup_wall_s == pytest.approx(3.0)
    assert fast.predicted_throughput_rps == pytest.approx(REF.predicted_throughput_rps * 10)


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"max_num_seqs": 0}, "--max-num-seqs"),
        ({"time_scale": 0.0}, "--time-scale"),
        ({"startup_s": -1.0}, "--startup-s"),
        ({"service_s": 0.0}, "--service-s"),
        ({"cold_start_factor": 0.5}, "--cold-start-factor"),
        ({"default_max_tokens": 0}, "--default-max-tokens"),
        ({"step_base_fraction": 0.0}, "--step-base-fraction"),
        ({"tick_ms": 0.0}, "--tick-ms"),
        ({"service_s": 0.2}, "--service-s"),  # all prefill, no time left to decode
    ],
)
def test_bad_profile_names_the_flag(kwargs: dict[str, float], flag: str) -> None:
    with pytest.raises(ProfileError, match=flag):
        Profile(**kwargs)  # type: ignore[arg-type]


def test_full_batch_takes_the_service_time() -> None:
    engine = Engine(REF)
    seqs = [ref_seq() for _ in range(4)]
    for s in seqs:
        engine.submit(s, 0.0)
    engine.advance(10.0)
    assert [s.finished_reason for s in seqs] == ["length"] * 4
    assert all(s.finished_s == pytest.approx(4.5) for s in seqs)
    assert all(s.tokens == 300 for s in seqs)


def test_eight_on_four_slots_run_fcfs_in_two_groups() -> None:
    engine = Engine(REF)
    seqs = [ref_seq(arrival_s=i * 1e-3) for i in range(8)]
    for i, s in enumerate(seqs):
        engine.submit(s, i * 1e-3)
    # The first arrival starts a step alone; later ones join at its end, as in vLLM.
    assert (engine.num_running, engine.num_waiting) == (1, 7)
    engine.advance(0.2)
    assert (engine.num_running, engine.num_waiting) == (4, 4)
    engine.advance(3.0)
    assert (engine.num_running, engine.num_waiting) == (4, 4)
    assert all(s.admitted_s is None for s in seqs[4:])
    engine.advance(20.0)
    assert (engine.num_running, engine.num_waiting) == (0, 0)
    admitted = [s.admitted_s or 0.0 for s in seqs]
    assert admitted == sorted(admitted)  # FCFS
    # Each late one takes the slot an early one frees, at that very step end.
    finished_early = sorted(s.finished_s or 0.0 for s in seqs[:4])
    assert admitted[4:] == pytest.approx(finished_early)
    assert min(s.finished_s or 0.0 for s in seqs[4:]) > max(finished_early)
    assert engine.step_end_s is None  # idle


def test_saturated_throughput_is_exact_however_coarse_the_wakeups() -> None:
    """64 queued reference requests: 4 / 4.5 s per request, with wake-ups 10 ms or 1 s apart."""
    for wake_s in (0.01, 1.0):
        engine = Engine(REF)
        seqs = [ref_seq() for _ in range(64)]
        for s in seqs:
            engine.submit(s, 0.0)
        now = 0.0
        while engine.step_end_s is not None:
            now += wake_s
            engine.advance(now)
        last = max(s.finished_s or 0.0 for s in seqs)
        assert last == pytest.approx(64 / REF.predicted_throughput_rps, rel=1e-9)


def test_step_grows_with_the_batch_and_prefill_delays_first_token() -> None:
    alone = Engine(REF)
    s = ref_seq()
    alone.submit(s, 0.0)
    alone.advance(100.0)
    assert s.first_token_s == pytest.approx(REF.prefill_s(3000) + REF.step_s(1))
    assert s.finished_s == pytest.approx(REF.prefill_s(3000) + 300 * REF.step_s(1))
    assert (s.finished_s or 0.0) < 4.5  # a lone request is faster than at a full batch


def test_cold_start_slows_the_first_requests() -> None:
    cold = Profile(startup_s=0.0, cold_start_requests=4, cold_start_factor=1.6)
    engine = Engine(cold)
    first = [ref_seq() for _ in range(4)]
    for s in first:
        engine.submit(s, 0.0)
    engine.advance(100.0)
    expected = 4 * REF.prefill_s(3000) + 300 * REF.step_s(4) * 1.6
    assert first[0].finished_s == pytest.approx(expected)
    later = [ref_seq(arrival_s=100.0) for _ in range(4)]
    for s in later:
        engine.submit(s, 100.0)
    engine.advance(200.0)
    assert (later[0].finished_s or 0.0) - 100.0 == pytest.approx(4.5)


def test_abort_frees_the_slot_for_the_next_waiter() -> None:
    one = Profile(max_num_seqs=1, startup_s=0.0, cold_start_requests=0)
    engine = Engine(one)
    a, b = ref_seq(), ref_seq()
    engine.submit(a, 0.0)
    engine.submit(b, 0.0)
    engine.advance(0.5)
    assert a.tokens > 0 and b.admitted_s is None
    assert engine.abort(a, 0.5)
    assert a.finished_reason == "abort"
    assert engine.num_running == 0 and engine.num_waiting == 1
    engine.advance(0.6)  # the aborted step ends within a step; b takes the slot
    assert b.admitted_s is not None and engine.num_running == 1
    assert not engine.abort(a, 0.7)  # already gone: a no-op


def test_abort_of_a_waiting_sequence() -> None:
    one = Profile(max_num_seqs=1, startup_s=0.0, cold_start_requests=0)
    engine = Engine(one)
    a, b = ref_seq(), ref_seq()
    engine.submit(a, 0.0)
    engine.submit(b, 0.0)
    assert engine.abort(b, 0.1)
    assert engine.num_waiting == 0 and b.finished_reason == "abort" and b.tokens == 0


def test_natural_stop_and_next_finish_hint() -> None:
    engine = Engine(REF)
    s = ref_seq(natural_stop=True)
    engine.submit(s, 0.0)
    hint = engine.next_finish_s()
    assert hint is not None
    engine.advance(hint - 1e-3)
    assert not s.done
    engine.advance(hint)
    assert s.finished_reason == "stop"
    assert engine.next_finish_s() is None


def test_wants_steps_only_for_streams() -> None:
    engine = Engine(REF)
    engine.submit(ref_seq(), 0.0)
    assert not engine.wants_steps()
    engine.submit(ref_seq(stream=True), 0.0)  # queued for the next step, a free slot waits
    assert engine.wants_steps()


def test_metrics_observer_counts_tokens_and_latencies() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    engine_box: list[Engine] = []
    metrics = EngineMetrics(
        "m",
        lambda: (engine_box[0].num_running, engine_box[0].num_waiting, 0.0),
        registry,
        REF.max_model_len,
    )
    engine = Engine(REF, observer=metrics)
    engine_box.append(engine)
    seqs = [ref_seq() for _ in range(6)]
    for s in seqs:
        engine.submit(s, 0.0)
    label = {"model_name": "m", "engine": "0"}
    assert registry.get_sample_value("vllm:num_requests_waiting", label) == 2
    engine.advance(100.0)
    assert registry.get_sample_value("vllm:generation_tokens_total", label) == 6 * 300
    assert registry.get_sample_value("vllm:prompt_tokens_total", label) == 6 * 3000
    ok = {**label, "finished_reason": "length"}
    assert registry.get_sample_value("vllm:request_success_total", ok) == 6
    assert registry.get_sample_value("vllm:inter_token_latency_seconds_count", label) == 6 * 299
    assert registry.get_sample_value("vllm:time_to_first_token_seconds_count", label) == 6
    assert registry.get_sample_value("vllm:e2e_request_latency_seconds_count", label) == 6
    queued = registry.get_sample_value("vllm:request_queue_time_seconds_sum", label)
    assert queued == pytest.approx(2 * 4.5)
    for name, tokens in (("prompt", 3000), ("generation", 300)):
        assert registry.get_sample_value(f"vllm:request_{name}_tokens_count", label) == 6
        assert registry.get_sample_value(f"vllm:request_{name}_tokens_sum", label) == 6 * tokens


def test_histogram_takes_many_equal_observations() -> None:
    h = Histogram((0.1, 1.0))
    h.observe(0.05, 3)
    h.observe(0.5)
    h.observe(5.0, 2)
    assert h.buckets() == [("0.1", 3), ("1.0", 4), ("+Inf", 6)]
    assert math.isclose(h.total, 0.15 + 0.5 + 10.0)


# --- properties: any mix of arrivals, aborts and wake-ups ---------------------------------
_op = st.tuples(
    st.sampled_from(["submit", "abort", "advance"]),
    st.floats(min_value=0.0, max_value=0.5),  # time step before the op, s
    st.integers(min_value=1, max_value=40),  # output tokens (submit) / which one (abort)
)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(_op, min_size=1, max_size=60),
    slots=st.integers(min_value=1, max_value=5),
    stream=st.booleans(),
)
def test_invariants_hold_for_any_schedule(
    ops: list[tuple[str, float, int]], slots: int, stream: bool
) -> None:
    profile = Profile(
        max_num_seqs=slots, startup_s=0.0, service_s=1.0, reference_prompt_tokens=100,
        reference_output_tokens=20, cold_start_requests=2,
    )  # fmt: skip
    engine = Engine(profile)
    seqs: list[Sequence] = []
    now = 0.0
    for op, dt, n in ops:
        now += dt
        if op == "submit":
            seq = Sequence(prompt_tokens=50, output_tokens=n, arrival_s=now, stream=stream)
            seqs.append(seq)
            engine.submit(seq, now)
        elif op == "abort" and seqs:
            engine.abort(seqs[n % len(seqs)], now)
        else:
            engine.advance(now)
        assert engine.num_running <= slots
        if engine.step_end_s is None:  # idle: nothing may wait or run
            assert engine.num_waiting == engine.num_running == 0
        hint = engine.next_finish_s()
        assert (hint is None) == (engine.step_end_s is None)
        if hint is not None:
            assert hint >= (engine.step_end_s or 0.0)
    engine.advance(now + 1e6)
    assert engine.num_running == engine.num_waiting == 0
    for seq in seqs:
        assert seq.done
        if seq.finished_reason == "abort":
            assert seq.tokens < seq.output_tokens
        else:
            assert seq.tokens == seq.output_tokens
            assert seq.arrival_s <= (seq.admitted_s or 0) < (seq.first_token_s or 0)
            assert (seq.first_token_s or 0) <= (seq.finished_s or 0)
    # FCFS: among sequences that were admitted, admission follows arrival order.
    admitted = [s.admitted_s for s in seqs if s.admitted_s is not None]
    assert admitted == sorted(admitted)


@settings(max_examples=60, deadline=None)
@given(
    outputs=st.lists(st.integers(min_value=1, max_value=30), min_size=1, max_size=12),
    wake_s=st.floats(min_value=0.001, max_value=2.0),
)
def test_wakeup_granularity_never_changes_the_timeline(outputs: list[int], wake_s: float) -> None:
    """Advancing in coarse jumps gives exactly the finish times of advancing at every hint."""

    def run(step: float | None) -> list[float]:
        engine = Engine(REF)
        seqs = [Sequence(3000, n, 0.0) for n in outputs]
        for s in seqs:
            engine.submit(s, 0.0)
        now = 0.0
        while engine.step_end_s is not None:
            hint = engine.next_finish_s()
            assert hint is not None
            now = hint if step is None else now + step
            engine.advance(now)
        return [s.finished_s or 0.0 for s in seqs]

    assert run(wake_s) == pytest.approx(run(None), abs=1e-9)


# --- the fast path (Engine._skip_plain_steps): identical to replaying step by step ----------


class _Recorder:
    """Every observer call, in order, values exact."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []

    def admitted(self, queue_s: float, prompt_tokens: int) -> None:
        self.calls.append(("admitted", queue_s, prompt_tokens))

    def tokens(self, count: int, itl_s: float, itl_count: int) -> None:
        self.calls.append(("tokens", count, itl_s, itl_count))

    def first_token(self, ttft_s: float) -> None:
        self.calls.append(("first_token", ttft_s))

    def preempted(self, count: int) -> None:
        self.calls.append(("preempted", count))

    def finished(
        self, reason: str, e2e_s: float, prompt_tokens: int, generation_tokens: int
    ) -> None:
        self.calls.append(("finished", reason, e2e_s, prompt_tokens, generation_tokens))

    def prefix_cache(self, queries: int, hits: int) -> None:
        self.calls.append(("prefix_cache", queries, hits))


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "submit", "submit", "advance", "abort", "stream"]),
        st.floats(min_value=0.0, max_value=3.0),  # gap before the op, s
        st.integers(min_value=0, max_value=4000),  # prompt tokens
        st.integers(min_value=1, max_value=400),  # output tokens
    ),
    min_size=1,
    max_size=40,
)


def _replay(
    ops: list[tuple[str, float, int, int]], fast: bool, observed: bool
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[float | None]]:
    """Run ``ops`` on one engine; return the sequences' fields, observer calls, wake hints."""
    recorder = _Recorder()
    profile = Profile(startup_s=0.0, cold_start_requests=3)
    engine = Engine(profile, fast_path=fast)
    if observed:
        engine.observer = recorder
    seqs: list[Sequence] = []
    hints: list[float | None] = []
    now = 0.0
    for i, (op, gap, prompt, output) in enumerate(ops):
        now += gap
        if op in ("submit", "stream"):
            seq = Sequence(prompt, output, arrival_s=now, stream=op == "stream")
            seqs.append(seq)
            engine.submit(seq, now)
        elif op == "abort" and seqs:
            engine.abort(seqs[i % len(seqs)], now)
        else:
            engine.advance(now)
        hints.append(engine.next_finish_s())
    engine.advance(now + 10_000.0)
    fields: list[tuple[object, ...]] = [
        (s.tokens, s.admitted_s, s.first_token_s, s.last_token_s, s.finished_s, s.finished_reason)
        for s in seqs
    ]
    return fields, recorder.calls, hints


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, observed=st.booleans())
def test_fast_path_is_identical_to_step_by_step(
    ops: list[tuple[str, float, int, int]], observed: bool
) -> None:
    # Bit-identical: every time, token count and observer call, not approximately equal.
    assert _replay(ops, fast=True, observed=observed) == _replay(ops, fast=False, observed=observed)


def test_fast_path_skips_steps_but_lands_on_the_same_instant() -> None:
    fast, slow = Engine(REF), Engine(REF, fast_path=False)
    for engine in (fast, slow):
        for _ in range(4):
            engine.submit(ref_seq(), 0.0)
    for now in (0.5, 1.7, 3.2, 4.49, 4.51, 9.0):
        fast.advance(now)
        slow.advance(now)
        assert fast.step_end_s == slow.step_end_s
        assert [s.tokens for s in fast.running] == [s.tokens for s in slow.running]
    assert all(s.finished_s == pytest.approx(4.5) for s in fast.running) or not fast.running


def test_next_finish_counts_a_short_request_waiting_for_the_next_step() -> None:
    # A 300-token request runs; a 20-token one arrives mid-step and is admitted at the next
    # step: it finishes long before the running one, so the wake-up hint must not be later
    # than its finish (the emulator answered it late before: its timer slept until the
    # long one's end).
    engine = Engine(REF)
    long = ref_seq()
    engine.submit(long, 0.0)
    short = Sequence(prompt_tokens=100, output_tokens=20, arrival_s=0.001)
    engine.submit(short, 0.001)
    hint = engine.next_finish_s()
    assert hint is not None
    engine.advance(10.0)
    assert short.finished_s is not None and long.finished_s is not None
    assert short.finished_s < long.finished_s
    assert hint >= engine_step_floor(short)
    assert hint <= short.finished_s + 1e-6


def engine_step_floor(seq: Sequence) -> float:
    """The hint may be early, but not before the sequence was even admitted."""
    assert seq.admitted_s is not None
    return seq.admitted_s
