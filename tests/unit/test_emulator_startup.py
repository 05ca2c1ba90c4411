"""Start-up counts from the process's start: the seconds spent importing are inside it.

At time-scale 0.1 a replica's 100 s start-up is 10 s of wall time; two or three seconds
of Python imports on a busy machine, added on top, were 20–30 seed seconds more than the
profile says (seen in the open-loop ramp: replicas ready 116–172 s after they were asked
for). The replica subtracts what has already passed when it is made.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from inflight.emulator.profile import Profile
from inflight.emulator.server import Replica
from inflight.procs import process_age_s


def _replica(started_s_ago: float) -> Replica:
    loop = asyncio.new_event_loop()
    try:
        return Replica(
            Profile(startup_s=100.0, time_scale=0.1),
            ("m",),
            CollectorRegistry(),
            loop,
            started_s_ago=started_s_ago,
        )
    finally:
        loop.close()


def test_the_time_already_spent_is_taken_off_the_start_up() -> None:
    assert not _replica(0.0).ready  # 10 s of wall time still to go
    assert not _replica(9.0).ready  # 1 s to go
    assert _replica(10.0).ready  # imports took the whole start-up: ready at once
    assert _replica(30.0).ready  # never negative


def test_process_age_is_measured_from_proc() -> None:
    mine = process_age_s()
    assert mine >= 0.0
    assert process_age_s(1) >= mine  # init started before this test did
    assert process_age_s(2**22 + 12345) == 0.0  # no such process
