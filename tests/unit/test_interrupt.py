"""inflight.interrupt: SIGINT and SIGTERM as Interrupted, real signals to this process."""

from __future__ import annotations

import asyncio
import signal

import pytest

from inflight import interrupt
from inflight.interrupt import Interrupted


def test_sigint_raises_even_when_it_was_ignored_at_start_and_the_old_handler_comes_back() -> None:
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a shell's `cmd &` leaves it
    try:
        with pytest.raises(Interrupted) as caught, interrupt.handled():
            signal.raise_signal(signal.SIGINT)
        assert caught.value.exit_code == 130 and caught.value.name == "SIGINT"
        assert isinstance(caught.value, KeyboardInterrupt)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_sigterm_raises_with_exit_code_143() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as caught, interrupt.handled():
        signal.raise_signal(signal.SIGTERM)
    assert caught.value.exit_code == 143
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_in_a_deferred_block_is_raised_at_its_end() -> None:
    done = []
    with pytest.raises(Interrupted), interrupt.handled():
        with interrupt.deferred():
            with interrupt.deferred():  # nested: only the outermost end raises
                signal.raise_signal(signal.SIGINT)
                done.append("inner")
            done.append("outer")
        done.append("after")  # never reached
    assert done == ["inner", "outer"]


def test_a_deferred_block_that_fails_passes_its_own_error_on() -> None:
    with (
        pytest.raises(ValueError, match="stop failed"),
        interrupt.handled(),
        interrupt.deferred(),
    ):
        signal.raise_signal(signal.SIGTERM)
        raise ValueError("stop failed")


def test_a_second_signal_does_not_cut_the_cleanup_short() -> None:
    cleaned = False
    with pytest.raises(Interrupted) as caught, interrupt.handled():
        try:
            signal.raise_signal(signal.SIGINT)
        finally:
            signal.raise_signal(signal.SIGTERM)  # a second Ctrl-C or kill while stopping
            with interrupt.deferred():
                pass
            cleaned = True
    assert cleaned and caught.value.exit_code == 130


def test_inside_asyncio_it_leaves_the_loop_and_is_not_kept_as_a_task_result() -> None:
    """A plain BaseException raised in a task would be swallowed by gather(return_exceptions)."""

    async def request() -> None:
        signal.raise_signal(signal.SIGINT)
        await asyncio.sleep(30)

    async def run() -> str:
        await asyncio.gather(request(), asyncio.sleep(30), return_exceptions=True)
        return "finished"

    with pytest.raises(Interrupted), interrupt.handled():
        asyncio.run(run())
