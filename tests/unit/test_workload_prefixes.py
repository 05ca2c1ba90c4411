"""Prompt prefixes in the workload: Mooncake's ``hash_ids`` as read, and the prefix-cache
scenarios (``shared-prefix``, ``hot-prefix``, ``no-prefix``)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import pytest

from inflight.workload.plan import plan_from_args
from inflight.workload.scenarios import PREFIX_SCENARIOS, SCENARIOS, get_scenario
from inflight.workload.trace import PlannedRequest, TraceError
from inflight.workload.trace_formats import (
    MOONCAKE_BLOCK_TOKENS,
    TraceWindow,
    load_trace,
    parse_mooncake,
)


def mooncake_line(ts: int, ids: object = None) -> str:
    obj: dict[str, object] = {"timestamp": ts, "input_length": 1100, "output_length": 20}
    if ids is not None:
        obj["hash_ids"] = ids
    return json.dumps(obj)


def test_mooncake_hash_ids_are_read_as_published(tmp_path: Path) -> None:
    path = tmp_path / "conv.jsonl"
    lines = [mooncake_line(0, [1, 2, 3]), mooncake_line(1500, [1, 2, 4]), mooncake_line(3000)]
    path.write_text("\n".join(lines) + "\n")
    loaded = load_trace(path, TraceWindow(start_s=1.0))
    a, b = loaded.requests
    assert a.prefix_ids == (1, 2, 4) and a.prefix_block_tokens == MOONCAKE_BLOCK_TOKENS == 512
    assert b.prefix_ids == () and b.prefix_block_tokens == 0  # no hash_ids: nothing known
    assert loaded.meta["trace_requests_with_prefix_ids"] == 2


@pytest.mark.parametrize("ids", [[1, "2"], "12", [1, True], {"a": 1}])
def test_bad_hash_ids_name_the_line_and_field(ids: object) -> None:
    with pytest.raises(TraceError, match=r"^t\.jsonl:2: hash_ids must be a list of integers"):
        parse_mooncake([mooncake_line(0, [1]), mooncake_line(5, ids)], "t.jsonl")


def test_the_prefix_scenarios_are_the_simulators_only() -> None:
    assert set(PREFIX_SCENARIOS) == {"shared-prefix", "hot-prefix", "no-prefix"}
    assert not set(PREFIX_SCENARIOS) & set(SCENARIOS)  # inflight bench does not offer them
    assert get_scenario("shared-prefix") is PREFIX_SCENARIOS["shared-prefix"]


def plan(name: str, seed: int = 5) -> list[PlannedRequest]:
    return get_scenario(name).plan(seed)


def test_shared_prefix_groups_share_1500_tokens_and_nothing_else() -> None:
    reqs = plan("shared-prefix")
    assert len(reqs) > 1000
    assert {r.prompt_tokens for r in reqs} == {1600}
    assert {r.prefix_block_tokens for r in reqs} == {100}
    heads = Counter(r.prefix_ids[:15] for r in reqs)
    assert len(heads) == 8 and min(heads.values()) > len(reqs) / 16  # 8 groups, all used
    tails = [r.prefix_ids[15:] for r in reqs]
    assert len(set(tails)) == len(reqs)  # every suffix its own
    assert all(len(r.prefix_ids) == 16 for r in reqs)


def test_hot_prefix_is_one_group_and_no_prefix_shares_nothing() -> None:
    hot, none, shared = plan("hot-prefix"), plan("no-prefix"), plan("shared-prefix")
    assert len({r.prefix_ids[:15] for r in hot}) == 1
    ids = Counter(i for r in none for i in r.prefix_ids)
    assert max(ids.values()) == 1  # the negative control: no block in two prompts
    # the three differ only in their prefixes: the same arrivals and lengths
    same = [(r.t_s, r.prompt_tokens, r.max_tokens) for r in hot]
    assert same == [(r.t_s, r.prompt_tokens, r.max_tokens) for r in none]
    assert same == [(r.t_s, r.prompt_tokens, r.max_tokens) for r in shared]


def test_the_open_loop_flags_plan_the_prefixes() -> None:
    args = argparse.Namespace(
        scenario="shared-prefix",
        arrivals=None,
        trace=None,
        prompt_tokens=None,
        max_tokens=None,
        seed=5,
        slo_ttft_s=None,
        slo_tpot_s=None,
        drain_s=None,
    )
    resolved = plan_from_args(args)
    assert list(resolved.requests) == plan("shared-prefix")
    assert resolved.meta["prefix"] == "8 group(s) × 1500-token shared prefix"
