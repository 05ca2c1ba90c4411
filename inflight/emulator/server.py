"""The HTTP side of the emulator: vLLM's endpoints on FastAPI, driving the engine.

FastAPI with pydantic request models, as vLLM's own server
(``vllm/entrypoints/openai/api_server.py``): a malformed body gets vLLM's 400 from the same
kind of ``RequestValidationError`` handler, every error vLLM's ``ErrorResponse`` shape.
It is served by uvicorn on the standard asyncio loop, not uvloop, so ``loop.time()`` (the
engine's clock, below) has the resolution it had before; see :func:`serve`.

The engine is advanced from the event loop's monotonic clock on three occasions only: a
request arrives or leaves, ``/metrics`` is scraped, or a timer fires. The timer is set for
the next finish (exact, from the engine's step clock) and, while a streaming sequence runs,
for the next step end but no sooner than ``tick_ms`` after the last wake-up; each wake-up
writes all the tokens that became due in one write per stream. So a 1.5 ms token step costs
one wake-up per 10 ms, not one per token, and the timing stays exact in aggregate because
token times come from the step clock, not from sleeps.

A client that disconnects while its request waits (queued, or running without a stream) is
seen by :func:`_with_cancellation`, vLLM's ``with_cancellation``
(``vllm/entrypoints/utils.py``): the handler races a task that waits for
``http.disconnect`` and is cancelled when it comes first, which aborts its sequence and
frees the slot (finished reason ``abort``). A stream's disconnect is seen by Starlette's
``StreamingResponse``, and :class:`_EngineStream` releases the sequence however it ends.

With ``hold_control`` (the ``--hold-control`` flag; off by default, never set by ``inflight
up``), three routes let a test hold the engine's clock (``Engine.hold``) while ``/metrics``
and the API keep answering, so a state it waits for lasts until it releases it:
``GET /emulator/engine`` (held or not, what was admitted, the most at once),
``POST /emulator/engine/hold`` (body ``{}``: now; ``{"after_admitted": N}``: at the step
that admits the Nth sequence of all) and ``POST /emulator/engine/release``. The engine's
clock is then the loop's less the time it was held.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import signal
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from inflight.emulator.engine import Engine, Sequence
from inflight.emulator.metrics import EngineMetrics, cache_config_info
from inflight.emulator.openai_api import (
    CHARS_PER_TOKEN,
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    GenRequest,
    StreamEncoder,
    full_response,
    http_error,
    to_gen_request,
    validation_error,
)
from inflight.emulator.profile import Profile
from inflight.prefix_blocks import request_blocks

EMULATOR_VERSION = "0.10.1+inflight.emulator"


class Replica:
    """One emulated vLLM replica: the engine, its metrics, and the wake-up timer."""

    def __init__(
        self,
        profile: Profile,
        served_names: tuple[str, ...],
        registry: CollectorRegistry,
        loop: asyncio.AbstractEventLoop,
        started_s_ago: float = 0.0,
    ) -> None:
        if not served_names:
            raise ValueError("at least one served model name is required")
        self.profile = profile
        self.served_names = served_names
        self.loop = loop
        cache_info = cache_config_info(
            profile.block_size,
            profile.kv_blocks,
            profile.max_model_len,
            profile.num_gpu_blocks != 0,
            profile.enable_prefix_caching,
        )
        self.metrics = EngineMetrics(
            served_names[0], self._gauges, registry, profile.max_model_len, cache_info
        )
        self.engine = Engine(profile, observer=self.metrics)
        self.events: dict[Sequence, asyncio.Event] = {}
        # Start-up counts from the process's start, as a vLLM pod's does: the seconds
        # Python spends importing before this line (amplified 1/time-scale times in seed
        # time on a busy machine) are part of it, not added to it.
        self.ready_at_s = loop.time() + max(0.0, profile.startup_wall_s - started_s_ago)
        self.created = int(time.time())
        self._ids = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_s: float | None = None
        self._last_wake_s = 0.0
        self._tick_s = profile.tick_ms / 1000.0
        self._held_total_s = 0.0  # loop time the engine's clock was held, in all

    @property
    def ready(self) -> bool:
        return self.loop.time() >= self.ready_at_s

    def next_id(self, chat: bool) -> str:
        return f"{'chatcmpl' if chat else 'cmpl'}-{next(self._ids):08x}"

    # --- driving the engine ------------------------------------------------------------
    def now_s(self) -> float:
        """The engine's clock: the loop's less the time it was held; still while held."""
        held_s = self.engine.held_s
        return held_s if held_s is not None else self.loop.time() - self._held_total_s

    def advance(self) -> float:
        """Replay the engine up to now; wake the handlers it touched. Returns the instant it
        advanced to (the one it is held at, when a hold fell due on the way).

        That instant, not a fresh reading of the clock: every command (submit, abort, hold)
        is given it, and advances the engine to it first, which is then a no-op. Given a
        later instant, the command replayed the steps in between itself and the sequences
        that finished in them were never woken (their handlers waited until the client left:
        requests stuck in flight under load on a busy machine)."""
        now_s = self.now_s()
        for seq in self.engine.advance(now_s):
            event = self.events.get(seq)
            if event is not None:
                event.set()
        held_s = self.engine.held_s
        return held_s if held_s is not None else now_s

    def hold(self, after_admitted: int | None) -> dict[str, Any]:
        """Hold the engine's clock now, or at the step that admits ``after_admitted``."""
        self.engine.hold(self.advance(), after_admitted)
        self._reschedule()
        return self.engine_state()

    def release_hold(self) -> dict[str, Any]:
        """Run the engine's clock on from where it was held (a pending hold stays)."""
        held_s = self.engine.held_s
        if held_s is not None:
            self._held_total_s = self.loop.time() - held_s
            self.engine.release()
            self._reschedule()
        return self.engine_state()

    def engine_state(self) -> dict[str, Any]:
        """What ``GET /emulator/engine`` answers (the engine advanced to now first)."""
        self.advance()
        self._reschedule()
        engine = self.engine
        return {
            "held": engine.held_s is not None,
            "hold_after_admitted": engine.hold_after_admitted,
            "admitted": engine.admitted_total,
            "running": engine.num_running,
            "waiting": engine.num_waiting,
            "most_running": engine.most_running,
            "most_in_engine": engine.most_in_engine,
        }

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
            self._timer = self.loop.call_at(at_s + self._held_total_s, self._on_timer)

    def _gauges(self) -> tuple[int, int, float]:
        self.advance()
        self._reschedule()
        return self.engine.num_running, self.engine.num_waiting, self.engine.kv_cache_usage()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# --- errors -----------------------------------------------------------------------------
