"""The emulator's replica wakes every handler whose sequence finished, however the loop's
clock moves between two readings (a busy machine): a command (submit, abort) is given the
instant the replica advanced to, not a later reading that lets the command finish
sequences nobody is told of. Before, such a sequence's request never got its answer: under
``inflight up``'s closed loop on a loaded machine a request hung until its client left."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from inflight.emulator.engine import Sequence
from inflight.emulator.profile import Profile
from inflight.emulator.server import Replica

REF = Profile(startup_s=0.0, cold_start_requests=0)


class _Handle:
    def cancel(self) -> None:
        pass


class SlowReadingLoop:
    """What the replica uses of a loop, with a clock that moves ``step_s`` between two
    readings (each ``time()`` call) and timers that are only recorded."""

    def __init__(self, step_s: float) -> None:
        self.now = 0.0
        self.step_s = step_s

    def time(self) -> float:
        self.now += self.step_s
        return self.now

    def call_at(self, _when: float, _callback: Any) -> _Handle:
        return _Handle()


def test_every_finished_sequence_wakes_its_handler_when_the_clock_moves_between_reads() -> None:
    service_s = 30 * REF.step_s(1)  # one sequence of 30 output tokens, alone
    loop = SlowReadingLoop(step_s=service_s / 3)
    replica = Replica(REF, ("m",), CollectorRegistry(), loop)  # type: ignore[arg-type]
    seqs: list[Sequence] = []
    events: list[asyncio.Event] = []
    for _ in range(12):  # each submit reads the clock: the earlier ones finish on the way
        seq = Sequence(prompt_tokens=10, output_tokens=30, arrival_s=0.0)
        event = asyncio.Event()
        replica.submit(seq, event)
        seqs.append(seq)
        events.append(event)
    finished = [i for i, s in enumerate(seqs) if s.done]
    assert finished, "the clock moved past some finishes: the test would prove nothing"
    woken = [i for i, e in enumerate(events) if e.is_set()]
    assert woken == finished
    while not all(s.done for s in seqs):
        replica.advance()
    assert all(e.is_set() for e in events)
