"""Token demand (router/tokens.py), the dispatcher's token admission (router/dispatch.py,
stepped by hand: no sockets, no clock but a hand-moved one), KV capacity discovery's parsing
(router/kv_discovery.py) and the flags (router/config.py)."""

from __future__ import annotations

import argparse
import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry

from inflight import names
from inflight.control.hold_order import plan_from_classes
from inflight.emulator.metrics import cache_config_info
from router.config import ConfigError, add_arguments, settings_from_args
from router.dispatch import Admission, Dispatcher
from router.kv_discovery import (
    KvCache,
    cache_from_metrics,
    capacity_from_metrics,
    max_model_len_from_models,
)
from router.metrics import RouterMetrics
from router.pool import Endpoint, Pool
from router.tokens import (
    CHAT,
    COMPLETIONS,
    COMPLETIONS_DEFAULT_MAX_TOKENS,
    MAX_DEMAND,
    MESSAGE_OVERHEAD_TOKENS,
    NONE,
    BadBody,
    BadBudget,
    Demand,
    TokenDemand,
    chat_tokens,
    demand_of,
    estimate_errors,
    request_demand,
    text_tokens,
)

A, B = "http://127.0.0.1:9001", "http://127.0.0.1:9002"


# --- demand ----------------------------------------------------------------------------------
def test_token_id_prompts_are_exact_and_each_sequence_gets_its_budget() -> None:
    assert demand_of({"prompt": [5] * 1800, "max_tokens": 200}, chat=False) == Demand(
        1800, 200, True
    )
    batch = demand_of({"prompt": [[1] * 10, [2] * 30], "max_tokens": 5}, chat=False)
    assert batch == Demand(40, 10, True)  # two sequences, a budget each
    assert demand_of({"prompt": [1] * 10, "max_tokens": 5, "n": 3}, chat=False).output == 15


def test_text_prompts_are_estimated_at_the_ratio() -> None:
    d = demand_of({"prompt": "x" * 401, "max_tokens": 1}, chat=False, chars_per_token=4.0)
    assert d == Demand(101, 1, False)  # rounded up
    d = demand_of({"prompt": "x" * 400, "max_tokens": 1}, chat=False, chars_per_token=2.5)
    assert d.prompt == 160
    assert text_tokens("") == 0


def test_chat_sums_contents_and_adds_a_template_overhead_a_message() -> None:
    messages = [
        {"role": "system", "content": "x" * 20},
        {"role": "user", "content": [{"type": "text", "text": "y" * 20}, {"type": "image_url"}]},
    ]
    assert chat_tokens(messages, 4.0) == 10 + 2 * MESSAGE_OVERHEAD_TOKENS
    d = demand_of({"messages": messages, "max_completion_tokens": 7}, chat=True)
    assert d == Demand(10 + 2 * MESSAGE_OVERHEAD_TOKENS, 7, False)
    # max_tokens wins over max_completion_tokens, as in vLLM
    assert (
        demand_of({"messages": messages, "max_tokens": 3, "max_completion_tokens": 7}, True).output
        == 3
    )


def test_an_absent_budget_is_what_vllm_allows() -> None:
    # /v1/completions: vLLM's default of 16
    assert demand_of({"prompt": [1] * 100}, chat=False, max_model_len=2048).output == (
        COMPLETIONS_DEFAULT_MAX_TOKENS
    )
    # chat, or an explicit null: up to max_model_len − prompt
    chat = {"messages": [{"role": "user", "content": "x" * 400}]}
    d = demand_of(chat, chat=True, max_model_len=2048)
    assert d.total == 2048
    assert demand_of({"prompt": [1] * 100, "max_tokens": None}, False, 2048).total == 2048
    # a prompt longer than max_model_len: no budget, not a negative one
    assert demand_of({"prompt": [1] * 3000, "max_tokens": None}, False, 2048).output == 0
    # max_model_len unknown: the prompt alone
    assert demand_of(chat, chat=True).total == 100 + MESSAGE_OVERHEAD_TOKENS


