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
  exactly (:func:`token_blocks`);
* **text** (a completion's ``prompt`` string, a chat's messages): the router has no
  tokenizer, so a block is ``block_size × chars_per_token`` characters of the text
  (:func:`text_blocks`). Two prompts that share a text prefix share these blocks as far as
  they share it, which is all the choice needs; what it cannot see is where the engine's
  token boundaries fall (the estimate is off by at most one block at the end of a shared
  prefix), a chat template's own tokens, tools, and images (a chat is rendered as its
  roles and text contents in order, :func:`chat_text`).

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
from typing import Any

# A block's hash chains to the one before it; the first block's parent.
_ROOT = 0x5EED


def token_blocks(tokens: Sequence[int], block_size: int) -> list[int]:
    """The chained hashes of the full ``block_size``-token blocks of ``tokens`` (a trailing
    partial block is not cached by the engine, so it is not hashed).

    >>> a = token_blocks(list(range(40)), 16)
    >>> len(a), a == token_blocks(list(range(32)) + [7] * 8, 16)
    (2, True)
    >>> token_blocks([9] + list(range(1, 40)), 16)[1] == a[1]  # the chain: block 2 differs
    False
    """
    out: list[int] = []
    parent = _ROOT
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        out.append(parent)
    return out


def text_blocks(text: str, block_chars: int) -> list[int]:
    """The chained hashes of the full ``block_chars``-character blocks of ``text`` (the
    router's stand-in for token blocks: ``block_size × chars_per_token`` characters)."""
    out: list[int] = []
    parent = _ROOT
    for start in range(0, len(text) - block_chars + 1, block_chars):
        parent = hash((parent, text[start : start + block_chars]))
        out.append(parent)
    return out


def chat_text(messages: Any) -> str:
    """A chat's messages as the router can render them: each message's role and its text
    content (a string, or the ``text`` parts of a list), in order. Not the model's chat
    template; the same messages always give the same text, and a conversation's next turn
    extends the previous turn's text."""
    if not isinstance(messages, list):
        return ""
    parts: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        parts.append(str(message.get("role", "")))
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for item in content:
                if isinstance(item, dict) and isinstance(item.get("text"), str):
                    parts.append(item["text"])
    return "\n".join(parts)


def request_blocks(doc: Any, chat: bool, block_size: int, chars_per_token: float) -> list[int]:
    """A parsed request body's prompt blocks: a chat's rendered messages, a completion's
    token ids or text (the first prompt of a batch: the engine caches each alike). Empty
    when the body names no prompt the router can read."""
    if not isinstance(doc, dict):
        return []
    block_chars = max(1, round(block_size * chars_per_token))
    if chat:
        return text_blocks(chat_text(doc.get("messages")), block_chars)
    prompt = doc.get("prompt")
    if isinstance(prompt, list) and prompt:
        first = prompt[0]
        if isinstance(first, int) and not isinstance(first, bool):
            return token_blocks(prompt, block_size)
        if isinstance(first, list):
            return token_blocks(first, block_size)
        if isinstance(first, str):
            return text_blocks(first, block_chars)
        return []
    if isinstance(prompt, str):
        return text_blocks(prompt, block_chars)
    return []


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

    def urls(self) -> Iterable[str]:
        return self._blocks.keys()

    def _evict(self, url: str) -> None:
        cap = self._capacity.get(url)
        held = self._blocks.get(url)
        if cap is None or held is None:
            return
        while len(held) > cap:
            held.popitem(last=False)


def prefer(candidates: Sequence[tuple[str, int, int]], balance: int) -> tuple[str | None, int]:
    """The endpoint a request should go to for its cache, or None for the load's choice.

    ``candidates``: (URL, requests in flight, blocks of the request it holds) for each
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
    best_url: str | None = None
    best_hit = 0
    best_load = 0
    least = min((load for _, load, _ in candidates), default=0)
    for url, load, hit in candidates:
        if hit > best_hit or (hit == best_hit and hit and load < best_load):
            best_url, best_hit, best_load = url, hit, load
    if best_url is None or best_load - least > balance:
        return None, 0
    return best_url, best_hit
