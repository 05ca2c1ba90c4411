"""timeline.jsonl's ``live`` field: written by the stack, optional when read."""

from __future__ import annotations

import pytest

from inflight.statedir import TIMELINE, StateDir, StateFileError, TimelinePoint, parse_timeline


def test_a_timeline_written_before_live_reads_with_live_none():
    text = '{"t": 1.0, "desired": 2, "ready": 1}\n{"t": 2.0, "desired": 2, "ready": 2}\n'
    assert parse_timeline(text) == [TimelinePoint(1.0, 2, 1), TimelinePoint(2.0, 2, 2)]
    assert all(p.live is None for p in parse_timeline(text))


def test_live_is_read_and_round_trips(tmp_path):
    text = '{"t": 1.0, "desired": 1, "ready": 1, "live": 3}\n'
    assert parse_timeline(text) == [TimelinePoint(1.0, 1, 1, live=3)]
    state = StateDir(tmp_path)
    state.acquire()
    try:
        points = [TimelinePoint(1.5, 2, 1, live=3), TimelinePoint(2.5, 1, 1, live=1)]
        for p in points:
            state.append_timeline(p)
        assert parse_timeline((tmp_path / TIMELINE).read_text()) == points
    finally:
        state.release()


@pytest.mark.parametrize("bad", ['"x"', "{}", "[1]"])
def test_a_bad_live_names_the_line(bad):
    text = (
        '{"t": 1.0, "desired": 1, "ready": 1}\n'
        + f'{{"t": 2, "desired": 1, "ready": 1, "live": {bad}}}\n'
    )
    with pytest.raises(StateFileError, match=f"{TIMELINE}:2:"):
        parse_timeline(text)