def test_raw_requests_other_routes_and_bad_bodies_have_no_demand() -> None:
    body = json.dumps({"model": "m", "prompt": [1] * 1800, "max_tokens": 200}).encode()
    assert request_demand(COMPLETIONS, body).total == 2000
    assert request_demand(COMPLETIONS + b"?x=1", body).total == 2000
    assert request_demand(b"/v1/embeddings", body) is NONE
    assert request_demand(CHAT, b"not json") is NONE
    assert request_demand(CHAT, b"[1, 2]") is NONE
    # odd field types count as absent, never fail
    odd = json.dumps({"prompt": {"a": 1}, "max_tokens": "9", "n": True}).encode()
    assert request_demand(COMPLETIONS, odd, max_model_len=100).total == 0
    assert TokenDemand(2048, 4.0)(COMPLETIONS, body) == 2000
    with pytest.raises(ValueError, match="--chars-per-token"):
        TokenDemand(None, 0.0)


def test_estimate_errors_are_relative_to_the_actual_count() -> None:
    assert estimate_errors([110, 90, 5], [100, 100, 0]) == [0.1, -0.1]


# --- token admission ---------------------------------------------------------------------------
def token_dispatcher(
    slots: int = 4, kv: int | None = 5120, urls: tuple[str, ...] = (A,), **kw: object
) -> Dispatcher:
    pool = Pool(slots)
    pool.set_endpoints(urls)
    return Dispatcher(pool, hold_when_full=True, kv_tokens=kv, **kw)  # type: ignore[arg-type]


class Slot:
    """A plain waiter (the simulator's kind): records the endpoint it was handed."""

    def __init__(self, name: str, got: list[tuple[str, str]]) -> None:
        self.name, self._got, self._done = name, got, False

    def done(self) -> bool:
        return self._done

    def set_result(self, result: Endpoint, /) -> None:
        self._done = True
        self._got.append((self.name, result.url))

    def set_exception(self, exception: BaseException, /) -> None:
        self._done = True
        self._got.append((self.name, type(exception).__name__))


def test_kv_bound_case_two_run_and_two_wait_at_the_router() -> None:
    """The issue's case: 4 slots, 5,120 tokens, four 1,800 + 200-token requests."""
    d = token_dispatcher()
    first, second = d.try_acquire(2000), d.try_acquire(2000)
    assert first is not None and second is first
    assert d.try_acquire(2000) is None  # a slot is free, 6,000 tokens are not
    got: list[tuple[str, str]] = []
    d.hold(Slot("c", got), tokens=2000)
    d.hold(Slot("d", got), tokens=2000)
    assert d.queued == 2 and d.queued_tokens == 4000
    assert d.tokens_in_flight(A) == 4000 and first.inflight == 2
    d.release(first, 2000)  # room for one: the oldest held gets it
    assert got == [("c", A)] and d.queued == 1 and d.tokens_in_flight(A) == 4000
    d.release(first, 2000)
    d.release(first, 2000)
    assert got == [("c", A), ("d", A)] and d.queued == 0 and d.queued_tokens == 0
    d.release(first, 2000)
    assert d.tokens_in_flight(A) == 0 and first.inflight == 0


def test_without_token_capacity_the_same_requests_take_every_slot() -> None:
    pool = Pool(4)
    pool.set_endpoints([A])
    d = Dispatcher(pool, hold_when_full=True)
    assert d.demand is None and not d.token_aware
    assert all(d.try_acquire(2000) is not None for _ in range(4))
    assert d.try_acquire(2000) is None


def test_the_least_loaded_endpoint_that_fits_gets_the_request() -> None:
    d = token_dispatcher(urls=(A, B))
    big = d.try_acquire(4000)
    assert big is not None
    other = B if big.url == A else A
    small = d.try_acquire(1000)  # fewest in flight: the other one
    assert small is not None and small.url == other
    # 2,000 more: fits only the endpoint holding 1,000, though both hold one request
    nxt = d.try_acquire(2000)
    assert nxt is not None and nxt.url == other


def test_the_head_of_the_order_is_never_overtaken_by_a_smaller_request() -> None:
    d = token_dispatcher()
    ep = d.try_acquire(4000)
    assert ep is not None
    got: list[tuple[str, str]] = []
    d.hold(Slot("big", got), tokens=3000)
    d.hold(Slot("small", got), tokens=500)  # would fit now, but "big" is first
    assert d.try_acquire(100) is None  # nor does a newcomer get past the held ones
    d.pump()
    assert got == [] and d.queued == 2
    d.release(ep, 4000)
    assert got == [("big", A), ("small", A)]


