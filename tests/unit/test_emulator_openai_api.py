"""The emulator's OpenAI wire format: parsing, errors, and SSE encoding."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from inflight.emulator.openai_api import (
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    GenRequest,
    StreamEncoder,
    estimate_tokens,
    full_response,
    to_gen_request,
    validation_error,
)

NAMES = ("m", "alias")
INVALID = "invalid"  # the body does not validate: the server answers with vLLM's 400


def parse(body: object, chat: bool = False) -> GenRequest:
    """What the server does: validate with the request model (as FastAPI), then check."""
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    model = ChatCompletionRequest if chat else CompletionRequest
    return to_gen_request(model.model_validate_json(raw), NAMES)


@pytest.mark.parametrize(
    ("body", "chat", "status", "param"),
    [
        (b"{not json", False, INVALID, None),
        (b"\xff\xfe", False, INVALID, None),
        ([1, 2], False, INVALID, None),
        ({"model": "m"}, False, 400, "prompt"),
        ({"model": "m", "prompt": ""}, False, None, None),  # empty string is a prompt
        ({"model": "m", "prompt": []}, False, 400, "prompt"),
        ({"model": "m", "prompt": ["a", "b"]}, False, 400, "prompt"),
        ({"model": "m", "prompt": 5}, False, INVALID, None),
        ({"model": "m"}, True, INVALID, None),
        ({"model": "m", "messages": []}, True, 400, "messages"),
        ({"model": "m", "messages": ["hi"]}, True, INVALID, None),
        ({"model": "other", "prompt": "x"}, False, 404, "model"),
        ({"model": 3, "prompt": "x"}, False, INVALID, None),
        ({"model": "m", "prompt": "x", "max_tokens": 0}, False, 400, "max_tokens"),
        ({"model": "m", "prompt": "x", "max_tokens": -5}, False, 400, "max_tokens"),
        ({"model": "m", "prompt": "x", "max_tokens": "9"}, False, None, None),  # lax, as vLLM
        ({"model": "m", "prompt": "x", "max_tokens": "nine"}, False, INVALID, None),
        (
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
            True,
            400,
            "max_tokens",
        ),
        ({"model": "m", "prompt": "x", "stream": "maybe"}, False, INVALID, None),
        ({"model": "m", "prompt": "x", "n": 2}, False, 400, "n"),
    ],
)
def test_bad_input_gets_status_and_names_the_field(
    body: object, chat: bool, status: int | str | None, param: str | None
) -> None:
    if status is None:
        parse(body, chat)
        return
    if status == INVALID:
        with pytest.raises(ValidationError):
            parse(body, chat)
        return
    with pytest.raises(ApiError) as info:
        parse(body, chat)
    assert info.value.status == status
    assert info.value.param == param
    err = info.value.body()["error"]
    assert err["code"] == status and err["message"] and err["type"].endswith("Error")


def test_validation_error_has_vllms_shape_and_a_clean_param() -> None:
    try:
        CompletionRequest.model_validate({"prompt": {"text": "x"}})
    except ValidationError as exc:
        # FastAPI puts the body's errors under "body"
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
    body = validation_error(errors)
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    err = body["error"]
    # The union branches of ``prompt`` (list[int], str, …) are not part of the field path.
    assert (err["type"], err["param"], err["code"]) == ("Bad Request", "body.prompt", 400)
    assert err["message"].startswith(f"{len(errors)} validation errors:\n")
    assert validation_error([])["error"]["message"] == "Validation error"


def test_good_requests() -> None:
    req = parse({"model": "alias", "prompt": "x" * 12000, "max_tokens": 7, "stream": True})
    assert (req.model, req.prompt_tokens, req.max_tokens, req.stream) == ("alias", 3000, 7, True)
    assert parse({"prompt": [1, 2, 3]}).prompt_tokens == 3  # model defaults to the first name
    chat = parse(
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "abcd"}]}],
            "max_completion_tokens": 4,
            "stream_options": {"include_usage": True},
        },
        chat=True,
    )
    assert chat.max_tokens == 4 and chat.include_usage and chat.prompt_tokens == 1 + 4
    assert estimate_tokens("") == 0 and estimate_tokens("abcde") == 2


def test_stream_events_decode_and_end_with_done() -> None:
    req = GenRequest(True, "m", 10, 3, True, True)
    enc = StreamEncoder(req, "chatcmpl-1", 0)
    raw = (enc.start() + enc.tokens(2) + enc.tokens(3) + enc.finish("length")).decode()
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == full_response(req, "x", 0, 3, "length")["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 3


def test_completion_stream_without_usage() -> None:
    req = GenRequest(False, "m", 10, 2, True, False)
    enc = StreamEncoder(req, "cmpl-1", 0)
    raw = (enc.start() + enc.tokens(2) + enc.finish("stop")).decode()
    events = [e.removeprefix("data: ") for e in raw.split("\n\n") if e]
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 3 and all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)
_fields = st.fixed_dictionaries(
    {},
    optional={
        "model": st.sampled_from(["m", "alias", "x"]) | _json,
        "prompt": _json,
        "messages": st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", 1])}, optional={"content": _json}
            ),
            max_size=3,
        )
        | _json,
        "max_tokens": st.integers(min_value=-3, max_value=5) | _json,
        "stream": _json,
        "stream_options": _json,
        "n": _json,
    },
)


@settings(max_examples=300, deadline=None)
@given(body=_fields, chat=st.booleans())
def test_any_json_body_parses_or_gets_a_4xx(body: dict[str, object], chat: bool) -> None:
    try:
        req = parse(body, chat)
    except ValidationError:
        return  # vLLM's 400 (test_validation_error_has_vllms_shape_and_a_clean_param)
    except ApiError as exc:
        assert exc.status in (400, 404) and exc.body()["error"]["message"]
        return
    assert req.prompt_tokens >= 0 and (req.max_tokens is None or req.max_tokens >= 1)


@given(raw=st.binary(max_size=64))
def test_any_bytes_parse_or_get_a_400(raw: bytes) -> None:
    try:
        parse(raw)
    except ValidationError:
        pass
    except ApiError as exc:
        assert exc.status in (400, 404)


def test_deeply_nested_json_is_a_400_not_a_crash() -> None:
    with pytest.raises(ValidationError):
        parse(b"[" * 100_000)
