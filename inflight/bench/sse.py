"""Cheap SSE accounting: the load generator must not eat a core.

Four emulators, a router and the load generator share two cores, so the client does not
JSON-decode every token event. It counts ``data:`` events in raw chunks with
``bytes.count`` and decodes only the last event, where OpenAI-compatible servers put
``usage`` when ``stream_options.include_usage`` is set. Events split across chunks are
handled by carrying the unterminated tail.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

_DATA = b"data:"
_DONE = b"[DONE]"


@dataclass
class SseCounter:
    """Feed raw response chunks; read ``events``, ``done`` and ``output_tokens()`` at the end."""

    events: int = 0  # data events other than [DONE]
    done: bool = False
    _tail: bytes = field(default=b"", repr=False)
    _last_event: bytes = field(default=b"", repr=False)

    def feed(self, chunk: bytes) -> None:
        buf = self._tail + chunk
        end = buf.rfind(b"\n\n")
        if end < 0:
            self._tail = buf
            return
        complete, self._tail = buf[: end + 2], buf[end + 2 :]
        n = complete.count(_DATA)
        if _DONE in complete:
            self.done = True
            n -= 1
        self.events += n
        # Keep the last non-[DONE] event for usage; cheap: one rfind per chunk.
        body = complete.replace(b"data: [DONE]\n\n", b"").replace(b"data:[DONE]\n\n", b"")
        start = body.rfind(_DATA)
        if start >= 0:
            self._last_event = body[start + len(_DATA) :].strip()

    def output_tokens(self) -> int:
        """Completion tokens from the final usage event if present, else the event count."""
        if self._last_event.startswith(b"{") and b'"usage"' in self._last_event:
            try:
                usage = json.loads(self._last_event).get("usage") or {}
                tokens = usage.get("completion_tokens")
                if isinstance(tokens, int):
                    return tokens
            except ValueError:
                pass
        # A usage-only event (no choices) would be counted as a token: subtract it if seen.
        return self.events