def test_a_request_larger_than_an_endpoint_waits_for_an_empty_one_never_forever() -> None:
    d = token_dispatcher()
    ep = d.try_acquire(100)
    assert ep is not None
    got: list[tuple[str, str]] = []
    d.hold(Slot("huge", got), tokens=9000)
    assert got == []
    d.release(ep, 100)  # the endpoint is empty: the whole endpoint is its
    assert got == [("huge", A)] and d.tokens_in_flight(A) == 9000
    assert d.try_acquire(1) is None  # nothing else fits beside it
    d.release(ep, 9000)
    assert d.try_acquire(9000) is ep  # and alone it goes at once


def test_slots_still_bound_when_the_tokens_fit() -> None:
    d = token_dispatcher(slots=2, kv=100_000)
    assert d.try_acquire(10) is not None and d.try_acquire(10) is not None
    assert d.try_acquire(10) is None


def test_priority_classes_and_deadlines_order_the_token_bound_queue() -> None:
    now = [100.0]
    plan = plan_from_classes(["high:0:1.5", "low:10:1.5"], None)
    d = token_dispatcher(plan=plan, clock=lambda: now[0])
    ep = d.try_acquire(4000)
    assert ep is not None
    got: list[tuple[str, str]] = []
    d.hold(Slot("low", got), cls=1, tokens=2000)
    now[0] = 100.5
    d.hold(Slot("high", got), cls=0, tokens=2000)
    now[0] = 101.0
    d.release(ep, 4000)  # room for both, served in class order
    assert got == [("high", A), ("low", A)]
    assert sum(d.classes[0].wait_counts) == 1 and sum(d.classes[1].wait_counts) == 1


def test_unknown_capacity_is_slots_only_until_discovery_tells() -> None:
    d = token_dispatcher(kv=None, discover_kv_tokens=True)
    assert d.token_aware and d.kv_capacity(A) is None
    ep = d.try_acquire(4000)
    assert ep is not None and d.try_acquire(4000) is ep  # nothing known: 8,000 admitted
    got: list[tuple[str, str]] = []
    d.set_kv_capacity(A, 5120)
    assert d.try_acquire(1) is None  # 8,000 of 5,120 in flight now
    d.hold(Slot("held", got), tokens=2000)
    d.set_kv_capacity(A, 20_000)  # a larger cache discovered: the held request fits
    assert got == [("held", A)]
    d.set_kv_capacity(A, None)
    assert d.kv_capacity(A) is None


def test_demand_is_charged_in_whole_blocks_where_the_block_size_is_known() -> None:
    # 39 usable blocks of 128 (4,992 tokens): two 2,000-token requests take 16 blocks each
    # (2,048 tokens), so a third of 900 (8 blocks) does not fit (32 + 8 > 39) though its
    # tokens would (4,000 + 900 ≤ 4,992); in tokens alone (no block size) it is admitted.
    d = token_dispatcher(kv=None, discover_kv_tokens=True)
    d.set_kv_capacity(A, 4992, 128)
    assert d.charge_of(A, 2000) == 2048 and d.charge_of(A, 0) == 0
    ep = d.try_acquire(2000)
    assert ep is not None and d.try_acquire(2000) is ep
    assert d.tokens_in_flight(A) == 4096
    assert d.try_acquire(900) is None
    assert d.try_acquire(896) is ep  # 7 blocks: 39 exactly
    d.release(ep, 896)
    d.release(ep, 2000)
    assert d.tokens_in_flight(A) == 2048
    d.set_kv_capacity(A, 4992)  # no block size said: tokens as they are
    assert d.charge_of(A, 2000) == 2000
    # the block size changed under a request in flight: nothing is left behind once the
    # endpoint is empty
    d.release(ep, 2000)
    assert d.tokens_in_flight(A) == 0


def test_configured_capacity_until_the_endpoint_reports_its_own() -> None:
    d = token_dispatcher(kv=1000, discover_kv_tokens=True)
    assert d.kv_capacity(A) == 1000
    d.set_kv_capacity(A, 5120)
    assert d.kv_capacity(A) == 5120


