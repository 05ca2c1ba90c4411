"""The HTTP side of the emulator: vLLM's endpoints on aiohttp.web, driving the engine.

aiohttp because it is lean: the bench runs four emulators, a router and a load generator
on two cores. The engine is advanced from the event loop's monotonic clock on three
occasions only: a request arrives or leaves, ``/metrics`` is scraped, or a timer fires.
The timer is set for the next finish (exact, from the engine's step clock) and, while a
streaming sequence runs, for the next step end but no sooner than ``tick_ms`` after the
last wake-up; each wake-up writes all the tokens that became due in one write per stream.
So a 1.5 ms token step costs one wake-up per 10 ms, not one per token, and the timing
stays exact in aggregate because token times come from the step clock, not from sleeps.

A client that disconnects cancels its handler (``handler_cancellation=True``); the handler
then aborts its sequence, which frees the slot (finished reason ``abort``).
"""

from __future__ import annotations

import asyncio
import itertools
import time

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from emulator.engine import Engine, Sequence
from emulator.metrics import EngineMetrics
from emulator.openai_api import ApiError, GenRequest, StreamEncoder, full_response, parse_request
from emulator.profile import Profile

EMULATOR_VERSION = "0.10.1+inflight.emulator"

REPLICA_KEY: web.AppKey[Replica] = web.AppKey("replica")
REGISTRY_KEY: web.AppKey[CollectorRegistry] = web.AppKey("registry")


