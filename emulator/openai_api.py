"""The OpenAI wire format as vLLM serves it: request parsing and response bodies.

Pure: bytes/dicts in, dataclasses/dicts out. Every bad input becomes an ``ApiError``
carrying the HTTP status and an OpenAI-style body
``{"error": {"message", "type", "param", "code"}}``; the server maps it once.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

# Characters per token when estimating prompt length from text (English-like text with a
# BPE tokenizer averages about 4).
CHARS_PER_TOKEN = 4.0
# Chat template overhead per message (role markers), as chat templates add.
CHAT_TOKENS_PER_MESSAGE = 4
# The words the emulator "generates", cycled; each is one token.
WORDS = (" the", " meeting", " agreed", " to", " ship", " on", " time", " today")


class ApiError(Exception):
    """A request the emulator refuses; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def type(self) -> str:
        return {
            400: "BadRequestError",
            404: "NotFoundError",
            405: "MethodNotAllowedError",
            503: "ServiceUnavailableError",
        }.get(self.status, "InternalServerError")

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass(frozen=True)
class GenRequest:
    """A parsed completion or chat request."""

    chat: bool
    model: str
    prompt_tokens: int
    max_tokens: int | None  # None: the client gave none (the profile default applies)
    stream: bool
    include_usage: bool


def estimate_tokens(text: str) -> int:
    """Prompt tokens for ``text``: ⌈len / 4⌉ (12,000 characters ≈ 3,000 tokens)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def parse_request(raw: bytes, *, chat: bool, served_names: tuple[str, ...]) -> GenRequest:
    """Validate a request body; raise ``ApiError`` naming the field at fault."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise ApiError(400, "request body must be a JSON object")
    model = body.get("model", served_names[0])
    if not isinstance(model, str):
        raise ApiError(400, "'model' must be a string", "model")
    if model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    prompt_tokens = _chat_tokens(body) if chat else _prompt_tokens(body)
    max_tokens = _max_tokens(body, chat)
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", "stream")
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not isinstance(opts, dict):
            raise ApiError(400, "'stream_options' must be an object", "stream_options")
        include_usage = bool(opts.get("include_usage", False))
    n = body.get("n", 1)
    if n != 1:
        raise ApiError(400, "'n' must be 1: the emulator generates one choice", "n")
    return GenRequest(chat, model, prompt_tokens, max_tokens, stream, include_usage)


def _prompt_tokens(body: dict[str, Any]) -> int:
    if "prompt" not in body:
        raise ApiError(400, "'prompt' is a required field", "prompt")
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return max(1, estimate_tokens(prompt))
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return len(prompt)
        if len(prompt) == 1 and isinstance(prompt[0], str):
            return max(1, estimate_tokens(prompt[0]))
        if len(prompt) == 1 and isinstance(prompt[0], list):
            return max(1, len(prompt[0]))
        raise ApiError(400, "'prompt' with several prompts is not supported", "prompt")
    raise ApiError(400, "'prompt' must be a non-empty string or list of token ids", "prompt")


def _chat_tokens(body: dict[str, Any]) -> int:
    if "messages" not in body:
        raise ApiError(400, "'messages' is a required field", "messages")
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list", "messages")
    total = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ApiError(400, f"messages[{i}] must be an object with a 'role'", "messages")
        content = msg.get("content", "")
        if isinstance(content, list):  # content parts: count the text ones
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        elif content is None:
            content = ""
        elif not isinstance(content, str):
            raise ApiError(400, f"messages[{i}].content must be a string or list", "messages")
        total += estimate_tokens(content) + CHAT_TOKENS_PER_MESSAGE
    return total


def _max_tokens(body: dict[str, Any], chat: bool) -> int | None:
    key = "max_tokens"
    value = body.get(key)
    if value is None and chat:
        key = "max_completion_tokens"
        value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ApiError(400, f"'{key}' must be an integer", key)
    if value <= 0:
        raise ApiError(400, f"'{key}' must be at least 1, got {value}", key)
    return value


# --- responses --------------------------------------------------------------------------
def text_for(start: int, count: int) -> str:
    """The generated text of tokens ``start`` … ``start + count − 1``."""
    return "".join(WORDS[i % len(WORDS)] for i in range(start, start + count))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def full_response(
    req: GenRequest, rid: str, created: int, tokens: int, finish_reason: str
) -> dict[str, Any]:
    """A non-streaming response body."""
    text = text_for(0, tokens)
    choice: dict[str, Any]
    if req.chat:
        choice = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "chat.completion"
    else:
        choice = {
            "index": 0,
            "text": text,
            "logprobs": None,
            "finish_reason": finish_reason,
            "stop_reason": None,
        }
        obj = "text_completion"
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage(req.prompt_tokens, tokens),
    }


class StreamEncoder:
    """SSE events of one streaming response: ``data: {json}\\n\\n`` … ``data: [DONE]``."""

    def __init__(self, req: GenRequest, rid: str, created: int) -> None:
        self.req = req
        obj = "chat.completion.chunk" if req.chat else "text_completion"
        # Everything but the choice, pre-encoded once: chunks differ only in their choice.
        self._head = (
            'data: {"id":'
            + json.dumps(rid)
            + ',"object":"'
            + obj
            + '","created":'
            + str(created)
            + ',"model":'
            + json.dumps(req.model)
            + ',"choices":['
        )
        self._tail = "]}\n\n" if not req.include_usage else '],"usage":null}\n\n'
        self.sent = 0

    def start(self) -> bytes:
        """The first chat chunk (the assistant role); nothing for completions."""
        if not self.req.chat:
            return b""
        choice = (
            '{"index":0,"delta":{"role":"assistant","content":""},'
            '"logprobs":null,"finish_reason":null}'
        )
        return (self._head + choice + self._tail).encode()

    def tokens(self, upto: int) -> bytes:
        """One event per token from the last one sent up to token ``upto`` (exclusive)."""
        parts = []
        for i in range(self.sent, upto):
            word = json.dumps(WORDS[i % len(WORDS)])
            if self.req.chat:
                choice = (
                    '{"index":0,"delta":{"content":'
                    + word
                    + '},"logprobs":null,"finish_reason":null}'
                )
            else:
                choice = '{"index":0,"text":' + word + ',"logprobs":null,"finish_reason":null}'
            parts.append(self._head + choice + self._tail)
        self.sent = max(self.sent, upto)
        return "".join(parts).encode()

    def finish(self, finish_reason: str) -> bytes:
        """The last token chunk's finish reason, the usage chunk if asked, ``[DONE]``."""
        reason = json.dumps(finish_reason)
        if self.req.chat:
            choice = '{"index":0,"delta":{},"logprobs":null,"finish_reason":' + reason + "}"
        else:
            choice = '{"index":0,"text":"","logprobs":null,"finish_reason":' + reason + "}"
        out = self._head + choice + self._tail
        if self.req.include_usage:
            out += (
                self._head
                + '],"usage":'
                + json.dumps(usage(self.req.prompt_tokens, self.sent))
                + "}\n\n"
            )
        return (out + "data: [DONE]\n\n").encode()
