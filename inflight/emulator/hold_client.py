"""A client of the emulator's hold routes (``--hold-control``; ``server.py``): what tests
call to make a state last until they release it, instead of polling for it to pass by.

A test holds a fresh emulator at once, sends its requests (queued while held: none is
admitted), waits for them to arrive, then lets the engine admit ``count`` and hold again
(:func:`admit`): the state it reads then stays until :func:`release`.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

_TIMEOUT_S = 10.0


def _call(url: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path, data, {"Content-Type": "application/json"} if data is not None else {}
    )
    with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp:
        out: dict[str, Any] = json.loads(resp.read())
    return out


def engine_state(url: str) -> dict[str, Any]:
    """``held``, ``hold_after_admitted``, ``admitted`` (in all), ``running``, ``waiting``,
    ``most_running`` and ``most_in_engine`` (running + waiting), the most at once."""
    return _call(url, "/emulator/engine")


def hold(url: str, after_admitted: int | None = None) -> dict[str, Any]:
    """Hold the engine's clock now, or at the step that admits the ``after_admitted``-th
    sequence of all (pending while the engine is held)."""
    return _call(url, "/emulator/engine/hold", {"after_admitted": after_admitted})


def release(url: str) -> dict[str, Any]:
    """Run the clock on from where it was held; a pending hold stays."""
    return _call(url, "/emulator/engine/release", {})


def admit(url: str, count: int) -> dict[str, Any]:
    """Release a held engine until it has admitted ``count`` more sequences, then hold it
    at the start of the step that admits the last of them (at once when the queue has them
    and they fit). Returns the state after the release: ``held`` is False while the engine
    still has to run for them."""
    hold(url, after_admitted=engine_state(url)["admitted"] + count)
    return release(url)
