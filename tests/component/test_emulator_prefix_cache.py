"""The emulator's prefix cache over HTTP: a real ``inflight emulator`` on 127.0.0.1, the
OpenAI SDK, and vLLM's ``vllm:prefix_cache_*`` counters read from ``/metrics``.

Hits are exact: token-id prompts are hashed in the engine's 128-token blocks, text in
128 × 4-character blocks (``inflight.prefix_blocks``); a lookup stops one token short.
"""

from __future__ import annotations

import openai
import pytest

from inflight import names
from tests.component.test_emulator_server import MODEL, client, emulator_argv, metric, samples
from tests.support import ProcessTracker, Server

BLOCK = 128


def counters(server: Server) -> tuple[float, float]:
    return (
        metric(server, names.VLLM_PREFIX_CACHE_QUERIES),
        metric(server, names.VLLM_PREFIX_CACHE_HITS),
    )


def cache_info(server: Server) -> dict[str, str]:
    for (name, labels), _ in samples(server).items():
        if name == names.VLLM_CACHE_CONFIG_INFO:
            return dict(labels)
    raise AssertionError("no vllm:cache_config_info")


def complete(sdk: openai.OpenAI, prompt: str | list[int]) -> None:
    out = sdk.completions.create(model=MODEL, prompt=prompt, max_tokens=3)
    assert out.usage is not None and out.choices[0].finish_reason == "length"


@pytest.fixture
def caching(procs: ProcessTracker) -> Server:
    argv = emulator_argv("--enable-prefix-caching", "--cold-start-requests", "0", time_scale=0.01)
    return procs.start_inflight(argv, name="emulator")


def test_token_id_prompts_hit_their_shared_blocks(caching: Server) -> None:
    assert cache_info(caching)["enable_prefix_caching"] == "True"
    assert counters(caching) == (0.0, 0.0)
    sdk = client(caching)
    prefix = list(range(1000, 2500))  # 1,500 tokens: 11 whole blocks
    complete(sdk, prefix + [7] * 100)
    complete(sdk, prefix + [9] * 100)
    assert counters(caching) == (3200.0, 11 * BLOCK)
    complete(sdk, list(range(5000, 5000 + 1600)))  # nothing shared
    assert counters(caching) == (4800.0, 11 * BLOCK)


def test_text_and_chat_prompts_hit_in_character_blocks(caching: Server) -> None:
    sdk = client(caching)
    prefix = "".join(f"line {i}: the meeting agreed to ship on time\n" for i in range(140))
    prefix = prefix[:6000]  # 11 whole blocks of 512 characters
    complete(sdk, prefix + "x" * 400)  # 1,600 tokens
    complete(sdk, prefix + "y" * 400)
    assert counters(caching) == (3200.0, 11 * BLOCK)
    turn = [{"role": "user", "content": prefix}]
    sdk.chat.completions.create(model=MODEL, messages=turn, max_tokens=3)  # type: ignore[arg-type]
    queries, hits = counters(caching)
    more = [*turn, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "z" * 600}]
    sdk.chat.completions.create(model=MODEL, messages=more, max_tokens=3)  # type: ignore[arg-type]
    # the next turn extends the first: at least the first turn's whole blocks hit
    assert counters(caching)[1] - hits >= (len("user\n" + prefix) // (4 * BLOCK)) * BLOCK
    assert counters(caching)[0] > queries


def test_without_the_flag_nothing_is_looked_up(procs: ProcessTracker) -> None:
    server = procs.start_inflight(emulator_argv(time_scale=0.01), name="emulator")
    assert cache_info(server)["enable_prefix_caching"] == "False"
    sdk = client(server)
    prefix = list(range(1000, 2500))
    complete(sdk, prefix + [7] * 100)
    complete(sdk, prefix + [9] * 100)
    assert counters(server) == (0.0, 0.0)  # vLLM counts no lookup with caching off