class Replica:
    """One emulated vLLM replica: the engine, its metrics, and the wake-up timer."""

    def __init__(
        self,
        profile: Profile,
        served_names: tuple[str, ...],
        registry: CollectorRegistry,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        if not served_names:
            raise ValueError("at least one served model name is required")
        self.profile = profile
        self.served_names = served_names
        self.loop = loop
        self.metrics = EngineMetrics(served_names[0], self._gauges, registry)
        self.engine = Engine(profile, observer=self.metrics)
        self.events: dict[Sequence, asyncio.Event] = {}
        self.ready_at_s = loop.time() + profile.startup_wall_s
        self.created = int(time.time())
        self._ids = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_s: float | None = None
        self._last_wake_s = 0.0
        self._tick_s = profile.tick_ms / 1000.0

    @property
    def ready(self) -> bool:
        return self.loop.time() >= self.ready_at_s

    def next_id(self, chat: bool) -> str:
        return f"{'chatcmpl' if chat else 'cmpl'}-{next(self._ids):08x}"

    # --- driving the engine ------------------------------------------------------------
    def advance(self) -> float:
        """Replay the engine up to now; wake the handlers it touched. Returns now."""
        now_s = self.loop.time()
        for seq in self.engine.advance(now_s):
            event = self.events.get(seq)
            if event is not None:
                event.set()
        return now_s

    def submit(self, seq: Sequence, event: asyncio.Event) -> None:
        now_s = self.advance()
        seq.arrival_s = now_s
        self.events[seq] = event
        self.engine.submit(seq, now_s)
        self._reschedule()

    def release(self, seq: Sequence) -> None:
        """Forget ``seq``; abort it if it is still queued or running."""
        self.events.pop(seq, None)
        if not seq.done:
            self.engine.abort(seq, self.advance())
            self._reschedule()

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_s = None
        self._last_wake_s = self.advance()
        self._reschedule()

    def _reschedule(self) -> None:
        at_s = self.engine.next_finish_s()
        if at_s is not None and self.engine.wants_steps():
            step_end_s = self.engine.step_end_s
            assert step_end_s is not None
            at_s = min(at_s, max(step_end_s, self._last_wake_s + self._tick_s))
        if at_s == self._timer_at_s:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at_s = at_s
        if at_s is not None:
            self._timer = self.loop.call_at(at_s, self._on_timer)

    def _gauges(self) -> tuple[int, int, float]:
        self.advance()
        self._reschedule()
        return self.engine.num_running, self.engine.num_waiting, self.engine.kv_cache_usage()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# --- handlers ---------------------------------------------------------------------------
def _error(exc: ApiError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


async def health(request: web.Request) -> web.Response:
    replica = request.app[REPLICA_KEY]
    if replica.ready:
        return web.Response(status=200)
    return _error(ApiError(503, "the replica is starting up"))


async def version(_request: web.Request) -> web.Response:
    return web.json_response({"version": EMULATOR_VERSION})


async def models(request: web.Request) -> web.Response:
    replica = request.app[REPLICA_KEY]
    data: list[dict[str, object]] = [
        {
            "id": name,
            "object": "model",
            "created": replica.created,
            "owned_by": "vllm",
            "root": replica.served_names[0],
            "parent": None,
            "max_model_len": replica.profile.max_model_len,
            "permission": [],
        }
        for name in replica.served_names
    ]
    return web.json_response({"object": "list", "data": data})


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[REGISTRY_KEY]
    body = generate_latest(registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    replica = request.app[REPLICA_KEY]
    try:
        if not replica.ready:
            raise ApiError(503, "the replica is starting up")
        req = parse_request(await request.read(), chat=chat, served_names=replica.served_names)
        output_tokens = req.max_tokens or replica.profile.default_max_tokens
        if req.prompt_tokens + output_tokens > replica.profile.max_model_len:
            raise ApiError(
                400,
                f"This model's maximum context length is {replica.profile.max_model_len} "
                f"tokens. However, you requested {req.prompt_tokens + output_tokens} tokens "
                f"({req.prompt_tokens} in the messages, {output_tokens} in the completion).",
                "max_tokens",
            )
    except ApiError as exc:
        return _error(exc)
    seq = Sequence(
        prompt_tokens=req.prompt_tokens,
        output_tokens=output_tokens,
        arrival_s=0.0,
        stream=req.stream,
        natural_stop=req.max_tokens is None,
    )
    event = asyncio.Event()
    replica.submit(seq, event)
    try:
        if req.stream:
            return await _stream(request, replica, req, seq, event)
        while not seq.done:
            await event.wait()
            event.clear()
        body = full_response(
            req, replica.next_id(chat), int(time.time()), seq.tokens, seq.finished_reason or ""
        )
        return web.json_response(body)
    finally:
        replica.release(seq)


async def _stream(
    request: web.Request, replica: Replica, req: GenRequest, seq: Sequence, event: asyncio.Event
) -> web.StreamResponse:
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
    )
    enc = StreamEncoder(req, replica.next_id(req.chat), int(time.time()))
    # Like vLLM, nothing is sent before the first token: the status line, headers and the
    # role chunk go out with it, so a client's time to first byte is the time to first token.
    while seq.tokens == 0 and not seq.done:
        await event.wait()
        event.clear()
    pending = enc.start()
    try:
        await resp.prepare(request)
        while True:
            chunk = pending + enc.tokens(seq.tokens)
            pending = b""
            if seq.done:
                chunk += enc.finish(seq.finished_reason or "")
            if chunk:
                await resp.write(chunk)
            if seq.done:
                break
            await event.wait()
            event.clear()
        await resp.write_eof()
    except ConnectionResetError:
        pass  # the client left; the caller's ``finally`` aborts the sequence
    return resp


def build_app(
    profile: Profile,
    served_names: tuple[str, ...],
    registry: CollectorRegistry,
    loop: asyncio.AbstractEventLoop,
) -> web.Application:
    """The emulator's aiohttp application; ``registry`` is this app's own."""
    # Long transcripts: allow bodies far beyond aiohttp's 1 MiB default (max_model_len
    # tokens at ~4 characters each, with room for JSON escaping).
    app = web.Application(client_max_size=max(16 << 20, profile.max_model_len * 16))
    replica = Replica(profile, served_names, registry, loop)
    app[REPLICA_KEY] = replica
    app[REGISTRY_KEY] = registry

    async def _close(_app: web.Application) -> None:
        replica.close()

    app.on_cleanup.append(_close)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    return app