def test_a_cancelled_held_request_takes_no_tokens() -> None:
    d = token_dispatcher()
    ep = d.try_acquire(4000)
    assert ep is not None
    got: list[tuple[str, str]] = []
    gone, nxt = Slot("gone", got), Slot("next", got)
    d.hold(gone, tokens=2000)
    d.hold(nxt, tokens=2000)
    d.unhold(gone)
    assert d.queued_tokens == 2000
    d.release(ep, 4000)
    assert got == [("next", A)] and d.tokens_in_flight(A) == 2000


def test_a_drained_endpoint_leaves_no_token_series() -> None:
    d = token_dispatcher()
    ep = d.try_acquire(2000)
    assert ep is not None
    d.pool.set_endpoints([])  # removed: draining until its request ends
    d.release(ep, 2000)
    assert ep.removed and A not in d._tokens


def test_token_admission_needs_holding_and_a_positive_capacity() -> None:
    with pytest.raises(ValueError, match="--hold-when-full"):
        Dispatcher(Pool(4), kv_tokens=100)
    with pytest.raises(ValueError, match="--kv-tokens"):
        Dispatcher(Pool(4), hold_when_full=True, kv_tokens=0)


async def test_admission_charges_its_demand_and_gives_it_back_on_the_retry_and_at_the_end() -> None:
    from router.errors import NotDelivered

    d = token_dispatcher(urls=(A, B))
    seen: list[tuple[str, int]] = []
    calls = 0

    async def open_(ep: Endpoint) -> str:
        nonlocal calls
        calls += 1
        seen.append((ep.url, d.tokens_in_flight(ep.url)))
        if calls == 1:
            raise NotDelivered("refused")
        return "ok"

    def not_delivered(ep: Endpoint, exc: NotDelivered) -> None:
        d.pool.mark_unhealthy(ep, 0.0, 60.0)

    admission: Admission[str] = Admission(d, open_, not_delivered, tokens=1500)
    await admission.enter()
    first, second = seen
    assert first[1] == 1500 and second[1] == 1500 and first[0] != second[0]
    assert d.tokens_in_flight(first[0]) == 0  # given back with the refused slot
    admission.leave()
    admission.leave()  # once only
    assert d.tokens_in_flight(second[0]) == 0


async def test_a_held_admission_gets_its_slot_when_tokens_free() -> None:
    d = token_dispatcher()
    ep = d.try_acquire(4000)
    assert ep is not None

    async def open_(ep: Endpoint) -> str:
        return "ok"

    admission: Admission[str] = Admission(d, open_, lambda ep, exc: None, tokens=2000)
    task = asyncio.ensure_future(admission.enter())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done() and d.queued == 1 and d.queued_tokens == 2000
    d.release(ep, 4000)
    await task
    assert d.tokens_in_flight(A) == 2000
    admission.leave()
    assert d.tokens_in_flight(A) == 0 and d.inflight == 0


# --- metrics -------------------------------------------------------------------------------------
def test_token_gauges_per_endpoint_beside_the_inflight_ones() -> None:
    d = token_dispatcher(urls=(A, B))
    registry = CollectorRegistry()
    RouterMetrics(registry, d)
    ep = d.try_acquire(2000)
    assert ep is not None
    d.hold(Slot("x", []), tokens=0)
    label = {"endpoint": ep.label}
    assert registry.get_sample_value(names.ROUTER_ENDPOINT_INFLIGHT_TOKENS, label) == 2000
    assert registry.get_sample_value(names.ROUTER_ENDPOINT_KV_TOKENS, label) == 5120
    assert registry.get_sample_value(names.ROUTER_ENDPOINT_INFLIGHT, label) == 1
    d2 = Dispatcher(Pool(4), hold_when_full=True)
    d2.pool.set_endpoints([A])
    r2 = CollectorRegistry()
    RouterMetrics(r2, d2)
    assert r2.get_sample_value(names.ROUTER_ENDPOINT_KV_TOKENS, {"endpoint": "127.0.0.1:9001"}) == 0
    assert r2.get_sample_value(names.ROUTER_QUEUED_TOKENS) == 0