def _error(exc: ApiError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status)


async def _api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _error(exc)


async def _validation_error(_request: Request, exc: Exception) -> Response:
    """vLLM's handler: a body that does not validate is a 400, not FastAPI's 422."""
    assert isinstance(exc, RequestValidationError)
    return JSONResponse(validation_error(exc.errors()), status_code=400)


async def _http_error(_request: Request, exc: Exception) -> Response:
    """vLLM's handler for ``HTTPException`` (FastAPI raises one for an unreadable body)."""
    assert isinstance(exc, HTTPException)
    return JSONResponse(http_error(exc.status_code, str(exc.detail)), status_code=exc.status_code)


# --- disconnects ------------------------------------------------------------------------
async def _listen_for_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _with_cancellation(
    handler: Callable[[Request, Replica, bool, Any], Awaitable[Response]],
) -> Callable[[Request, Replica, bool, Any], Awaitable[Response | None]]:
    """vLLM's ``with_cancellation``: the handler is cancelled if the client leaves first.

    Safe only once the body has been read (FastAPI has, to validate it): the listener
    swallows every later message of the request while it waits for ``http.disconnect``.
    """

    async def wrapper(request: Request, replica: Replica, chat: bool, body: Any) -> Response | None:
        work = asyncio.ensure_future(handler(request, replica, chat, body))
        gone = asyncio.ensure_future(_listen_for_disconnect(request))
        try:
            await asyncio.wait((work, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this request's own task is cancelled (server shutdown)
            gone.cancel()
            if not work.done():
                work.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await work  # its ``finally`` has aborted the sequence
        return None if work.cancelled() else work.result()

    return wrapper


# --- generation -------------------------------------------------------------------------
class _EngineStream(StreamingResponse):
    """The SSE response of one sequence; releases it however the response ends."""

    def __init__(self, replica: Replica, seq: Sequence, chunks: AsyncIterator[bytes]) -> None:
        super().__init__(
            chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )
        self._replica = replica
        self._seq = seq

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._replica.release(self._seq)  # aborts it if the client left


async def _chunks(
    enc: StreamEncoder, seq: Sequence, event: asyncio.Event, pending: bytes
) -> AsyncIterator[bytes]:
    while True:
        chunk = pending + enc.tokens(seq.tokens)
        pending = b""
        if seq.done:
            chunk += enc.finish(seq.finished_reason or "")
        if chunk:
            yield chunk
        if seq.done:
            return
        await event.wait()
        event.clear()


@_with_cancellation
async def _generate(request: Request, replica: Replica, chat: bool, body: Any) -> Response:
    if not replica.ready:
        raise ApiError(503, "the replica is starting up")
    req = to_gen_request(body, replica.served_names)
    output_tokens = req.max_tokens or replica.profile.default_max_tokens
    if req.prompt_tokens + output_tokens > replica.profile.max_model_len:
        raise ApiError(
            400,
            f"This model's maximum context length is {replica.profile.max_model_len} "
            f"tokens. However, you requested {req.prompt_tokens + output_tokens} tokens "
            f"({req.prompt_tokens} in the messages, {output_tokens} in the completion).",
            "max_tokens",
        )
    seq = Sequence(
        prompt_tokens=req.prompt_tokens,
        output_tokens=output_tokens,
        arrival_s=0.0,
        stream=req.stream,
        natural_stop=req.max_tokens is None,
        block_hashes=_block_hashes(replica.profile, chat, body),
    )
    event = asyncio.Event()
    replica.submit(seq, event)
    handed_over = False
    try:
        # Like vLLM, nothing is sent before the first token: the status line, headers and
        # the first chunks go out with it, so a client's time to first byte is its TTFT.
        while not seq.done and (not req.stream or seq.tokens == 0):
            await event.wait()
            event.clear()
        if req.stream:
            response = _stream(replica, req, seq, event)
            handed_over = True
            return response
        body_out = full_response(
            req, replica.next_id(chat), int(time.time()), seq.tokens, seq.finished_reason or ""
        )
        return JSONResponse(body_out)
    finally:
        if not handed_over:
            replica.release(seq)


def _block_hashes(
    profile: Profile, chat: bool, body: CompletionRequest | ChatCompletionRequest
) -> tuple[int, ...]:
    """The prompt's full-block hashes, with prefix caching on: token ids exactly, text in
    blocks of ``block_size × CHARS_PER_TOKEN`` characters (``inflight.prefix_blocks``)."""
    if not profile.enable_prefix_caching:
        return ()
    doc = body.model_dump(include={"messages"} if chat else {"prompt"})
    return tuple(request_blocks(doc, chat, profile.block_size, CHARS_PER_TOKEN))


def _stream(replica: Replica, req: GenRequest, seq: Sequence, event: asyncio.Event) -> Response:
    enc = StreamEncoder(req, replica.next_id(req.chat), int(time.time()))
    return _EngineStream(replica, seq, _chunks(enc, seq, event, enc.start()))


# --- the app ----------------------------------------------------------------------------
class HoldRequest(BaseModel):
    """``POST /emulator/engine/hold``'s body: ``{}`` holds now."""

    model_config = ConfigDict(extra="forbid")
    after_admitted: int | None = Field(default=None, ge=1)


def build_app(
    profile: Profile,
    served_names: tuple[str, ...],
    registry: CollectorRegistry,
    startup_elapsed: Callable[[], float] = lambda: 0.0,
    hold_control: bool = False,
) -> FastAPI:
    """The emulator's FastAPI application; ``registry`` is this app's own.

    ``hold_control`` adds the routes that hold the engine's clock (the module's docstring).

    The replica (engine, metrics, timer) is made at start-up, on the serving loop, and
    closed at shutdown. ``startup_elapsed()`` is how much of the start-up has already
    passed when the replica is made (the process's age, from the wiring site; 0 in tests
    that build the app in-process).
    """
    if not served_names:
        raise ValueError("at least one served model name is required")
    state: dict[str, Replica] = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        state["replica"] = Replica(
            profile, served_names, registry, asyncio.get_running_loop(), startup_elapsed()
        )
        try:
            yield
        finally:
            state.pop("replica").close()

    app = FastAPI(
        title="inflight emulator",
        version=EMULATOR_VERSION,
        lifespan=lifespan,
        # A JSON body without a Content-Type is read as JSON, as the FastAPI vLLM 0.10
        # shipped with did (newer FastAPI refuses it by default).
        strict_content_type=False,
    )
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)

    @app.get("/health")
    async def health() -> Response:
        if state["replica"].ready:
            return Response(status_code=200)
        return _error(ApiError(503, "the replica is starting up"))

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": EMULATOR_VERSION}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        replica = state["replica"]
        data: list[dict[str, Any]] = [
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
        return {"object": "list", "data": data}

    @app.get("/metrics")
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    if hold_control:

        @app.get("/emulator/engine")
        async def engine_state() -> dict[str, Any]:
            return state["replica"].engine_state()

        @app.post("/emulator/engine/hold")
        async def hold(body: HoldRequest) -> dict[str, Any]:
            return state["replica"].hold(body.after_admitted)

        @app.post("/emulator/engine/release")
        async def release() -> dict[str, Any]:
            return state["replica"].release_hold()

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Response | None:
        return await _generate(request, state["replica"], False, body)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest, request: Request) -> Response | None:
        return await _generate(request, state["replica"], True, body)

    return app


# --- serving ----------------------------------------------------------------------------
class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGTERM/SIGINT start the graceful shutdown; the process then exits 0.

        uvicorn re-raises the signal after shutting down, so the process would die of it;
        supervisors and tests read exit code 0 as "left on SIGTERM, not SIGKILL".
        """
        previous = {
            sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(app: FastAPI, sock: socket.socket) -> bool:
    """Serve ``app`` on the bound, listening ``sock`` until SIGTERM; False if start-up failed."""
    server = _Server(
        uvicorn.Config(
            app,
            # The engine's clock is loop.time(): the standard loop's time.monotonic(), as
            # under aiohttp before; uvloop's clock ticks in whole milliseconds.
            loop="asyncio",
            # Nagle is off on every connection: ``ready.listen``'s socket is IPPROTO_TCP,
            # so asyncio sets TCP_NODELAY on what it accepts (uvicorn writes a response's
            # headers and body apart; with Nagle on the body waited +41 ms for an ACK).
            http="httptools",
            lifespan="on",
            access_log=False,
            log_level="warning",
            # On SIGTERM, in-flight requests are cut off (as vLLM aborts them) after half a
            # second instead of holding the process: supervisors stop replicas fast.
            # (uvicorn annotates it int; it is a timeout for asyncio.wait_for.)
            timeout_graceful_shutdown=0.5,  # type: ignore[arg-type]
        )
    )
    server.run(sockets=[sock])
    return server.started
