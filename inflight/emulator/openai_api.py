"""The OpenAI wire format as vLLM serves it: request models, error bodies, response bodies.

Requests are pydantic models, as in vLLM's ``vllm/entrypoints/openai/protocol.py``: FastAPI
validates a body against them, and a body that does not validate (bad JSON, a field of the
wrong type) becomes vLLM's 400, built by :func:`validation_error` the way vLLM's
``RequestValidationError`` handler builds it. Fields the emulator ignores are accepted
(``extra="allow"``, as vLLM's ``OpenAIBaseModel``), and types are lax as in vLLM
(``"max_tokens": "9"`` is 9). What a model cannot say (an unknown model, ``n`` other than
1, ``max_tokens`` below 1, a prompt too long) is an ``ApiError`` from
:func:`to_gen_request` or the server, with the type and status vLLM gives it.

Every error body has vLLM's ``ErrorResponse`` shape,
``{"error": {"message": str, "type": str, "param": str | null, "code": int}}``, where
``code`` is the HTTP status.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel, ConfigDict

# Characters per token when estimating prompt length from text (English-like text with a
# BPE tokenizer averages about 4).
CHARS_PER_TOKEN = 4.0
# Chat template overhead per message (role markers), as chat templates add.
CHAT_TOKENS_PER_MESSAGE = 4
# The words the emulator "generates", cycled; each is one token.
WORDS = (" the", " meeting", " agreed", " to", " ship", " on", " time", " today")


# --- vLLM's error body ------------------------------------------------------------------
class ErrorInfo(BaseModel):
    """vLLM's ``ErrorInfo``: ``code`` is the HTTP status."""

    message: str
    type: str
    param: str | None = None
    code: int


class ErrorResponse(BaseModel):
    """vLLM's ``ErrorResponse``: every error the emulator returns has this shape."""

    error: ErrorInfo


class ApiError(Exception):
    """A request the emulator refuses; ``status`` is the HTTP status."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param

    @property
    def type(self) -> str:
        # The types vLLM's ``create_error_response`` gives the errors its serving layer raises.
        return {
            400: "BadRequestError",
            404: "NotFoundError",
            405: "MethodNotAllowedError",
            503: "ServiceUnavailableError",
        }.get(self.status, "InternalServerError")

    def body(self) -> dict[str, Any]:
        info = ErrorInfo(message=self.message, type=self.type, param=self.param, code=self.status)
        return ErrorResponse(error=info).model_dump()


def http_error(status: int, detail: str) -> dict[str, Any]:
    """vLLM's body for an ``HTTPException`` (e.g. a body that cannot be read)."""
    info = ErrorInfo(message=detail, type=HTTPStatus(status).phrase, code=status)
    return ErrorResponse(error=info).model_dump()


# Segments of a pydantic error location that name a validator, not a field (union branches,
# wrappers); vLLM's ``clean_loc_for_param`` drops them too.
_INTERNAL_LOC = frozenset(
    {"function-wrap", "function-after", "function-before", "function-plain", "json-or-python",
     "lax-or-strict", "chain", "default", "nullable", "tagged-union", "union", "str", "int",
     "float", "bool", "bytes", "list", "tuple", "dict", "set", "none"}
)  # fmt: skip


def _param(loc: Sequence[Any]) -> str:
    """``("body", "prompt", "list[int]", 0)`` → ``"body.prompt.0"``."""
    parts = [
        str(p)
        for p in loc
        if not any(c in str(p) for c in "[]{}()") and str(p).lower() not in _INTERNAL_LOC
    ]
    return ".".join(parts) if parts else ".".join(str(p) for p in loc)