# --- discovery's parsing ------------------------------------------------------------------
def test_capacity_from_the_emulators_cache_config_info() -> None:
    labels = cache_config_info(128, 40, 2048, True)
    pairs = ",".join(f'{k}="{v}"' for k, v in labels.items())
    line = f"vllm:cache_config_info{{{pairs}}} 1.0"
    text = "# TYPE vllm:cache_config_info gauge\n" + line + "\nvllm:num_requests_running 0.0\n"
    # 40 blocks of 128 stated (5,120 tokens): 39 usable, the null block left out, as the
    # emulator's engine (and vLLM's) holds them; demands there are charged in whole blocks.
    assert cache_from_metrics(text) == KvCache(39 * 128, 128)
    assert capacity_from_metrics(text) == 4992
    no_size = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0'
    assert capacity_from_metrics(no_size) == 99 * 16
    # blocks from kv_cache_size_tokens ÷ block_size when num_gpu_blocks is not said
    by_size = 'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="1600"} 1.0'
    assert cache_from_metrics(by_size) == KvCache(99 * 16, 16)
    # kv_cache_size_tokens alone: that many tokens, no block to round to
    alone = 'vllm:cache_config_info{kv_cache_size_tokens="1600"} 1.0'
    assert cache_from_metrics(alone) == KvCache(1600, None)
    assert capacity_from_metrics('vllm:cache_config_info{block_size="16"} 1.0') is None
    one_block = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="1"} 1.0'
    assert capacity_from_metrics(one_block) is None  # the null block only: nothing usable
    assert max_model_len_from_models({"data": [{"id": "m"}]}) is None
    assert max_model_len_from_models([]) is None


