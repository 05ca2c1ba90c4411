"""uvicorn's httptools protocol, plus a disconnect hook in each request's scope.

The proxy must learn that a client left while its request waits upstream (in vLLM's
queue), to free the slot at once. Plain ASGI offers one way: a task per request awaiting
``receive()`` until ``http.disconnect``. Measured on this machine with
``inflight bench router``, that task (create, wait on uvicorn's event, cancel) was ~12 µs
of the router's ~69 µs a request: capacity at c=64 went from 14,450 requests/s
(``results/2026-11-29-router-3``) to 17,578 with this hook (``results/2026-11-29-router-4``).

So this protocol puts a per-connection set of callbacks in every scope under
:data:`DISCONNECT_HOOKS`; the proxy adds one callback while a request is in flight and
removes it in its ``finally``; ``connection_lost`` calls every callback registered on that
connection. The proxy falls back to the ``receive()`` task when the key is absent (another
ASGI server, or the tests' hand-made scopes), so the app stays plain ASGI.

It relies on uvicorn's ``HttpToolsProtocol`` calling ``on_message_begin`` to build each
request's scope and ``connection_lost`` when the client goes (uvicorn is pinned below 1.0 in
pyproject.toml); ``tests/integration/test_router_emulator.py``'s disconnect tests run
through it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# The scope key: a set of zero-argument callbacks, called once if the client connection
# is lost. Not an ASGI standard key; namespaced to this project.
DISCONNECT_HOOKS = "inflight.disconnect_hooks"

Hooks = set[Callable[[], None]]


class HookedHttpToolsProtocol(HttpToolsProtocol):
    """``uvicorn.run(app, http=HookedHttpToolsProtocol)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._disconnect_hooks: Hooks = set()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        scope: dict[str, Any] = self.scope  # type: ignore[assignment]
        scope[DISCONNECT_HOOKS] = self._disconnect_hooks

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        hooks = list(self._disconnect_hooks)
        self._disconnect_hooks.clear()
        for hook in hooks:
            hook()
