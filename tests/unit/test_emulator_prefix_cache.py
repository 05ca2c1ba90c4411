"""The emulator's prefix cache (``inflight.emulator.engine``): vLLM's automatic prefix caching.

A shared prefix is computed once, a fully cached prompt still computes its last block, a
cached block running sequences share is held once, freed blocks are evicted least recently
freed first and a request's tail before its head, and sequences with no hashes run
exactly as they did.
"""

from __future__ import annotations

import dataclasses

import pytest

from inflight.emulator.engine import Engine, Sequence
from inflight.emulator.metrics import EngineMetrics
from inflight.emulator.profile import Profile
from inflight.prefix_blocks import rechunk, token_blocks

ON = Profile(startup_s=0.0, cold_start_requests=0, enable_prefix_caching=True)
BS = ON.block_size  # 128
END = 1e9  # an instant after everything


def group_prompt(group: int, request: int, prefix: int = 1500, suffix: int = 100) -> list[int]:
    """Token ids: the group's ``prefix`` tokens, then the request's own ``suffix``."""
    return [group * 100_000 + i for i in range(prefix)] + [
        10_000_000 + request * 1000 + i for i in range(suffix)
    ]


def seq_of(tokens: list[int], output: int = 10, profile: Profile = ON) -> Sequence:
    return Sequence(
        prompt_tokens=len(tokens),
        output_tokens=output,
        arrival_s=0.0,
        block_hashes=tuple(token_blocks(tokens, profile.block_size)),
    )


def alone(engine: Engine, seq: Sequence, at_s: float) -> Sequence:
    """``seq`` submitted at ``at_s`` to an idle engine and run to its end."""
    seq.arrival_s = at_s
    engine.submit(seq, at_s)
    engine.advance(END)
    assert seq.done
    return seq


def ttft(seq: Sequence) -> float:
    assert seq.first_token_s is not None
    return seq.first_token_s - seq.arrival_s


def test_a_shared_prefix_is_computed_once() -> None:
    profile = dataclasses.replace(ON, prefill_fixed_ms=5.0)
    engine = Engine(profile)
    first = alone(engine, seq_of(group_prompt(0, 1), profile=profile), 0.0)
    second = alone(engine, seq_of(group_prompt(0, 2), profile=profile), 100.0)
    other = alone(engine, seq_of(group_prompt(1, 3), profile=profile), 200.0)
    # 1,500 shared tokens: 11 whole blocks (1,408 tokens); the 12th holds suffix tokens
    assert (first.cached_tokens, second.cached_tokens, other.cached_tokens) == (0, 11 * BS, 0)
    step = profile.step_s(1)
    assert ttft(first) == pytest.approx(profile.prefill_s(1600) + step)
    # only the uncached 192 tokens are computed, after the cached 1,408; the fixed cost too
    assert ttft(second) == pytest.approx(profile.prefill_s(1600 - 11 * BS, 11 * BS, True) + step)
    assert ttft(second) < ttft(first) == pytest.approx(ttft(other))
    assert (engine.prefix_queries_total, engine.prefix_hits_total) == (3 * 1600, 11 * BS)


def test_a_fully_cached_prompt_still_computes_its_last_block() -> None:
    engine = Engine(ON)
    whole = list(range(12 * BS))  # exactly 12 blocks
    alone(engine, seq_of(whole), 0.0)
    again = alone(engine, seq_of(whole), 100.0)
    # vLLM's max_cache_hit_length = num_tokens − 1: the last block is computed again
    assert again.cached_tokens == 11 * BS
    longer = whole + [7] * 50  # 12 whole blocks and a partial one: all 12 hit
    alone(engine, seq_of(longer), 200.0)
    assert alone(engine, seq_of(longer), 300.0).cached_tokens == 12 * BS


def test_a_cached_block_running_sequences_share_is_held_once() -> None:
    engine = Engine(ON)
    a, b = seq_of(group_prompt(0, 1), output=50), seq_of(group_prompt(0, 2), output=100)
    engine.submit(a, 0.0)
    engine.submit(b, 0.0)  # the same step: a's blocks were cached when it was scheduled
    assert b.cached_tokens == 11 * BS
    engine.advance(engine.step_end_s or 0.0)
    assert a.blocks == b.blocks == 13  # 1,601 tokens each
    assert engine.blocks_used == 13 + 13 - 11
    assert engine.kv_cache_usage() == pytest.approx((13 + 13 - 11) / ON.usable_blocks)
    engine.advance(a.finished_s or _finish(engine, a))
    assert a.done and not b.done
    assert engine.blocks_used == b.blocks  # the shared blocks stay held, by b alone
    engine.advance(END)
    assert engine.blocks_used == 0


def _finish(engine: Engine, seq: Sequence) -> float:
    t = 0.0
    while not seq.done:
        t = engine.step_end_s or END
        engine.advance(t)
    return t


SMALL = Profile(
    startup_s=0.0,
    cold_start_requests=0,
    enable_prefix_caching=True,
    block_size=16,
    num_gpu_blocks=11,  # 10 usable
    max_model_len=160,
)