# --- flags --------------------------------------------------------------------------------
def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_token_flags_reach_the_wiring() -> None:
    cfg = settings_from_args(parse("--endpoints", "", "--hold-when-full", "--kv-tokens", "5120"))
    assert cfg.token_admission and cfg.dispatch_kv_tokens == 5120
    assert cfg.demand_max_model_len == 5120 and cfg.chars_per_token == 4.0
    cfg = settings_from_args(
        parse(
            "--endpoints", "", "--hold-when-full", "--discover-kv-tokens", "--max-model-len", "2048"
        )
    )
    assert cfg.token_admission and cfg.dispatch_kv_tokens is None
    assert cfg.demand_max_model_len == 2048
    off = settings_from_args(parse("--endpoints", ""))
    assert not off.token_admission and off.demand_max_model_len is None


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--kv-tokens", "5120"), "--kv-tokens"),
        (("--discover-kv-tokens",), "--discover-kv-tokens"),
        (("--hold-when-full", "--kv-tokens", "-1"), "--kv-tokens"),
        (("--hold-when-full", "--max-model-len", "2048"), "--max-model-len"),
        (("--hold-when-full", "--kv-tokens", "9", "--chars-per-token", "0"), "--chars-per-token"),
    ],
)
def test_bad_token_flags_are_named(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        settings_from_args(parse("--endpoints", "", *argv))


# --- the estimate's measurement (inflight/bench/token_estimate.py) ------------------------
def test_the_fitted_ratio_is_scored_only_on_the_other_half() -> None:
    from inflight.bench import token_estimate as te

    rows = [
        {"kind": "completion", "source": "prose", "chars": 300, "messages": 0,
         "engine": 100, "request": {"prompt": "x" * 300}},
        {"kind": "completion", "source": "prose", "chars": 200, "messages": 0,
         "engine": 100, "request": {"prompt": "x" * 200}},
        {"kind": "chat", "source": "code", "chars": 300, "messages": 2,
         "engine": 108, "request": {"messages": [{"role": "user", "content": "x" * 300},
                                                 {"role": "system", "content": ""}]}},
        {"kind": "chat", "source": "code", "chars": 200, "messages": 2,
         "engine": 108, "request": {"messages": [{"role": "user", "content": "x" * 200},
                                                 {"role": "system", "content": ""}]}},
    ]  # fmt: skip
    assert te.fitted_ratio(rows, MESSAGE_OVERHEAD_TOKENS) == 1000 / 400
    summary = te.summarize(rows, 4.0)
    # even rows (300 chars each: 3.0 a token) score the odd ones (2.0) and the reverse
    assert summary["fitted_chars_per_token"] == [2.0, 3.0]
    assert [r["estimate_fitted"] for r in rows] == [150, 67, 158, 75]
    assert [r["estimate"] for r in rows] == [75, 50, 83, 58]
    assert summary["error"]["all"]["n"] == 4


def test_token_estimate_cuts_prompts_from_the_corpus_it_is_given(tmp_path) -> None:
    """``inflight bench token-estimate --corpus KIND=GLOB``: a user's own texts, by kind,
    instead of this repository's files (which an installed package does not have)."""
    from inflight.bench import token_estimate as te
    from inflight.cli import build_parser

    (tmp_path / "a.txt").write_text("prose " * 20)
    (tmp_path / "b.json").write_text('{"k": 1}')
    argv = ["bench", "token-estimate", "--url", "http://127.0.0.1:9", "--model", "m",
            "--out-dir", str(tmp_path / "out"), "--corpus", "prose=*.txt",
            "--corpus", "json=*.json"]  # fmt: skip
    args = build_parser().parse_args(argv)
    assert args.corpus == [("prose", "*.txt"), ("json", "*.json")]
    texts = te.corpus(tmp_path, {kind: (pattern,) for kind, pattern in args.corpus})
    assert texts == {"prose": ["prose " * 20], "json": ['{"k": 1}']}
    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--corpus", "no-glob"])


# --- budgets checked, not trusted (issue 39) -----------------------------------------------
def test_a_budget_vllm_would_refuse_is_refused_with_vllms_message() -> None:
    body = json.dumps({"prompt": [1] * 100, "max_tokens": 10**9}).encode()
    with pytest.raises(BadBudget, match=r"too large: 1000000000\. .* 2048 tokens .* 100 input"):
        request_demand(COMPLETIONS, body, max_model_len=2048)
    # A text prompt is an estimate: it never refuses; max_tokens alone past the length does.
    text = json.dumps({"messages": [{"role": "user", "content": "x" * 9000}], "max_tokens": 2048})
    assert request_demand(CHAT, text.encode(), max_model_len=2048).output == 2048
    with pytest.raises(BadBudget) as info:
        request_demand(CHAT, b'{"messages": [], "max_completion_tokens": 2049}', 2048)
    assert info.value.param == "max_completion_tokens" and info.value.status == 400
    for field in ("max_tokens", "n", "best_of"):
        with pytest.raises(BadBudget, match=f"{field} must be at least 1"):
            request_demand(COMPLETIONS, json.dumps({"prompt": "x", field: 0}).encode(), 2048)
    with pytest.raises(BadBudget, match="3000 input tokens"):
        request_demand(COMPLETIONS, json.dumps({"prompt": [1] * 3000}).encode(), 2048)


def test_an_absurd_budget_with_no_length_known_is_bounded() -> None:
    body = b'{"prompt": "hi", "max_tokens": 1' + b"0" * 400 + b', "n": 1000}'
    demand = request_demand(COMPLETIONS, body)
    assert demand.total == MAX_DEMAND
    assert float(demand.total) == MAX_DEMAND  # exact, finite


def test_a_body_nested_too_deeply_is_a_clean_400() -> None:
    deep = b'{"prompt": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(BadBody, match="nested too deeply") as info:
        request_demand(COMPLETIONS, deep)
    assert info.value.status == 400


def test_more_prompt_items_than_the_router_reads_is_a_clean_400_counted_before_reading() -> None:
    many = json.dumps({"prompt": ["a"] * 9000, "max_tokens": 5}).encode()
    with pytest.raises(BadBody, match=r"9000 prompts.*--max-prompt-items=8192") as info:
        request_demand(COMPLETIONS, many)
    assert info.value.status == 400 and info.value.reason == "bad_body"
    # A list of token ids is one prompt, however long; the bound is the operator's.
    assert request_demand(COMPLETIONS, json.dumps({"prompt": [7] * 9000}).encode()).prompt == 9000
    assert request_demand(COMPLETIONS, many, max_items=9000).prompt == 9000
    # A chat's messages and their content parts count alike.
    parts = [{"type": "text", "text": "x"}] * 5000
    chat = json.dumps({"messages": [{"role": "user", "content": parts}] * 2}).encode()
    with pytest.raises(BadBody, match="10002 messages and content parts"):
        request_demand(CHAT, chat)
    with pytest.raises(ValueError, match="--max-prompt-items"):
        TokenDemand(max_items=0)
