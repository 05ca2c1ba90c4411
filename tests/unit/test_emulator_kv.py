"""The emulator's KV cache, as vLLM's scheduler keeps it: block admission, the watermark,
preemption by recompute, the late preemption counter, chunked prefill, quadratic prefill.

The engine is pure: every test steps its clock (``advance(now_s)``), nothing sleeps. The
KV-bound cases are those measured on the real engine (docs/vllm-cpu.md): 40 blocks of 128
tokens, ``--max-num-seqs 4``, vLLM's CPU token budget of 2,048.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from inflight.emulator.engine import Engine, Sequence
from inflight.emulator.metrics import EngineMetrics, cache_config_info
from inflight.emulator.profile import Profile, ProfileError

KV = Profile(
    max_num_seqs=4,
    startup_s=0.0,
    cold_start_requests=0,
    max_model_len=2048,
    block_size=128,
    num_gpu_blocks=40,
    max_num_batched_tokens=2048,
    service_s=2.0,
    reference_prompt_tokens=64,
    reference_output_tokens=64,
)


def trace(engine: Engine, seqs: list[Sequence], dt_s: float = 0.01) -> list[tuple[int, int]]:
    """(running, waiting) every ``dt_s`` until every sequence finished; consecutive repeats
    dropped."""
    out: list[tuple[int, int]] = []
    now = 0.0
    while not all(s.done for s in seqs):
        now += dt_s
        engine.advance(now)
        point = (engine.num_running, engine.num_waiting)
        if not out or out[-1] != point:
            out.append(point)
        assert now < 1e4, "never finished"
    return out


def submit_all(engine: Engine, n: int, prompt: int, output: int) -> list[Sequence]:
    seqs = [Sequence(prompt, output, arrival_s=0.0) for _ in range(n)]
    for s in seqs:
        engine.submit(s, 0.0)
    return seqs


def test_four_long_prompts_run_two_at_a_time_without_preemption() -> None:
    # 1,800 + 200 tokens need 16 blocks each at the end; 39 usable blocks hold two.
    engine = Engine(KV)
    seqs = submit_all(engine, 4, 1800, 200)
    points = trace(engine, seqs)
    assert max(r for r, _ in points) == 2
    assert (2, 2) in points
    assert engine.preemptions_total == 0
    assert all(s.tokens == 200 and s.finished_reason == "length" for s in seqs)
    assert engine.blocks_used == 0 and engine.kv_cache_usage() == 0


def test_kv_usage_is_blocks_held_over_the_usable_blocks() -> None:
    engine = Engine(KV)
    seqs = submit_all(engine, 4, 1800, 200)
    now = 0.0
    while seqs[0].tokens < 199:
        now += 0.01
        engine.advance(now)
    # two sequences of 1,800 + 199 (+1 computing) tokens: 16 blocks each of 39
    assert engine.blocks_used == 32
    assert engine.kv_cache_usage() == pytest.approx(32 / 39)  # vLLM showed 0.82


def test_six_long_outputs_fill_the_cache_and_preempt_four_to_two() -> None:
    engine = Engine(KV)
    seqs = submit_all(engine, 6, 1000, 1000)
    points = trace(engine, seqs)
    running = [r for r, _ in points]
    assert running[: running.index(4) + 1][-1] == 4  # four start (8 blocks each)
    after = running[running.index(4) :]
    assert 3 in after and 2 in after  # a preemption at 10 blocks each, another at 14
    assert after.index(3) < after.index(2)
    assert engine.preemptions_total >= 2
    preempted = [s for s in seqs if s.preemptions]
    assert preempted, "nothing was preempted"
    # recompute keeps what a sequence produced: every one ends with its 1,000 tokens
    assert all(s.tokens == 1000 and s.finished_reason == "length" for s in seqs)
    assert engine.blocks_used == 0


def test_the_preemption_counter_rises_when_the_preempted_sequence_produces_again() -> None:
    registry = CollectorRegistry()
    engine = Engine(KV)
    metrics = EngineMetrics("m", lambda: (0, 0, 0.0), registry, KV.max_model_len)
    engine.observer = metrics
    seqs = submit_all(engine, 6, 1000, 1000)
    now = 0.0
    while engine.preemptions_total == 0:
        now += 0.01
        engine.advance(now)
    victim = next(s for s in seqs if s.preemptions)
    assert metrics.preemptions == 0  # vLLM: not yet, the victim has produced nothing since
    assert engine.waiting[0] is victim  # back at the head of the queue
    tokens = victim.tokens
    while victim.tokens == tokens:
        now += 0.01
        engine.advance(now)
    assert metrics.preemptions >= 1
    engine.advance(1e4)
    assert metrics.preemptions == engine.preemptions_total


def test_a_resumed_sequence_pays_the_prefill_of_its_whole_context() -> None:
    engine = Engine(KV)
    seqs = submit_all(engine, 6, 1000, 1000)
    now = 0.0
    while engine.preemptions_total == 0:
        now += 0.01
        engine.advance(now)
    victim = next(s for s in seqs if s.preemptions)
    assert victim.computed == 0 and victim.blocks == 0 and victim.tokens > 0
    context = victim.prompt_tokens + victim.tokens
    # admitted again, its whole context (prompt and the tokens it produced) is recomputed,
    # in chunks as the token budget allows, before its next token: step by step
    recomputed, tokens = 0, victim.tokens
    while victim.tokens == tokens:
        recomputed += engine.step_new.get(victim, 0)
        assert engine.step_prefill_s >= KV.prefill_s(engine.step_new.get(victim, 0))
        assert engine.step_end_s is not None
        engine.advance(engine.step_end_s)
    assert recomputed == context


def test_the_watermark_keeps_blocks_free_at_admission() -> None:
    # 9 blocks (1,100 tokens) running; a second 1,100-token prompt fits in the 30 free
    # blocks, but not with a watermark of 0.6 (24 blocks) to spare.
    for watermark, admitted in ((0.0, 2), (0.6, 1)):
        engine = Engine(replace(KV, watermark=watermark))
        submit_all(engine, 1, 1100, 100)
        engine.advance(0.5)
        engine.submit(Sequence(1100, 100, arrival_s=0.5), 0.5)
        engine.advance(1.0)
        assert engine.num_running == admitted, watermark


def test_a_lone_sequence_ignores_the_watermark() -> None:
    # vLLM applies the watermark only when something already runs.
    engine = Engine(replace(KV, watermark=0.9))
    submit_all(engine, 1, 1100, 10)
    assert engine.num_running == 1


def test_chunked_prefill_gives_the_first_token_after_the_last_chunk() -> None:
    profile = replace(KV, max_model_len=4096, num_gpu_blocks=80)
    engine = Engine(profile)
    (seq,) = submit_all(engine, 1, 3000, 5)
    first_step_s = engine.step_dur_s
    assert engine.step_new[seq] == 2048
    engine.advance(first_step_s)
    assert seq.tokens == 0 and seq.computed == 2048  # a chunk: no token yet
    assert engine.step_new[seq] == 3000 - 2048
    engine.advance(first_step_s + engine.step_dur_s)
    assert seq.tokens == 1 and seq.first_token_s == pytest.approx(
        2 * profile.step_s(1) + profile.prefill_s(3000)
    )


def test_prefill_grows_with_the_square_of_the_context() -> None:
    p = Profile(prefill_ms_per_1k_tokens=10.0, prefill_ms_per_1k_tokens_sq=4.0)
    assert p.prefill_s(1000) == pytest.approx(0.010 + 0.004)
    assert p.prefill_s(2000) == pytest.approx(0.020 + 0.016)
    # chunks cost what the whole prompt costs
    assert p.prefill_s(1000) + p.prefill_s(1000, 1000) == pytest.approx(p.prefill_s(2000))
    assert Profile().prefill_s(3000) == pytest.approx(0.06)  # default: linear, as before


def test_the_default_cache_holds_every_slot_at_max_model_len() -> None:
    p = Profile()
    assert p.usable_blocks * p.block_size == p.max_num_seqs * p.max_model_len
    engine = Engine(Profile(startup_s=0.0))
    seqs = submit_all(engine, 4, p.max_model_len - 300, 300)
    assert engine.num_running == 4
    engine.advance(1e4)
    assert engine.preemptions_total == 0 and all(s.tokens == 300 for s in seqs)


@pytest.mark.parametrize(
    ("fields", "flag"),
    [
        ({"num_gpu_blocks": 10}, "--num-gpu-blocks"),  # 9 × 128 < --max-model-len 32768
        ({"num_gpu_blocks": 1}, "--num-gpu-blocks"),
        ({"block_size": 0}, "--block-size"),
        ({"watermark": 1.0}, "--watermark"),
        ({"max_num_batched_tokens": -1}, "--max-num-batched-tokens"),
        ({"prefill_ms_per_1k_tokens_sq": -1.0}, "--prefill-ms-per-1k-tokens-sq"),
        ({"prefill_fixed_ms": -1.0}, "--prefill-fixed-ms"),
    ],
)
def test_bad_kv_values_name_the_flag(fields: dict[str, float], flag: str) -> None:
    with pytest.raises(ProfileError, match=flag):
        Profile(**fields)  # type: ignore[arg-type]


def test_the_emulator_exposes_waiting_by_reason_preemptions_and_cache_config() -> None:
    registry = CollectorRegistry()
    info = cache_config_info(128, 40, 2048, overridden=True)
    metrics = EngineMetrics("m", lambda: (2, 3, 0.5), registry, 2048, info)
    metrics.preempted(2)
    families = {
        f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
    }
    reason = {
        s.labels[names.VLLM_REASON_LABEL]: s.value
        for s in families[names.VLLM_WAITING_BY_REASON].samples
    }
    assert reason == {"capacity": 3, "deferred": 0}  # sums to vllm:num_requests_waiting
    (preempt,) = [
        s
        for s in families[names.VLLM_PREEMPTIONS.removesuffix("_total")].samples
        if s.name == names.VLLM_PREEMPTIONS
    ]
    assert preempt.value == 2
    (cache,) = families[names.VLLM_CACHE_CONFIG_INFO].samples
    assert cache.value == 1
    assert cache.labels[names.VLLM_CACHE_BLOCK_SIZE_LABEL] == "128"
    assert cache.labels[names.VLLM_CACHE_NUM_BLOCKS_LABEL] == "40"
    assert cache.labels[names.VLLM_CACHE_SIZE_TOKENS_LABEL] == "5120"
    assert cache.labels[names.VLLM_ENGINE_LABEL] == "0"


# --- the fast path stays exact when the cache binds ------------------------------------------

_OPS = st.lists(
    st.tuples(
        st.sampled_from(["submit", "submit", "submit", "advance", "abort", "stream"]),
        st.floats(min_value=0.0, max_value=3.0),
        st.integers(min_value=1, max_value=1800),
        st.integers(min_value=1, max_value=900),
    ),
    min_size=1,
    max_size=30,
)


def _replay(ops: list[tuple[str, float, int, int]], fast: bool) -> list[tuple[object, ...]]:
    engine = Engine(replace(KV, watermark=0.05), fast_path=fast)
    seqs: list[Sequence] = []
    out: list[tuple[object, ...]] = []
    now = 0.0
    for i, (op, gap, prompt, output) in enumerate(ops):
        now += gap
        if op in ("submit", "stream"):
            seq = Sequence(prompt, min(output, 2048 - prompt), now, stream=op == "stream")
            seqs.append(seq)
            engine.submit(seq, now)
        elif op == "abort" and seqs:
            engine.abort(seqs[i % len(seqs)], now)
        else:
            engine.advance(now)
        hint = engine.next_finish_s()
        out.append((hint, engine.num_running, engine.num_waiting, engine.blocks_used))
        if hint is not None:
            # the hint is never late: nothing finishes before it that had not finished
            before = [s.finished_s for s in seqs]
            engine.advance(hint - 2e-6)
            after = [s.finished_s for s in seqs]
            assert before == after or hint - 2e-6 <= now
    engine.advance(now + 1e5)
    out.extend((s.tokens, s.admitted_s, s.first_token_s, s.finished_s, s.preemptions) for s in seqs)
    out.append((engine.preemptions_total, engine.blocks_used))
    return out


@settings(max_examples=100, deadline=None)
@given(ops=_OPS)
def test_fast_path_is_identical_to_step_by_step_with_a_small_cache(
    ops: list[tuple[str, float, int, int]],
) -> None:
    assert _replay(ops, fast=True) == _replay(ops, fast=False)


def _fields(engine: Engine, seqs: list[Sequence]) -> list[tuple[object, ...]]:
    return [
        (s.tokens, s.computed, s.blocks, s.first_token_s, s.last_token_s, s.finished_s,
         s.preemptions)
        for s in seqs
    ] + [(engine.step_end_s, engine.blocks_used, engine.preemptions_total)]  # fmt: skip


def test_fast_path_matches_step_by_step_through_preemptions() -> None:
    fast, slow = Engine(KV), Engine(KV, fast_path=False)
    fast_seqs, slow_seqs = submit_all(fast, 6, 1000, 1000), submit_all(slow, 6, 1000, 1000)
    for now in (0.5, 3.0, 7.0, 12.0, 20.0, 31.0, 1e4):
        fast.advance(now)
        slow.advance(now)
        assert _fields(fast, fast_seqs) == _fields(slow, slow_seqs), now
    assert fast.preemptions_total >= 2


def test_the_wake_up_hint_is_never_after_a_preemption() -> None:
    # Four running sequences will run out of blocks long before any finishes; the preemption
    # shortens the steps after it, so a hint at the first finish would be late.
    slow = Engine(KV, fast_path=False)
    submit_all(slow, 4, 1000, 1000)
    slow.advance(1.0)
    hint = slow.next_finish_s()
    assert hint is not None
    while slow.preemptions_total == 0:
        assert slow.step_end_s is not None
        slow.advance(slow.step_end_s)
    assert slow.step_start_s is not None
    assert hint <= slow.step_start_s + 1e-6  # the start of the step that preempted


def test_the_fixed_prefill_cost_is_paid_once_per_admission() -> None:
    p = Profile(prefill_ms_per_1k_tokens=10.0, prefill_fixed_ms=50.0)
    assert p.prefill_s(1000) == pytest.approx(0.060)
    assert p.prefill_s(1000, 1000) == pytest.approx(0.010)  # a later chunk: no fixed cost
    engine = Engine(replace(p, startup_s=0.0, cold_start_requests=0))
    (seq,) = submit_all(engine, 1, 1000, 3)
    engine.advance(100.0)
    assert seq.first_token_s == pytest.approx(p.step_s(1) + 0.060)


def test_an_abort_of_the_scheduled_sequence_then_a_submit_at_that_instant() -> None:
    # A 2,048-token budget: the first prompt takes it all, the second waits for it. The first
    # is aborted and a third arrives at the same instant: the step is scheduled afresh.
    engine = Engine(replace(KV, num_gpu_blocks=80, max_model_len=4096))
    a, b = Sequence(2048, 5, 0.0), Sequence(100, 5, 0.0)
    engine.submit(a, 0.0)
    engine.submit(b, 0.0)
    assert engine.step_new == {a: 2048} and list(engine.waiting) == [b]  # no budget left
    engine.abort(a, 0.0)
    engine.submit(Sequence(10, 5, 0.0), 0.0)
    assert engine.step_new and a not in engine.step_new
    engine.advance(100.0)
    assert b.tokens == 5


@pytest.mark.parametrize(
    ("max_model_len", "concurrency", "tokens"),
    [
        (2048, "2.5", "5120"),
        # 19 blocks a request: vLLM writes the float as str() does (the real-engine test
        # read "2.1052631578947367" where the emulator wrote "2.10526").
        (2432, "2.1052631578947367", "5120"),
        # Not a whole number of blocks: 16 a request, int(2.5 × 2,000), not 40 × 128.
        (2000, "2.5", "5000"),
        (1024, "5.0", "5120"),
    ],
)
def test_cache_config_info_writes_vllms_capacity_figures(
    max_model_len: int, concurrency: str, tokens: str
) -> None:
    info = cache_config_info(128, 40, max_model_len, overridden=True)
    assert info["kv_cache_max_concurrency"] == concurrency
    assert info[names.VLLM_CACHE_SIZE_TOKENS_LABEL] == tokens
    profile = Profile(num_gpu_blocks=40, block_size=128, max_model_len=max_model_len)
    assert str(profile.kv_cache_size_tokens) == tokens
