"""A request's demand in KV tokens: its prompt plus its output budget (issue 23, item 1).

Pure: no I/O, no clock. The router reads it only when token capacity is on
(``--kv-tokens`` or ``--discover-kv-tokens``, :mod:`router.dispatch`); otherwise the body is
never parsed for it.

**Prompt tokens.** Exact when the prompt is token ids (``/v1/completions``' ``prompt`` as a
list of ints, or a list of such lists: one sequence each). Text is estimated:
``ceil(characters ÷ chars_per_token)`` (``--chars-per-token``, default
:data:`DEFAULT_CHARS_PER_TOKEN`); a chat request's ``messages`` are their contents' text
summed (a string, or the ``text`` of ``{"type": "text"}`` parts; other parts count 0), plus
:data:`MESSAGE_OVERHEAD_TOKENS` a message for the chat template's role markers. The router
has no tokenizer: the estimate's error against vLLM's own count is measured in
results/2026-12-02-token-estimate/.

**Output budget.** ``max_tokens`` (or chat's ``max_completion_tokens``) when given. When
absent, what vLLM itself would allow: ``/v1/completions`` defaults to 16
(:data:`COMPLETIONS_DEFAULT_MAX_TOKENS`, vLLM's ``CompletionRequest``); a chat request, or
an explicit ``null``, may run to ``max_model_len − prompt`` (vLLM's ``get_max_tokens``), so
that is its budget when the router knows ``max_model_len``, and 0 when it does not (the
prompt alone is then counted). ``n`` choices: each its own budget (the prompt's KV blocks
are shared by vLLM's prefix cache).

Routes other than the two generation routes (embeddings, responses, audio) have demand 0:
they are admitted on slots only.

**Checked, not trusted** (issue 39). The router reads a client's budget, so a budget vLLM
would refuse is refused here, before it waits in the hold queue with an absurd demand
(:func:`check_budget`, :class:`BadBudget`, vLLM's own 400 body): ``max_tokens``,
``max_completion_tokens``, ``n`` and ``best_of``, given as integers, must be ≥ 1 (other
types count as absent, as above, and vLLM's parser answers them), and with
``max_model_len`` known, ``max_tokens`` plus the prompt must fit it, the prompt counted
exactly (token ids) or, for text, as 0 (an estimate never refuses a request vLLM would
take). A demand is bounded by :data:`MAX_DEMAND` whatever the client sends (a 400-digit
``max_tokens`` with ``max_model_len`` unknown), so no gauge that sums demands can
overflow a float. A body nested past the JSON parser's depth is a clean 400
(:class:`BadBody`), never a RecursionError; so is one with more prompt items (a batched
completion's prompts, a chat's messages and their content parts) than ``max_items``
(``--max-prompt-items``, :data:`DEFAULT_MAX_PROMPT_ITEMS`), counted in O(1) a list before
any is read (:func:`check_items`): reading them one by one is what costs, not the parse. A
5 MB body of a million one-token prompts took 25 ms to parse and 180 ms (text) to 780 ms
(token-id lists) to count, on the loop; within the bound its count takes milliseconds. The
parse itself stays on the loop: ``json.loads`` holds the GIL, so a thread would not free
the loop, and ``--max-body-bytes`` bounds it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from router.errors import RequestRefused

#: Characters a token when the prompt is text: the usual rule of thumb for English BPE
#: vocabularies (OpenAI's "~4 characters"); measured for a model in
#: results/2026-12-02-token-estimate/ and set with ``--chars-per-token``.
DEFAULT_CHARS_PER_TOKEN = 4.0
#: Template tokens a chat message adds around its content (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 4
#: vLLM's ``CompletionRequest.max_tokens`` default (``/v1/completions`` without it).
COMPLETIONS_DEFAULT_MAX_TOKENS = 16

#: The largest demand the router counts (2**53: every int up to it is an exact float, so the
#: token gauges stay finite and exact, however large the client's budget).
MAX_DEMAND = 2**53
#: Prompt items a request may have (``--max-prompt-items``): a batched completion's prompts,
#: or a chat's messages plus their content parts. Far above what a client batches (OpenAI's
#: own array inputs stop at 2,048), low enough that counting them costs milliseconds.
DEFAULT_MAX_PROMPT_ITEMS = 8192
#: Budget fields vLLM reads as integers ≥ 1 (``null`` or absent: its default).
BUDGET_FIELDS = ("max_tokens", "max_completion_tokens", "n", "best_of")

COMPLETIONS = b"/v1/completions"
CHAT = b"/v1/chat/completions"


@dataclass(frozen=True)
class Demand:
    """One request's KV tokens: ``prompt`` (``exact``: counted from token ids, else
    estimated from text) and ``output`` (the budget); ``total`` is what dispatch admits."""

    prompt: int
    output: int
    exact: bool

    @property
    def total(self) -> int:
        return self.prompt + self.output


NONE = Demand(0, 0, True)


def text_tokens(text: str, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """The estimated tokens of ``text``: characters ÷ ``chars_per_token``, rounded up.

    >>> text_tokens("Hello, world!"), text_tokens("")
    (4, 0)
    """
    return math.ceil(len(text) / chars_per_token) if text else 0


def _is_ids(value: Any) -> bool:
    """Whether ``value`` is a list of token ids: every member's type is ``int`` (a JSON
    body's integers; ``true`` is a bool, not an id). The types are gathered in C: ~5x the
    speed of a Python loop over a prompt of thousands of ids, which the router (and the
    simulator's router, for every request) checks on each request.

    >>> _is_ids([1, 2]), _is_ids([]), _is_ids([1, True]), _is_ids([1.0]), _is_ids("12")
    (True, True, False, False, False)
    """
    return isinstance(value, list) and set(map(type, value)) <= {int}


def prompt_sequences(prompt: Any, chars_per_token: float) -> tuple[list[int], bool]:
    """A completions ``prompt``'s sequences' token counts, and whether they are exact.

    A string or a list of ints is one sequence; a list of strings or of int lists is one a
    member (vLLM runs each as its own request). Anything else counts as no sequence.

    >>> prompt_sequences([1, 2, 3], 4.0), prompt_sequences([[1], [2, 3]], 4.0)
    (([3], True), ([1, 2], True))
    >>> prompt_sequences(["abcd", "abcdefgh"], 4.0)
    ([1, 2], False)
    """
    if isinstance(prompt, str):
        return [text_tokens(prompt, chars_per_token)], False
    if not isinstance(prompt, list) or not prompt:
        return [], True
    if _is_ids(prompt):
        return [len(prompt)], True
    counts: list[int] = []
    exact = True
    for item in prompt:
        if isinstance(item, str):
            counts.append(text_tokens(item, chars_per_token))
            exact = False
        elif _is_ids(item):
            counts.append(len(item))
    return counts, exact


def message_text(content: Any) -> str:
    """A chat message's text: a string, or its ``text`` parts joined (images and audio
    parts carry none the router can count)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        )
    return ""