def four_blocks(base: int) -> list[int]:
    return [base + i for i in range(4 * 16)]


def a_then_b_then_plain() -> Engine:
    """a's 4 blocks freed, then b's, then a 4-block prompt with no hashes: it takes the
    2 blocks never used, then 2 from the free queue's head."""
    engine = Engine(SMALL)
    alone(engine, seq_of(four_blocks(0), output=1, profile=SMALL), 0.0)
    alone(engine, seq_of(four_blocks(1000), output=1, profile=SMALL), 10.0)
    alone(engine, Sequence(prompt_tokens=64, output_tokens=1, arrival_s=20.0), 20.0)
    return engine


def test_freed_blocks_are_evicted_least_recently_freed_first_tail_before_head() -> None:
    # a, freed first, lost its last two blocks (a request's tail goes first) and kept its
    # first two; b, freed later, kept all four (a lookup stops one token short: 3 of 4)
    again = seq_of(four_blocks(0), output=1, profile=SMALL)
    assert alone(a_then_b_then_plain(), again, 30.0).cached_tokens == 2 * 16
    again = seq_of(four_blocks(1000), output=1, profile=SMALL)
    assert alone(a_then_b_then_plain(), again, 30.0).cached_tokens == 3 * 16


def test_a_hit_takes_its_blocks_out_of_the_free_queue() -> None:
    engine = Engine(SMALL)
    a, b = four_blocks(0), four_blocks(1000)
    alone(engine, seq_of(a, output=1, profile=SMALL), 0.0)
    alone(engine, seq_of(b, output=1, profile=SMALL), 10.0)
    alone(engine, seq_of(a, output=1, profile=SMALL), 20.0)  # a used again: freed after b
    plain = Sequence(prompt_tokens=64, output_tokens=1, arrival_s=30.0)
    alone(engine, plain, 30.0)  # evicts from the head: b's tail now
    assert alone(engine, seq_of(a, output=1, profile=SMALL), 40.0).cached_tokens == 3 * 16
    assert alone(engine, seq_of(b, output=1, profile=SMALL), 50.0).cached_tokens < 3 * 16


def test_trace_block_ids_hit_as_far_as_they_are_shared() -> None:
    engine = Engine(ON)
    ids_a, ids_b = (1, 2, 3, 4), (1, 2, 9, 10)  # 512-token blocks: the first 1,024 shared

    def trace_seq(ids: tuple[int, ...]) -> Sequence:
        hashes = rechunk(ids, 512, BS, 2000)
        return Sequence(2000, 5, 0.0, block_hashes=tuple(hashes))

    alone(engine, trace_seq(ids_a), 0.0)
    assert alone(engine, trace_seq(ids_b), 100.0).cached_tokens == 1024


def mixed_load(engine: Engine, hashes: bool) -> list[tuple[float | None, float | None, int]]:
    """Fifty sequences, two at a time, some longer than the cache holds at once."""
    out = []
    seqs = []
    for i in range(50):
        tokens = group_prompt(i % 3, i, prefix=900 + 40 * (i % 7), suffix=30 + i)
        s = Sequence(
            prompt_tokens=len(tokens),
            output_tokens=150 + 60 * (i % 5),
            arrival_s=0.25 * i,
            block_hashes=tuple(token_blocks(tokens, BS)) if hashes else (),
        )
        seqs.append(s)
        engine.submit(s, s.arrival_s)
        if i % 9 == 4:
            engine.abort(seqs[i - 2], s.arrival_s)
    engine.advance(END)
    for s in seqs:
        out.append((s.first_token_s, s.finished_s, s.preemptions))
    return out


def test_sequences_without_hashes_run_exactly_as_before() -> None:
    tight = dataclasses.replace(
        ON, num_gpu_blocks=40, max_model_len=4992, max_num_batched_tokens=2048
    )
    off = dataclasses.replace(tight, enable_prefix_caching=False)
    reference = mixed_load(Engine(off), hashes=False)
    assert any(p for _, _, p in reference), "the load should preempt"
    # caching on, no hashes: the same instants; hashes with caching off: ignored
    assert mixed_load(Engine(tight), hashes=False) == reference
    assert mixed_load(Engine(off), hashes=True) == reference
    cached = Engine(tight)
    assert mixed_load(cached, hashes=True) != reference
    assert cached.prefix_hits_total > 0
    assert cached.blocks_used == 0 and cached.cache_held == {}


def test_metrics_count_queries_and_hits_in_tokens() -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    metrics = EngineMetrics("m", lambda: (0, 0, 0.0), registry, ON.max_model_len)
    engine = Engine(ON, observer=metrics)
    alone(engine, seq_of(group_prompt(0, 1)), 0.0)
    alone(engine, seq_of(group_prompt(0, 2)), 100.0)
    text = generate_latest(registry).decode()
    assert 'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 3200.0' in text
    assert f'vllm:prefix_cache_hits_total{{engine="0",model_name="m"}} {11 * BS}.0' in text
