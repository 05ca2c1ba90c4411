"""One real vLLM engine (``make vllm-cpu``: vLLM's CPU build, the local llama-8m) behind
``inflight up``'s router, Prometheus, scaler and autoscaling loop, started once for the module.

What the emulator cannot prove: that the vLLM metric names the stack reads
(``inflight/names.py``) are in a real engine's scrape, and in Prometheus, with their types
and labels; that a cancelled stream frees its slot in the engine; that the router's L is
vLLM's running + waiting plus what the router holds; and the KV-bound case, where the engine
runs fewer requests than its ``--max-num-seqs`` while the router counts every slot in use.

The engine runs with 40 KV blocks of 128 tokens (5,120 tokens), ``--max-num-seqs`` 4 and 4
slots at the router. Every wait is a poll; nothing here asserts a duration.

No check polls for a state that could pass between two polls (a fresh clone on a faster
machine once saw L = 6 with nothing running yet, then the first four requests done). Nor
does one wait for what its client has read before holding the state: on a busy machine the
client, and a test process waking from a sleep, fall seconds behind the engine core, and CI
paused the engine only after requests it wanted running had finished. A test steps the
replica's engine core instead (:func:`held_at`): the core is stopped (SIGSTOP) before the
requests are sent; then, its threads at niceness 19, it runs a short slice (SIGCONT, then
SIGSTOP again) between settled samples until one is the state the test wants, which is
asserted with the core still stopped. A request that finished on the way (vLLM's success
counter moved) fails the test, naming the samples seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from inflight import kv_blocks, names
from inflight.emulator.metrics import FINISHED_REASONS, cache_config_info
from inflight.engines import vllm_cpu
from inflight.procs import live_processes
from inflight.statedir import StackInfo, read_stack
from tests.support import (
    INFLIGHT,
    ProcessTracker,
    assert_engines_left_nothing,
    engine_leftovers,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]
# Where make vllm-cpu set the engine up (scripts/vllm_cpu.sh's VLLM_CPU_HOME).
HOME = Path(os.environ.get("VLLM_CPU_HOME", ROOT / vllm_cpu.DEFAULT_HOME)).resolve()
# The small model: the checks are about scheduling and metrics, not speed, and on a busy
# 2-core machine llama-150m prefills ~25 tokens/s (a 1,800-token prompt: ~70 s) where this
# one takes seconds; an abort waits for the engine's current step to end.
MODEL = "llama-8m"
SLOTS = 4
BLOCKS = 40  # of 128 tokens: 5,120 tokens of KV cache
MAX_MODEL_LEN = 2432  # 19 blocks: a 1,500 + 900-token request fits, two of them in the 39
# Real seconds: start-up is ~25 s alone on two cores, minutes when the machine is busy.
START_TIMEOUT_S = 900.0
TIMEOUT_S = 180.0
TEMP_DIR = Path(tempfile.gettempdir())


@dataclass(frozen=True)
class Stack:
    info: StackInfo
    replica_url: str


def _get(url: str, timeout_s: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return bytes(resp.read())


def status(stack: Stack) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_get(stack.info.router_url + "/router/status"))
    return doc


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    try:
        vllm_cpu.load_install(HOME).model_dir(MODEL)
    except vllm_cpu.EngineNotReady as exc:
        pytest.fail(str(exc))  # make test sets it up (scripts/test.sh); pytest alone does not
    tmp = tmp_path_factory.mktemp("real-engine")
    before = engine_leftovers(TEMP_DIR)
    tracker = ProcessTracker(tmp / "logs")
    state = tmp / "state"
    argv = [
        *INFLIGHT, "up", "--state-dir", str(state),
        "--engine", "vllm-cpu", "--engine-home", str(HOME), "--engine-model", MODEL,
        "--slots-per-replica", str(SLOTS), "--min-replicas", "1", "--max-replicas", "1",
        # Real time, as the engine: Prometheus scrapes every 5 s with a 5 s timeout (at 1 s a
        # busy API server's /metrics can time out, and its series go stale).
        "--time-scale", "1",
        f"--engine-arg=--num-gpu-blocks-override={BLOCKS}",
        f"--engine-arg=--max-model-len={MAX_MODEL_LEN}",
    ]  # fmt: skip
    up = tracker.start(argv, name="up", ready_path=None, grace_s=60.0, port_placeholder=None)
    try:

        def ready() -> StackInfo | None:
            if up.process.poll() is not None:
                log = Path(up.process.log_path or "").read_text()
                raise AssertionError(f"inflight up exited:\n{log[-4000:]}")
            with contextlib.suppress(OSError, ValueError):
                info = read_stack(state / "stack.json")
                return info if info.pid == up.process.pid else None
            return None

        info = wait_for(ready, timeout_s=START_TIMEOUT_S, interval_s=0.5, what="inflight up")
        endpoints = status(Stack(info, ""))["endpoints"]
        assert [e["state"] for e in endpoints] == ["ready"]
        yield Stack(info, endpoints[0]["url"])
    finally:
        survivors = tracker.stop_all()
        assert not survivors, f"still alive after inflight up stopped: {survivors}"
        # vLLM's temp files (IPC sockets, its file store) went in the replica's own temp
        # dir, and that went with the replica: nothing left in the temp dir.
        assert_engines_left_nothing(TEMP_DIR, before)


# --- reading vLLM's /metrics -----------------------------------------------------------------

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Scrape:
    types: dict[str, str]  # family -> type, from "# TYPE" lines
    samples: list[tuple[str, dict[str, str], float]]

    def value(self, name: str) -> float:
        """The sum of ``name``'s samples (over vLLM's engine/model labels)."""
        return sum(v for n, _, v in self.samples if n == name)

    def labels(self, name: str) -> list[dict[str, str]]:
        return [labels for n, labels, _ in self.samples if n == name]


def scrape(url: str) -> Scrape:
    types: dict[str, str] = {}
    samples = []
    for line in _get(url + "/metrics").decode().splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(maxsplit=3)
            types[family] = kind
        elif line and not line.startswith("#") and (m := _SAMPLE.match(line)):
            labels = dict(_LABEL.findall(m.group(2) or ""))
            samples.append((m.group(1), labels, float(m.group(3))))
    return Scrape(types, samples)


@dataclass(frozen=True)
class Sample:
    """The router's L and held count, and vLLM's running, waiting and KV cache usage from one
    scrape (the engine logs them together, per step), read between two identical router
    statuses (so nothing arrived or left at the router meanwhile)."""

    inflight: int
    held: int
    running: int
    waiting: int
    kv_usage: float
    ready: bool  # the router's endpoint is ready (not unhealthy, not draining)
    finished: int  # vLLM's requests finished (its success counter, over finished_reason)
    generated: int  # vLLM's tokens generated (its counter): a decode step moves it


def sample(stack: Stack) -> Sample | None:
    before = status(stack)
    metrics = scrape(stack.replica_url)
    after = status(stack)
    if (before["inflight"], before["queued"]) != (after["inflight"], after["queued"]):
        return None
    return Sample(
        inflight=after["inflight"],
        held=after["queued"],
        running=int(metrics.value(names.VLLM_RUNNING)),
        waiting=int(metrics.value(names.VLLM_WAITING)),
        kv_usage=metrics.value(names.VLLM_KV_CACHE_USAGE),
        ready=[e["state"] for e in after["endpoints"]] == ["ready"],
        finished=int(metrics.value(names.VLLM_REQUEST_SUCCESS)),
        generated=int(metrics.value(names.VLLM_GENERATION_TOKENS)),
    )


def idle(stack: Stack) -> Sample | None:
    """Nothing in flight, and the endpoint ready: a /health that timed out while the engine
    was busy (CI once) leaves it unhealthy for its back-off, and the router holds all it is
    sent until then (CI read L = 6, all 6 held, as the start of the next test)."""
    now = sample(stack)
    if now is None:
        return None
    quiet = (now.inflight, now.held, now.running, now.waiting) == (0, 0, 0, 0)
    return now if quiet and now.ready else None


# --- holding a state until the test has read it ------------------------------------------------

# vLLM names its engine core process so (setproctitle; vllm/v1/engine/core.py).
ENGINE_CORE_TITLE = b"VLLM::EngineCore"


def engine_core_pid(root: int) -> int:
    """The one vLLM engine core among ``root``'s descendants (``inflight up``'s replica)."""
    children: dict[int, list[int]] = {}
    for proc in live_processes():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(ENGINE_CORE_TITLE):
                found.append(pid)
    assert len(found) == 1, f"engine core processes under {root}: {found}"
    return found[0]


def _stopped(pid: int) -> bool:
    return any(p.pid == pid and p.state == "T" for p in live_processes())


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)
    wait_for(lambda: _stopped(pid), timeout_s=TIMEOUT_S, what=f"engine core {pid} stopped")


# How long the engine core runs between two samples: a few of llama-8m's decode steps here
# (a stopped step goes on in the next slice). A slice after which nothing moved (the core
# got no CPU: three busy loops beside it here) is doubled, up to MAX_SLICE_S.
RUN_SLICE_S = 0.02
MAX_SLICE_S = 0.32
# The core's niceness while a test steps it. A slice ends when this process wakes from its
# sleep; on a busy machine a waking process of the same niceness as the core's threads (which
# take both cores while they compute) waited seconds, and the core ran 500 tokens a request
# per "slice" (CI; here with three busy loops beside it). At 19 the waking test comes first.
STEPPED_NICE = 19


@contextlib.contextmanager
def reniced(pid: int, nice: int) -> Iterator[None]:
    """Every thread of ``pid`` at ``nice`` for the block (Linux's niceness is a thread's), then
    each back at its own."""
    before: dict[int, int] = {}
    try:
        for tid in (int(t) for t in os.listdir(f"/proc/{pid}/task")):
            with contextlib.suppress(ProcessLookupError):
                before[tid] = os.getpriority(os.PRIO_PROCESS, tid)
                os.setpriority(os.PRIO_PROCESS, tid, nice)
        yield
    finally:
        for tid, was in before.items():
            with contextlib.suppress(ProcessLookupError):
                os.setpriority(os.PRIO_PROCESS, tid, was)


def settled_sample(stack: Stack) -> Sample:
    """A sample equal to the one read just before it: with the engine core stopped, vLLM's
    API server has then relayed every step the core finished, and the router has seen what
    it relayed."""
    last: list[Sample | None] = [None]

    def settled() -> Sample | None:
        now = sample(stack)
        before, last[0] = last[0], now
        return now if now is not None and now == before else None

    found: Sample = wait_for(settled, timeout_s=TIMEOUT_S, interval_s=0.01, what="a settled sample")
    return found


@contextlib.contextmanager
def held_at(
    stack: Stack,
    streams: Streams,
    bodies: Sequence[dict[str, Any]],
    want: Callable[[Sample], bool],
    what: str,
) -> Iterator[Sample]:
    """``bodies`` streamed through the router, and the replica's engine core stepped until a
    settled sample is ``want``; the block runs with the core stopped (SIGSTOP) at that
    sample, which it gets, and the core resumes (SIGCONT) after it.

    The core is stopped before the requests are sent, until the router has them all (a busy
    client sends late, and a test starved for seconds let the core run a request through).
    Then it runs for :data:`RUN_SLICE_S` between two samples (longer while it does not move),
    its threads at :data:`STEPPED_NICE`: a time slice of the engine's, not a wait for a
    condition (the condition is read with the core stopped). Fails if a request finishes
    before ``want`` holds, or after :data:`TIMEOUT_S`, naming the samples seen (the first
    and last few).

    The API server and its /health keep answering while the core is stopped (vLLM's health
    check reads a flag, not the engine)."""
    pid = engine_core_pid(stack.info.pid)
    seen: list[Sample] = []
    deadline = time.monotonic() + TIMEOUT_S
    slice_s = RUN_SLICE_S
    with reniced(pid, STEPPED_NICE):
        while True:
            _stop(pid)
            try:
                if not seen:
                    _send_all(stack, streams, bodies)
                now = settled_sample(stack)
                if want(now):
                    yield now
                    return
            finally:
                os.kill(pid, signal.SIGCONT)
            moved = not seen or seen[-1] != now
            if moved:
                seen.append(now)
            trail = seen if len(seen) <= 8 else [*seen[:3], "...", *seen[-5:]]
            assert now.finished == seen[0].finished, f"a request finished before {what}: {trail}"
            assert time.monotonic() < deadline, f"no {what} in {TIMEOUT_S} s: {trail}"
            slice_s = RUN_SLICE_S if moved else min(2 * slice_s, MAX_SLICE_S)
            time.sleep(slice_s)


def _send_all(stack: Stack, streams: Streams, bodies: Sequence[dict[str, Any]]) -> None:
    """``bodies`` sent, and the router counting them all (held or passed on)."""
    for body in bodies:
        streams.send(body)

    def counted() -> bool:
        return bool(status(stack)["inflight"] == len(bodies))

    what = f"the router counting the {len(bodies)} requests sent (client codes {streams.codes})"
    wait_for(counted, timeout_s=TIMEOUT_S, what=what)


@pytest.fixture(autouse=True)
def _starts_and_ends_idle(stack: Stack) -> Iterator[None]:
    wait_for(lambda: idle(stack), timeout_s=TIMEOUT_S, what="an idle stack")
    yield
    wait_for(lambda: idle(stack), timeout_s=TIMEOUT_S, what="an idle stack")


# --- clients ----------------------------------------------------------------------------------


class Streams:
    """Streamed completions through the router on a background event loop, each counting
    its SSE events; leaving the ``with`` block cancels those still open (the client closes
    the connection, as a user who gives up does)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.tasks: list[asyncio.Task[None]] = []
        self.events: list[int] = []
        self.codes: list[int] = []
        self.session: aiohttp.ClientSession | None = None
        self.closed = False

    def __enter__(self) -> Streams:
        self.thread.start()
        return self

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def send(self, body: dict[str, Any]) -> None:
        index = len(self.events)
        self.events.append(0)
        self._run(self._spawn(index, body))

    async def _spawn(self, index: int, body: dict[str, Any]) -> None:
        if self.session is None:
            self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self.tasks.append(asyncio.get_running_loop().create_task(self._stream(index, body)))

    async def _stream(self, index: int, body: dict[str, Any]) -> None:
        assert self.session is not None
        async with self.session.post(
            self.url + "/v1/completions", json={**body, "stream": True}
        ) as resp:
            self.codes.append(resp.status)
            try:
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        self.events[index] += 1
            except asyncio.CancelledError:
                resp.close()  # the connection goes: the router sees the client leave
                raise

    async def _cancel(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.session is not None:
            await self.session.close()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the streams still open, close the session, stop the loop (once)."""
        if self.closed:
            return
        self.closed = True
        done: Future[None] = asyncio.run_coroutine_threadsafe(self._cancel(), self.loop)
        done.result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.loop.close()


def text_body(max_tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "Summarise the meeting", "max_tokens": max_tokens,
            "ignore_eos": True}  # fmt: skip


def token_body(prompt_tokens: int, max_tokens: int, seed: int) -> dict[str, Any]:
    """A prompt of random token ids (fixed length, no prefix-cache hit), a fixed output."""
    rng = random.Random(seed)
    ids = [rng.randrange(len(vllm_cpu.SPECIAL_TOKENS), 8000) for _ in range(prompt_tokens)]
    return {"model": MODEL, "prompt": ids, "max_tokens": max_tokens, "ignore_eos": True}


def prometheus(stack: Stack) -> str:
    assert stack.info.prometheus_url, "prometheus is installed here; the stack should use it"
    return stack.info.prometheus_url


def prometheus_names(stack: Stack) -> set[str]:
    return set(json.loads(_get(prometheus(stack) + "/api/v1/label/__name__/values"))["data"])


def prometheus_query(stack: Stack, query: str) -> list[dict[str, Any]]:
    url = prometheus(stack) + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    result: list[dict[str, Any]] = json.loads(_get(url))["data"]["result"]
    return result


# --- the tests ---------------------------------------------------------------------------------


def test_the_vllm_metrics_the_stack_reads_are_in_the_live_scrape(stack: Stack) -> None:
    metrics = scrape(stack.replica_url)
    wrong = {
        name: (kind, metrics.types.get(name))
        for name, kind in names.VLLM_METRICS.items()
        if metrics.types.get(name) != kind
    }
    assert not wrong, f"(type in names.VLLM_METRICS, type scraped) differ: {wrong}"
    for name in (names.VLLM_RUNNING, names.VLLM_WAITING, names.VLLM_KV_CACHE_USAGE):
        for labels in metrics.labels(name):
            assert {names.VLLM_MODEL_LABEL, names.VLLM_ENGINE_LABEL} <= set(labels), name
            assert labels[names.VLLM_MODEL_LABEL] == MODEL
    reasons = {lab.get(names.VLLM_FINISHED_REASON_LABEL) for lab in
               metrics.labels(names.VLLM_REQUEST_SUCCESS)}  # fmt: skip
    assert reasons == set(FINISHED_REASONS)  # the emulator's
    # The engine arguments reached vLLM: 40 blocks.
    (cache,) = metrics.labels(names.VLLM_CACHE_CONFIG_INFO)
    assert cache[names.VLLM_CACHE_NUM_BLOCKS_LABEL] == str(BLOCKS)
    assert cache[names.VLLM_CACHE_SIZE_TOKENS_LABEL] == str(BLOCKS * 128)
    # The emulator's cache_config_info carries the live engine's labels, values for 40 blocks.
    emulated = cache_config_info(128, BLOCKS, MAX_MODEL_LEN, overridden=True)
    assert set(emulated) == set(cache)
    for label in (
        "block_size",
        "num_gpu_blocks",
        "kv_cache_size_tokens",
        "kv_cache_max_concurrency",
        "num_gpu_blocks_override",
        "engine",
    ):
        assert emulated[label] == cache[label], label
    assert (
        metrics.types.get(names.VLLM_CACHE_CONFIG_INFO)
        == names.VLLM_INFO_METRICS[names.VLLM_CACHE_CONFIG_INFO]
    )
    reasons = {lab[names.VLLM_REASON_LABEL] for lab in metrics.labels(names.VLLM_WAITING_BY_REASON)}
    assert reasons == set(names.VLLM_WAITING_REASONS)
    # Prometheus scrapes them from the replica the stack published, and the scaler's vLLM
    # PromQL reads them.
    want = {n + ("_bucket" if kind == "histogram" else "") for n, kind in
            names.VLLM_METRICS.items()}  # fmt: skip
    wait_for(lambda: want <= prometheus_names(stack), timeout_s=TIMEOUT_S, what=f"{want} scraped")
    answer = wait_for(
        lambda: prometheus_query(stack, names.promql(names.PROMQL_L_VLLM)),
        timeout_s=TIMEOUT_S,
        what="an answer to the scaler's vLLM PromQL",
    )
    assert [float(a["value"][1]) for a in answer] == [0.0]


def test_an_openai_client_is_served_through_the_router(stack: Stack) -> None:
    client = openai.OpenAI(base_url=stack.info.router_url + "/v1", api_key="none", timeout=60)
    assert [m.id for m in client.models.list().data] == [MODEL]
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Summarise the meeting"}], max_tokens=8
    )
    assert chat.usage is not None and 1 <= chat.usage.completion_tokens <= 8
    assert isinstance(chat.choices[0].message.content, str)
    done = client.completions.create(model=MODEL, prompt="hello", max_tokens=5, extra_body={
        "ignore_eos": True})  # fmt: skip
    assert done.usage is not None and done.usage.completion_tokens == 5


def test_a_cancelled_stream_leaves_nothing_running(stack: Stack) -> None:
    generated = scrape(stack.replica_url).value(names.VLLM_GENERATION_TOKENS)
    with Streams(stack.info.router_url) as streams:
        one = [text_body(max_tokens=1500)]
        with held_at(stack, streams, one, lambda s: s.running == 1, "it running") as running:
            streams.close()  # the client leaves while the engine cannot step
    assert (running.inflight, running.running) == (1, 1), running
    # Closed before its 1,500 tokens: the engine stops it, and so generated fewer (vLLM
    # counts every token it generates, an aborted request's too; it counts no abort). The
    # state is held as soon as vLLM runs it: it may have generated only its first token.
    wait_for(lambda: idle(stack), timeout_s=TIMEOUT_S, what="vLLM running 0 after the cancel")
    assert streams.codes == [200]
    more = scrape(stack.replica_url).value(names.VLLM_GENERATION_TOKENS) - generated
    assert 1 <= more < 1500, f"vLLM generated {more} tokens for the cancelled stream"


def test_the_routers_l_is_vllms_running_and_waiting_plus_what_it_holds(stack: Stack) -> None:
    # Polling for this state once failed on a fresh clone on a faster machine (a poll saw
    # L = 6 before vLLM ran any, the next one the first four done), and waiting for the
    # client to read tokens before pausing the engine failed in CI (a request had finished,
    # L = 5). Now the engine is stepped to the state and held there while it is read.
    # 1,000 tokens: the router admits on KV tokens, and 4 × (prompt + max_tokens) must fit
    # the 39 usable blocks, or it would hold more.
    six = [text_body(max_tokens=1000) for _ in range(6)]  # 4 slots: the router holds 2
    with (
        Streams(stack.info.router_url) as streams,
        held_at(stack, streams, six, lambda s: s.running == SLOTS, "4 running") as now,
    ):
        pass
    assert (now.inflight, now.held, now.ready) == (6, 2, True), now
    assert now.running + now.waiting == SLOTS, now
    assert now.inflight == now.running + now.waiting + now.held, now


def test_kv_bound_the_router_holds_what_the_cache_cannot_take(stack: Stack) -> None:
    # 4 × (1,500 + 900) tokens need 4 × 19 blocks; 40 (39 usable) hold two. inflight up's
    # router admits on KV tokens by default (it read the replica's cache_config_info): two
    # run in vLLM, two wait at the router, none in vLLM's own queue. Slots only, vLLM ran two
    # and queued two (docs/capacity.md; capacity_live --no-token-admission shows it).
    # A step can show 2 running with the second prompt only partly in the cache (chunked
    # prefill: 2,048 tokens a step on the CPU build), so the state held has both prompts'
    # blocks: 2 × 12 of the 39 (0.615). Polling for it missed it on busy machines (CI's
    # /metrics answered in up to 0.5 s), and so did pausing the engine once the client had
    # read both streams' first tokens (CI: the first two had finished, L = 2). Now the
    # engine is stepped until both prompts are in the cache, and held there while it is read.
    prompt_tokens = 1500
    full = 2 * kv_blocks.blocks_for(prompt_tokens, 128) / kv_blocks.usable_blocks(BLOCKS)

    def both_cached(s: Sample) -> bool:
        return s.running >= 2 and s.kv_usage >= full - 1e-9

    four = [token_body(prompt_tokens=prompt_tokens, max_tokens=900, seed=i) for i in range(SLOTS)]
    what = "both admitted prompts in the cache"
    with (
        Streams(stack.info.router_url) as streams,
        held_at(stack, streams, four, both_cached, what) as bound,
    ):
        pass
    assert (bound.inflight, bound.held) == (SLOTS, 2), bound
    # The usage from the same scrape as the running count.
    assert bound.kv_usage >= full - 1e-9, f"both prompts not in the cache: {bound}"
    assert bound.waiting == 0, f"vLLM queued {bound.waiting} that the router should have held"
    assert bound.running == 2, f"{bound.running} running while 2 are held at L = 4"
    assert bound.running + bound.held == bound.inflight == SLOTS