def chat_tokens(
    messages: Any,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    overhead: int = MESSAGE_OVERHEAD_TOKENS,
) -> int:
    """A chat request's estimated prompt tokens: each message's content text ÷
    ``chars_per_token`` (rounded up once, over the sum) plus ``overhead`` a message.

    >>> chat_tokens([{"role": "user", "content": "x" * 40}], 4.0, 4)
    14
    """
    if not isinstance(messages, list):
        return 0
    chars = 0
    count = 0
    for m in messages:
        if isinstance(m, dict):
            count += 1
            chars += len(message_text(m.get("content")))
    return math.ceil(chars / chars_per_token) + overhead * count


def _budget(doc: dict[str, Any], chat: bool) -> int | None:
    """The output budget the request gives; None: up to ``max_model_len − prompt``."""
    for key in ("max_tokens", "max_completion_tokens") if chat else ("max_tokens",):
        value = doc.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return max(value, 0)
    if not chat and "max_tokens" not in doc:
        return COMPLETIONS_DEFAULT_MAX_TOKENS
    return None


def _choices(doc: dict[str, Any]) -> int:
    n = doc.get("n", 1)
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1


def demand_of(
    doc: dict[str, Any],
    chat: bool,
    max_model_len: int | None = None,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
) -> Demand:
    """The demand of a parsed request body (``chat``: ``/v1/chat/completions``).

    >>> demand_of({"prompt": [7] * 1800, "max_tokens": 200}, chat=False)
    Demand(prompt=1800, output=200, exact=True)
    >>> demand_of({"messages": [{"role": "user", "content": "x" * 40}]}, True, 2048).total
    2048
    """
    budget = _budget(doc, chat)
    n = _choices(doc)
    if chat:
        prompts, exact = [chat_tokens(doc.get("messages"), chars_per_token)], False
    else:
        prompts, exact = prompt_sequences(doc.get("prompt"), chars_per_token)
    output = 0
    for p in prompts:
        if budget is not None:
            output += n * budget
        elif max_model_len is not None:
            output += n * max(max_model_len - p, 0)
    return Demand(sum(prompts), output, exact)


