"""A prompt's prefix-cache blocks: the chained block hashes vLLM's automatic prefix caching
keys its KV blocks by, as far as a reader of the request (the router, the emulator's
server) or of a trace (the simulator) can know them.

vLLM (its design doc, "Automatic Prefix Caching"; ``vllm/v1/core/kv_cache_utils.py``) keys
each *full* block of ``block_size`` tokens by a hash of the block's tokens chained to the
hash of the blocks before it, so two prompts share cached blocks exactly as far as they
share a block-aligned token prefix; a trailing partial block is not cached.

What can be seen of a prompt:

* **token ids** (a completion's ``prompt`` as a list of integers): the engine's own blocks,
  exactly (:func:`token_blocks`);
* **text** (a completion's ``prompt`` string, a chat's messages): no tokenizer here, so a
  block is ``block_size × chars_per_token`` characters of the text (:func:`text_blocks`).
  Two prompts that share a text prefix share these blocks as far as they share it; what
  cannot be seen is where the engine's token boundaries fall (off by at most one block at
  the end of a shared prefix), a chat template's own tokens, tools and images (a chat is
  rendered as its roles and text contents in order, :func:`chat_text`). A text's hashes
  use Python's string hash, so they are the same within one process only;
* **a trace's block ids** (Mooncake's ``hash_ids``, 512-token blocks, each id standing
  for its block and every block before it; the simulator's scenarios): re-cut to the
  engine's block size by :func:`rechunk` (deterministic: ints only).

One implementation for the router's prefix index (``router/prefix_index.py``), the
emulator's server and the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    stand-in for token blocks: ``block_size × chars_per_token`` characters)."""
    out: list[int] = []
    parent = _ROOT
    for start in range(0, len(text) - block_chars + 1, block_chars):
        parent = hash((parent, text[start : start + block_chars]))
        out.append(parent)
    return out


def chat_text(messages: Any) -> str:
    """A chat's messages as they can be rendered without the model's template: each
    message's role and its text content (a string, or the ``text`` parts of a list), in
    order. The same messages always give the same text, and a conversation's next turn
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
    when the body names no prompt that can be read."""
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


def rechunk(ids: Sequence[int], id_tokens: int, block_size: int, prompt_tokens: int) -> list[int]:
    """The engine's block hashes of a prompt a trace describes by block ids.

    ``ids``: one id per ``id_tokens`` tokens of the prompt, each standing for its block and
    every block before it (Mooncake's ``hash_ids``: equal ids, equal prefixes). The
    engine's block ``k`` (tokens ``k·b`` to ``(k+1)·b − 1``) is then named by the id of the
    trace block holding its last token and where in that block it ends: two prompts share
    it exactly when they share that id, i.e. every token up to it. Only the full blocks of
    ``prompt_tokens`` that the ids cover get a hash.

    >>> a, b = rechunk([7, 8], 512, 128, 1024), rechunk([7, 9], 512, 128, 1024)
    >>> a[:4] == b[:4], a[4] == b[4]
    (True, False)
    >>> len(rechunk([7, 8], 512, 128, 1000)), len(rechunk([7], 512, 128, 1000))
    (7, 4)
    >>> a, b = rechunk([1, 2, 3], 100, 128, 300), rechunk([1, 2, 4], 100, 128, 300)
    >>> a[0] == b[0], a[1] == b[1]  # block 1 (tokens 128–255) holds tokens of id 3 or 4
    (True, False)
    """
    if id_tokens < 1 or block_size < 1:
        raise ValueError(f"block sizes must be ≥ 1, got {id_tokens} and {block_size}")
    full = min(prompt_tokens, len(ids) * id_tokens) // block_size
    out: list[int] = []
    for k in range(full):
        end = (k + 1) * block_size - 1  # the block's last token
        q = end // id_tokens
        out.append(hash((ids[q], end - q * id_tokens)))
    return out
