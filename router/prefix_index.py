"""Which prompt prefixes each endpoint probably holds in its prefix cache, and where a
request should go because of it.

vLLM's automatic prefix caching (its design doc, "Automatic Prefix Caching") keys each
*full* KV block by a hash of the block's tokens chained to the hash of the blocks before
it, so two prompts share cached blocks exactly as far as they share a block-aligned token
prefix; a block no running request uses is evicted least recently used first, and of one
request's blocks the last (the longest prefix) goes first. The router sees no engine's
cache (unless it subscribes to KV events), so it keeps its own estimate, the way llm-d's
"approximate" prefix scorer and SGLang's ``cache_aware`` router do: each request it sends
to an endpoint is assumed cached there, block by block, in an LRU bounded by that
endpoint's KV blocks (``num_gpu_blocks`` of ``vllm:cache_config_info``).

What the router can see of a prompt:

* **token ids** (a completion's ``prompt`` as a list of integers): the engine's own blocks,
  exactly (:func:`inflight.prefix_blocks.token_blocks`);
* **text** (a completion's ``prompt`` string, a chat's messages): the router has no
  tokenizer, so a block is ``block_size × chars_per_token`` characters of the text
  (:func:`inflight.prefix_blocks.text_blocks`). Two prompts that share a text prefix
  share these blocks as far as they share it, which is all the choice needs. What it
  cannot see: where the engine's token boundaries fall (the estimate is off by at most
  one block at the end of a shared prefix), a chat template's own tokens, tools, and
  images (a chat is rendered as its roles and text contents in order,
  :func:`inflight.prefix_blocks.chat_text`).

The choice (:func:`prefer`) balances affinity against load, as the issue and the peers
ask: the request goes to the endpoint holding its longest cached prefix while that
endpoint's requests in flight stay within ``balance`` of the least-loaded candidate's;
past that, or when no endpoint holds any of it, the dispatcher's least-outstanding choice
stands (so a new, empty replica takes the requests that hit nowhere). An endpoint that is
removed is forgotten at once (:meth:`PrefixIndex.forget`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TypeVar

# The block hashing (one implementation, shared with the emulator's engine and the
# simulator): chained hashes of full blocks of token ids, or of text in
# ``block_size × chars_per_token`` characters.
from inflight.prefix_blocks import chat_text, request_blocks, text_blocks, token_blocks
from router.tokens import DEFAULT_MAX_PROMPT_ITEMS, BadBody, check_items, is_chat, parse_json

K = TypeVar("K")  # what names an endpoint: its URL, or the endpoint itself

__all__ = [
    "PrefixIndex",
    "PromptBlocks",
    "chat_text",
    "prefer",
    "request_blocks",
    "text_blocks",
    "token_blocks",
]


class PromptBlocks:
    """A raw request's prompt blocks, as the proxy sees it (path and body): a completion's
    or a chat's, hashed in the dispatcher's block size; empty for another route or a body
    the router cannot read (vLLM answers it)."""

    __slots__ = ("chars_per_token", "max_items")

    def __init__(self, chars_per_token: float, max_items: int = DEFAULT_MAX_PROMPT_ITEMS) -> None:
        self.chars_per_token = chars_per_token
        self.max_items = max_items

    def __call__(self, path: bytes, body: bytes, block_size: int) -> list[int]:
        chat = is_chat(path)
        if chat is None:
            return []
        try:
            doc = parse_json(body)
            if isinstance(doc, dict):
                check_items(doc, chat, self.max_items)
        except (ValueError, BadBody):  # not JSON, too deeply nested, too many items: none
            return []
        return request_blocks(doc, chat, block_size, self.chars_per_token)


class PrefixIndex:
    """The blocks each endpoint probably holds: an LRU per endpoint URL, bounded by its
    capacity in blocks (:meth:`set_capacity`; unbounded until known)."""

    __slots__ = ("_blocks", "_capacity")

    def __init__(self) -> None:
        self._blocks: dict[str, OrderedDict[int, None]] = {}
        self._capacity: dict[str, int] = {}

    def set_capacity(self, url: str, blocks: int | None) -> None:
        """``url`` holds at most ``blocks`` KV blocks (None: not known, unbounded)."""
        if blocks is None:
            self._capacity.pop(url, None)
            return
        if blocks < 1:
            raise ValueError(f"an endpoint's capacity in blocks must be ≥ 1, got {blocks}")
        self._capacity[url] = blocks
        self._evict(url)

    def forget(self, url: str) -> None:
        """``url`` was removed (or restarted): nothing is cached there any more."""
        self._blocks.pop(url, None)
        self._capacity.pop(url, None)

    def matched(self, url: str, blocks: Sequence[int]) -> int:
        """How many of ``blocks``, from the first, ``url`` holds."""
        held = self._blocks.get(url)
        if not held:
            return 0
        n = 0
        for block in blocks:
            if block not in held:
                break
            n += 1
        return n

    def record(self, url: str, blocks: Sequence[int]) -> None:
        """A request with ``blocks`` was sent to ``url``: they are cached there now, the
        first most recently used (the engine evicts a request's last blocks first)."""
        if not blocks:
            return
        held = self._blocks.get(url)
        if held is None:
            held = self._blocks[url] = OrderedDict()
        for block in reversed(blocks):
            if block in held:
                held.move_to_end(block)
            else:
                held[block] = None
        self._evict(url)

    def held(self, url: str) -> int:
        """The blocks the index has for ``url``."""
        held = self._blocks.get(url)
        return len(held) if held else 0

    def unique_blocks(self, url: str) -> int:
        """The blocks the index has for ``url`` and for no other endpoint: the cache lost
        with it (:mod:`inflight.control.scale_down`). Not on the request path: it reads
        every other endpoint's blocks.

        >>> index = PrefixIndex()
        >>> index.record("a", [1, 2, 3]); index.record("b", [1, 2])
        >>> index.unique_blocks("a"), index.unique_blocks("b"), index.unique_blocks("c")
        (1, 0, 0)
        """
        held = self._blocks.get(url)
        if not held:
            return 0
        others = [blocks for other, blocks in self._blocks.items() if other != url and blocks]
        return sum(1 for block in held if not any(block in o for o in others))

    def urls(self) -> Iterable[str]:
        return self._blocks.keys()

    def _evict(self, url: str) -> None:
        cap = self._capacity.get(url)
        held = self._blocks.get(url)
        if cap is None or held is None:
            return
        while len(held) > cap:
            held.popitem(last=False)


def prefer(candidates: Sequence[tuple[K, int, int]], balance: int) -> tuple[K | None, int]:
    """The endpoint a request should go to for its cache, or None for the load's choice.

    ``candidates``: (endpoint, requests in flight, blocks of the request it holds) for each
    endpoint that could take the request now. The one holding the most blocks (the least
    loaded among those) wins while its load is within ``balance`` of the least-loaded
    candidate's; else, or when none holds any block, None. Returns the choice and the
    blocks it holds (0 with None).

    >>> prefer([("a", 3, 10), ("b", 0, 0)], balance=2)
    (None, 0)
    >>> prefer([("a", 2, 10), ("b", 0, 0)], balance=2)
    ('a', 10)
    >>> prefer([("a", 1, 4), ("b", 1, 9), ("c", 0, 0)], balance=2)
    ('b', 9)
    """
    best_url: K | None = None
    best_hit = 0
    best_load = 0
    least = min((load for _, load, _ in candidates), default=0)
    for url, load, hit in candidates:
        if hit > best_hit or (hit == best_hit and hit and load < best_load):
            best_url, best_hit, best_load = url, hit, load
    if best_url is None or best_load - least > balance:
        return None, 0
    return best_url, best_hit


class SharedBlocks:
    """The prompt blocks each endpoint's requests in flight reference, counted: a block
    that several requests in flight share is one block of the endpoint's KV cache (vLLM
    shares a cached prefix's blocks by reference), and it stays in use until the last of
    them ends. Exact for the requests the router sent; blocks cached but referenced by no
    request in flight are free to the engine (evictable) and not counted.

    >>> shared = SharedBlocks()
    >>> shared.hold("a", [1, 2, 3]), shared.hold("a", [1, 2, 9]), shared.held("a", [1, 2, 5])
    (3, 1, 2)
    >>> shared.drop("a", [1, 2, 3]), shared.drop("a", [1, 2, 9])  # the last holder frees
    (1, 3)
    """

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        self._refs: dict[str, dict[int, int]] = {}

    def held(self, url: str, blocks: Sequence[int]) -> int:
        """How many of ``blocks`` requests in flight on ``url`` reference now."""
        refs = self._refs.get(url)
        return sum(1 for block in blocks if block in refs) if refs else 0

    def hold(self, url: str, blocks: Sequence[int]) -> int:
        """A request in flight on ``url`` references ``blocks``; returns how many were
        referenced by none before (the blocks it adds to the cache in use)."""
        refs = self._refs.setdefault(url, {})
        new = 0
        for block in blocks:
            count = refs.get(block, 0)
            new += count == 0
            refs[block] = count + 1
        return new

    def drop(self, url: str, blocks: Sequence[int]) -> int:
        """That request ended; returns how many of its blocks no request references now."""
        refs = self._refs.get(url)
        if not refs:
            return 0
        gone = 0
        for block in blocks:
            count = refs.get(block, 0)
            if count <= 1:
                gone += count == 1
                refs.pop(block, None)
            else:
                refs[block] = count - 1
        if not refs:
            del self._refs[url]
        return gone

    def forget(self, url: str) -> None:
        """Nothing in flight on ``url`` any more (or it was removed)."""
        self._refs.pop(url, None)


def uncached(tokens: int, matched: int, block_size: int) -> int:
    """A request's demand of ``tokens`` less ``matched`` prompt blocks of ``block_size``
    tokens it need not add: the blocks it shares with requests in flight
    (:class:`SharedBlocks`), or, for its prompt's own blocks, all of them (counted once
    each by :class:`SharedBlocks`). At least one token stays (vLLM recomputes a prompt's
    last token even when all of it is cached). The one rule for the router's token
    accounting, live and simulated, and so for the scaler's token dimension
    (docs/capacity.md).

    >>> uncached(1600 + 200, 11, 128)  # 11 of a 1,600-token prompt's 12 blocks cached
    392
    >>> uncached(256, 2, 128), uncached(500, 0, 128)
    (1, 500)
    """
    cached = matched * block_size
    if cached <= 0:
        return tokens
    return max(1, tokens - cached)