def is_chat(path: bytes) -> bool | None:
    """Whether a request path (query string included) is the chat route (True), the
    completions route (False), or neither (None: no prompt the router reads).

    >>> is_chat(b"/v1/chat/completions?x=1"), is_chat(b"/v1/completions"), is_chat(b"/v1/models")
    (True, False, None)
    """
    route = path.partition(b"?")[0]
    if route == COMPLETIONS:
        return False
    if route == CHAT:
        return True
    return None


def prompt_items(doc: dict[str, Any], chat: bool, limit: int = DEFAULT_MAX_PROMPT_ITEMS) -> int:
    """A parsed body's prompt items, counted without reading one: a chat's messages plus
    the content parts of each (the count stops at the messages when they alone are over
    ``limit``: too many to walk), or a completion's prompts when ``prompt`` is a list of
    them (a list of token ids is one prompt). A list that starts with an integer is read
    through only when longer than ``limit`` (whether it is all ids or a batch cannot matter
    below it): the demand reads it through again (:func:`prompt_sequences`), and a long
    prompt of ids is the usual request, not a rare one.

    >>> prompt_items({"prompt": ["a", "b"]}, False), prompt_items({"prompt": [1, 2, 3]}, False)
    (2, 0)
    >>> prompt_items({"messages": [{"content": [{}, {}]}, {"content": "x"}]}, True)
    4
    """
    if chat:
        messages = doc.get("messages")
        if not isinstance(messages, list):
            return 0
        count = len(messages)
        if count > limit:
            return count
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                count += len(content)
        return count
    prompt = doc.get("prompt")
    if not isinstance(prompt, list) or not prompt:
        return 0
    if isinstance(prompt[0], int) and (len(prompt) <= limit or _is_ids(prompt)):
        return 0
    return len(prompt)


def check_items(doc: dict[str, Any], chat: bool, max_items: int) -> None:
    """Refuse (:class:`BadBody`) a body with more prompt items than ``max_items``."""
    count = prompt_items(doc, chat, max_items)
    if count > max_items:
        what = "messages and content parts" if chat else "prompts"
        raise BadBody(
            f"request has {count} {what}, more than the router reads "
            f"(--max-prompt-items={max_items})"
        )


def request_demand(
    path: bytes,
    body: bytes,
    max_model_len: int | None = None,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    max_items: int = DEFAULT_MAX_PROMPT_ITEMS,
) -> Demand:
    """The demand of a raw request (the proxy's path, query string included, and body):
    :data:`NONE` for another route or a body that is not a JSON object (vLLM answers it).
    Checked (:func:`check_items`, :func:`check_budget`): BadBudget or BadBody (400) for
    what vLLM would refuse or the router cannot read; bounded by :data:`MAX_DEMAND`."""
    chat = is_chat(path)
    if chat is None:
        return NONE
    try:
        doc = parse_json(body)
    except ValueError:
        return NONE
    if not isinstance(doc, dict):
        return NONE
    check_items(doc, chat, max_items)
    demand = demand_of(doc, chat, max_model_len, chars_per_token)
    check_budget(doc, demand, max_model_len)
    if demand.total > MAX_DEMAND:  # a budget no endpoint knows to refuse yet: bounded
        prompt = min(demand.prompt, MAX_DEMAND)
        return Demand(prompt, MAX_DEMAND - prompt, demand.exact)
    return demand