def validation_error(errors: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """vLLM's 400 for a body that does not validate (its ``RequestValidationError`` handler).

    The message lists the errors (``"1 validation error:\n  {...}"``), ``type`` is
    ``"Bad Request"``, ``param`` the first error's field path (``"body.max_tokens"``).
    """
    if errors:
        label = "error" if len(errors) == 1 else "errors"
        message = f"{len(errors)} validation {label}:\n" + "".join(f"  {e}\n" for e in errors)
        message = message.rstrip()
    else:
        message = "Validation error"
    loc = errors[0].get("loc") if errors else None
    info = ErrorInfo(
        message=message,
        type=HTTPStatus.BAD_REQUEST.phrase,
        param=_param(loc) if loc else None,
        code=HTTPStatus.BAD_REQUEST,
    )
    return ErrorResponse(error=info).model_dump()


# --- requests ---------------------------------------------------------------------------
class OpenAIBaseModel(BaseModel):
    """Unknown fields are accepted and ignored, as vLLM's ``OpenAIBaseModel`` does."""

    model_config = ConfigDict(extra="allow")


class StreamOptions(OpenAIBaseModel):
    include_usage: bool | None = True  # vLLM's default once stream_options is given


class CompletionRequest(OpenAIBaseModel):
    """The fields of vLLM's ``CompletionRequest`` that the emulator reads."""

    model: str | None = None  # None: the first served name, as vLLM
    prompt: list[int] | list[list[int]] | str | list[str] | None = None
    max_tokens: int | None = None  # None: the profile's default_max_tokens, natural stop
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int = 1


class ChatMessage(OpenAIBaseModel):
    role: str
    content: str | list[dict[str, Any]] | None = None  # text, or content parts


class ChatCompletionRequest(OpenAIBaseModel):
    """The fields of vLLM's ``ChatCompletionRequest`` that the emulator reads."""

    model: str | None = None
    messages: list[ChatMessage]
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int = 1


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


def to_gen_request(
    req: CompletionRequest | ChatCompletionRequest, served_names: tuple[str, ...]
) -> GenRequest:
    """Check what the model's types cannot; raise ``ApiError`` naming the field at fault."""
    model = req.model if req.model is not None else served_names[0]
    if model not in served_names:
        raise ApiError(404, f"The model `{model}` does not exist.", "model")
    if isinstance(req, ChatCompletionRequest):
        chat = True
        prompt_tokens = _chat_tokens(req.messages)
        key, max_tokens = "max_tokens", req.max_tokens
        if max_tokens is None:
            key, max_tokens = "max_completion_tokens", req.max_completion_tokens
    else:
        chat = False
        prompt_tokens = _prompt_tokens(req.prompt)
        key, max_tokens = "max_tokens", req.max_tokens
    if max_tokens is not None and max_tokens < 1:
        raise ApiError(400, f"'{key}' must be at least 1, got {max_tokens}", key)
    if req.n != 1:
        raise ApiError(400, "'n' must be 1: the emulator generates one choice", "n")
    include_usage = bool(req.stream_options is not None and req.stream_options.include_usage)
    return GenRequest(chat, model, prompt_tokens, max_tokens, bool(req.stream), include_usage)


def _prompt_tokens(prompt: list[int] | list[list[int]] | str | list[str] | None) -> int:
    if prompt is None:
        raise ApiError(400, "'prompt' is a required field", "prompt")
    if isinstance(prompt, str):
        return max(1, estimate_tokens(prompt))
    if len(prompt) == 1 and isinstance(prompt[0], str):
        return max(1, estimate_tokens(prompt[0]))
    if len(prompt) == 1 and isinstance(prompt[0], list):
        return max(1, len(prompt[0]))
    if prompt and all(isinstance(p, int) for p in prompt):
        return len(prompt)
    if not prompt:
        raise ApiError(400, "'prompt' must not be empty", "prompt")
    raise ApiError(400, "'prompt' with several prompts is not supported", "prompt")


def _chat_tokens(messages: Iterable[ChatMessage]) -> int:
    total = 0
    count = 0
    for msg in messages:
        content = msg.content
        if isinstance(content, list):  # content parts: count the text ones
            content = "".join(str(p.get("text", "")) for p in content)
        total += estimate_tokens(content or "") + CHAT_TOKENS_PER_MESSAGE
        count += 1
    if count == 0:
        raise ApiError(400, "'messages' must be a non-empty list", "messages")
    return total


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
