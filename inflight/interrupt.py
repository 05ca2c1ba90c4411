"""Ctrl-C (SIGINT) and SIGTERM as one exception, :class:`Interrupted`, for a long command (the
bench's comparisons, ``inflight sim generalize``).

Why the bench needs its own handler: Python turns SIGINT into ``KeyboardInterrupt`` only when
SIGINT is not ignored at start-up, and a shell that starts a command in the background
(``cmd &`` in a script, ``nohup cmd &``) starts it with SIGINT ignored: Ctrl-C (or ``kill -INT``)
then did nothing at all. SIGTERM had no handler, so it killed the bench on the spot and left
every ``inflight up`` (each in its own session) running. Under :func:`handled` both signals
raise :class:`Interrupted`, whatever the bench inherited; it unwinds through the ``finally``
blocks that stop the stacks, and the command turns it into exit code 128 + the signal.

``Interrupted`` is a ``KeyboardInterrupt``: raised inside an asyncio task it leaves the
event loop at once (``asyncio.run`` then cancels the other tasks), where another
``BaseException`` would be kept as that task's result.

Code that must not be cut short (starting a process and keeping its handle; stopping a
stack; writing a result file) runs under :func:`deferred`: a signal that arrives there is
raised when it ends. After the first signal later ones are ignored, so a second Ctrl-C
cannot abort the cleanup the first one started (every step of it has its own deadline).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM reached the bench under :func:`handled`."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(self.name)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a command a signal ended (130, 143)."""
        return 128 + self.signum


class _State:
    received: int | None = None  # the first signal
    raised = False  # Interrupted raised for it
    deferring = 0  # depth of deferred()


_state = _State()


def _raise() -> None:
    assert _state.received is not None
    _state.raised = True
    raise Interrupted(_state.received)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if _state.received is not None:
        return  # already stopping
    _state.received = signum
    if not _state.deferring:
        _raise()


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` inside (main thread only); the
    dispositions from before are restored on the way out."""
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    _state.received, _state.raised, _state.deferring = None, False, 0
    for sig in SIGNALS:
        signal.signal(sig, _on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A signal that arrives inside is raised when the block ends (not at all when the block
    ends with an exception: that one goes on, and the stop it causes is the same)."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
    if not _state.deferring and _state.received is not None and not _state.raised:
        _raise()