class BadBudget(RequestRefused):
    """A budget vLLM would refuse (400, vLLM's body: ``BadRequestError``, ``param``)."""

    status = 400
    kind = "BadRequestError"
    reason = "bad_budget"  # router_client_errors_total's

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


class BadBody(RequestRefused):
    """A request body the router cannot read for its demand (nested too deeply, or more
    prompt items than it reads)."""

    status = 400
    kind = "bad_request_body"
    reason = "bad_body"


def check_budget(doc: dict[str, Any], demand: Demand, max_model_len: int | None) -> None:
    """Refuse (:class:`BadBudget`) a budget vLLM would refuse: a budget field that is an
    integer below 1, or, with ``max_model_len`` known, an output budget that does not fit it
    beside the prompt (counted exactly, or as 0 when estimated from text).

    >>> try:
    ...     check_budget({"max_tokens": 4096}, Demand(10, 4096, True), 4096)
    ... except BadBudget as exc:
    ...     print(exc.param, str(exc)[:39])
    max_tokens 'max_tokens' or 'max_completion_tokens'
    """
    for key in BUDGET_FIELDS:
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, int):
            continue  # absent, null, or another type: vLLM's parser answers it
        if value < 1:
            raise BadBudget(f"{key} must be at least 1, got {value}.", key)
    if max_model_len is None:
        return
    prompt = demand.prompt if demand.exact else 0
    if prompt > max_model_len:
        raise BadBudget(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt} input tokens. Please reduce the length of the input.",
            "prompt",
        )
    for key in ("max_tokens", "max_completion_tokens"):
        value = doc.get(key)
        if isinstance(value, int) and value > max_model_len - prompt:
            digits = str(value)
            shown = digits if len(digits) < 30 else f"{digits[:20]}… ({len(digits)} digits)"
            raise BadBudget(
                f"'max_tokens' or 'max_completion_tokens' is too large: {shown}. This model's "
                f"maximum context length is {max_model_len} tokens and your request has "
                f"{prompt} input tokens ({shown} > {max_model_len} - {prompt}).",
                key,
            )


def parse_json(body: bytes) -> Any:
    """The JSON of a request body; ValueError when it is not JSON, :class:`BadBody` when
    it is nested past the parser's depth (a RecursionError, never raised on)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise BadBody("request body is nested too deeply to read") from None


def estimate_errors(estimated: Sequence[int], actual: Sequence[int]) -> list[float]:
    """Relative errors ``(estimated − actual) ÷ actual`` (positive: the router over-counts);
    pairs with ``actual`` 0 are skipped."""
    return [(e - a) / a for e, a in zip(estimated, actual, strict=True) if a]


class TokenDemand:
    """The proxy's demand function, ``demand(path, body) -> tokens``, with the router's
    settings: ``max_model_len`` (configured, or the largest an endpoint reported; None:
    unknown), ``chars_per_token`` and ``max_items``."""

    __slots__ = ("chars_per_token", "max_items", "max_model_len")

    def __init__(
        self,
        max_model_len: int | None = None,
        chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
        max_items: int = DEFAULT_MAX_PROMPT_ITEMS,
    ) -> None:
        if not chars_per_token > 0:
            raise ValueError(f"--chars-per-token must be > 0, got {chars_per_token}")
        if max_items < 1:
            raise ValueError(f"--max-prompt-items must be ≥ 1, got {max_items}")
        self.max_model_len = max_model_len
        self.chars_per_token = chars_per_token
        self.max_items = max_items

    def __call__(self, path: bytes, body: bytes) -> int:
        return request_demand(
            path, body, self.max_model_len, self.chars_per_token, self.max_items
        ).total
