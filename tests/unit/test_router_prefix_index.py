"""The router's estimate of each endpoint's prefix cache (router/prefix_index.py): chained
block hashes as vLLM's automatic prefix caching keys its blocks, an LRU per endpoint
bounded by its KV blocks, and the affinity-or-load choice."""

from __future__ import annotations

import doctest

import pytest

from router import prefix_index
from router.prefix_index import (
    PrefixIndex,
    chat_text,
    prefer,
    request_blocks,
    text_blocks,
    token_blocks,
)

pytestmark = pytest.mark.unit


def test_blocks_are_chained_and_only_full_ones_count() -> None:
    a = token_blocks(list(range(100)), 16)
    assert len(a) == 6  # 96 tokens in full blocks; the last 4 are not cached by the engine
    b = token_blocks(list(range(64)) + [0] * 36, 16)
    assert a[:4] == b[:4] and a[4] != b[4]  # shared exactly as far as the tokens are
    # The same block of tokens after a different prefix is a different block.
    c = token_blocks([1] * 16 + list(range(16, 32)), 16)
    assert c[1] != a[1]
    assert token_blocks(list(range(15)), 16) == []


def test_text_blocks_share_as_far_as_the_text() -> None:
    system = "You are a careful assistant. " * 40  # 1,160 characters
    one = text_blocks(system + "Question one?", 64)
    two = text_blocks(system + "A different question", 64)
    shared = len(system) // 64
    assert one[:shared] == two[:shared]
    assert one[shared:] != two[shared:] or len(one) == shared


def test_a_chats_next_turn_extends_the_previous_turns_blocks() -> None:
    turn1 = [{"role": "system", "content": "s" * 500}, {"role": "user", "content": "u" * 300}]
    turn2 = [*turn1, {"role": "assistant", "content": "a" * 200}, {"role": "user", "content": "?"}]
    b1 = request_blocks({"messages": turn1}, True, 16, 4.0)
    b2 = request_blocks({"messages": turn2}, True, 16, 4.0)
    assert b1 and b2[: len(b1)] == b1
    parts = [{"type": "text", "text": "hello"}, {"type": "image_url", "image_url": {}}]
    assert chat_text([{"role": "user", "content": parts}]) == "user\nhello"


@pytest.mark.parametrize(
    ("doc", "chat", "n"),
    [
        ({"prompt": list(range(64))}, False, 4),  # token ids: the engine's blocks
        ({"prompt": [list(range(32)), [1, 2]]}, False, 2),  # a batch: its first prompt
        ({"prompt": "x" * 130}, False, 2),  # text: 64 characters a block (16 × 4.0)
        ({"prompt": ["y" * 64]}, False, 1),
        ({"prompt": 5}, False, 0),  # nothing the router can read
        ({"messages": "not a list"}, True, 0),
        ([1, 2, 3], False, 0),  # not an object
        ({"prompt": [True, False] * 40}, False, 0),  # booleans are not token ids
    ],
)
def test_request_blocks_read_what_the_router_can_see(doc: object, chat: bool, n: int) -> None:
    assert len(request_blocks(doc, chat, 16, 4.0)) == n


def test_the_index_is_an_lru_bounded_by_the_endpoints_blocks() -> None:
    index = PrefixIndex()
    first = token_blocks(list(range(64)), 16)  # 4 blocks
    second = token_blocks(list(range(1000, 1064)), 16)  # 4 others
    index.set_capacity("a", 6)
    index.record("a", first)
    assert index.matched("a", first) == 4 and index.held("a") == 4
    index.record("a", second)  # 8 > 6: the least recently used go, first's tail first
    assert index.held("a") == 6
    assert index.matched("a", second) == 4
    assert index.matched("a", first) == 2  # its first two blocks were used last of its own
    index.record("a", first[:2])  # used again: now the most recent
    index.set_capacity("a", 2)
    assert index.matched("a", first) == 2 and index.matched("a", second) == 0
    with pytest.raises(ValueError, match="≥ 1"):
        index.set_capacity("a", 0)


def test_a_removed_endpoint_is_forgotten_at_once() -> None:
    index = PrefixIndex()
    blocks = token_blocks(list(range(32)), 16)
    index.record("a", blocks)
    index.forget("a")
    assert index.matched("a", blocks) == 0 and list(index.urls()) == []


def test_doctests() -> None:
    assert doctest.testmod(prefix_index).failed == 0


def test_unique_blocks_are_those_no_other_endpoint_holds() -> None:
    index = PrefixIndex()
    shared = token_blocks(list(range(32)), 16)  # 2 blocks both hold
    a_only = token_blocks(list(range(32)) + list(range(500, 548)), 16)  # + 3 of a's own
    index.record("a", a_only)
    index.record("b", shared)
    assert (index.unique_blocks("a"), index.unique_blocks("b")) == (3, 0)
    index.forget("b")  # b's copies went with it: a is now the only holder of all 5
    assert index.unique_blocks("a") == 5
    index.set_capacity("a", 2)  # evicted blocks are not lost with a any more
    assert index.unique_blocks("a") == 2
    assert index.unique_blocks("never-seen") == 0


def test_affinity_holds_within_the_balance_and_yields_past_it() -> None:
    # The holder of the longest prefix wins while its load is within the balance.
    assert prefer([("a", 2, 8), ("b", 0, 0)], 2) == ("a", 8)
    # Past the balance, the load's choice (None) stands.
    assert prefer([("a", 3, 8), ("b", 0, 0)], 2) == (None, 0)
    # A request that hits nowhere is the load's (a new, empty replica gets it).
    assert prefer([("a", 0, 0), ("new", 0, 0)], 2) == (None, 0)
    # Equal hits: the less loaded holder.
    assert prefer([("a", 2, 5), ("b", 1, 5)], 2) == ("b", 5)
    assert prefer([], 2) == (None, 0)
