"""Prefix-aware dispatch live (issue 38): a router process with ``--dispatch prefix`` in
front of two emulators whose engines keep vLLM's prefix cache (``--enable-prefix-caching``),
the OpenAI SDK as the client. Two groups of requests share a 64-token prefix each (token ids:
the router's blocks are the engine's); sent one at a time, so no endpoint is ever loaded and
the cache decides. With prefix-aware dispatch every repeat lands where its group is cached:
the engines report exactly each repeat's prefix as hits, and the router's own estimate says
the same. With least-outstanding the same requests spread over both (ties are broken at
random), which is what the feature exists to avoid; that case is asserted only as "not
more hits" (a random draw may keep a group together)."""

from __future__ import annotations

import openai
import pytest

from inflight import names
from tests.support import ProcessTracker, Server, http_text, sample_total

pytestmark = pytest.mark.integration

BLOCK = 16
PREFIX = 4 * BLOCK  # 64 tokens: 4 full blocks
REPEATS = 6  # requests a group


def _emulator(procs: ProcessTracker) -> Server:
    return procs.start_inflight(
        ["emulator", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", "m",
         "--max-num-seqs", "4", "--block-size", str(BLOCK), "--num-gpu-blocks", "400",
         "--max-model-len", "2048", "--time-scale", "0.01", "--startup-s", "0",
         "--enable-prefix-caching"],
        name="emulator",
    )  # fmt: skip


def _send_groups(router: Server) -> None:
    client = openai.OpenAI(base_url=f"{router.url}/v1", api_key="none", max_retries=0, timeout=60)
    for group in (0, 1):
        prefix = [1000 * (group + 1) + i for i in range(PREFIX)]
        for n in range(REPEATS):
            suffix = [50_000 + 100 * group + 10 * n + i for i in range(BLOCK)]
            done = client.completions.create(model="m", prompt=prefix + suffix, max_tokens=2)
            assert done.choices[0].finish_reason == "length"


def _engine_hits(emulators: list[Server]) -> float:
    return sum(sample_total(http_text(e.url + "/metrics"), "vllm:prefix_cache_hits_total")
               for e in emulators)  # fmt: skip


def _run(procs: ProcessTracker, dispatch: str) -> tuple[float, str]:
    emulators = [_emulator(procs), _emulator(procs)]
    router = procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--slots-per-endpoint", "4",
         "--endpoints", ",".join(e.url for e in emulators), "--hold-when-full",
         "--discover-kv-tokens", "--dispatch", dispatch],
        name="router",
        ready_path="/router/status",
    )  # fmt: skip
    _send_groups(router)
    return _engine_hits(emulators), http_text(router.url + "/metrics")


def test_prefix_dispatch_sends_each_group_where_it_is_cached(procs: ProcessTracker) -> None:
    hits, metrics = _run(procs, "prefix")
    # Every repeat after a group's first found its 64-token prefix cached (the engine looks
    # up at most prompt - 1 tokens, so the suffix's block never counts).
    assert hits == 2 * (REPEATS - 1) * PREFIX
    # The router's own estimate: 5 blocks a request hashed (80 tokens), 4 of them held on
    # the endpoint chosen for each repeat.
    assert sample_total(metrics, names.ROUTER_PREFIX_QUERIES) == 2 * REPEATS * 5
    assert sample_total(metrics, names.ROUTER_PREFIX_HITS) == 2 * (REPEATS - 1) * 4


def test_least_outstanding_finds_no_more_than_prefix_dispatch(procs: ProcessTracker) -> None:
    hits, metrics = _run(procs, "least-outstanding")
    assert hits <= 2 * (REPEATS - 1) * PREFIX
    assert sample_total(metrics, names.ROUTER_PREFIX_QUERIES) == 0  # off: nothing hashed
