"""Strict validation of the ``selector`` metadata key: PromQL label matchers, nothing else.

The selector is pasted into PromQL (``sum(router_inflight_requests{<selector>})``), so
anything but a comma-separated list of ``name op "value"`` matchers could change the
query. Accepted: label names ``[a-zA-Z_][a-zA-Z0-9_]*`` not starting with ``__``,
operators ``=``, ``!=``, ``=~``, ``!~``, double-quoted values with ``\\`` escapes.
The result is re-serialized in a canonical form.

Regex values are compiled with RE2 (google-re2), the engine family Prometheus uses, not
Python's ``re``: a Perl-only construct (lookaround, backreference, possessive ``a++``)
compiles in ``re`` but makes Prometheus refuse every query; ``\\pL`` is the other way round.
"""

from __future__ import annotations

import re

import re2

from external_scaler.errors import MetadataError

ACCEPTED_FORM = 'label matchers like job="router",namespace=~"llm-.*"'

_MATCHER = re.compile(
    r'\s*(?P<name>[a-zA-Z_][a-zA-Z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>(?:[^"\\\n]|\\.)*)"\s*'
)
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t"}
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error goes into our message, not to stderr


def parse_selector(key: str, text: str) -> str:
    """Validate ``text`` as PromQL label matchers; return them canonically joined by ``,``.

    >>> parse_selector("selector", ' job = "router" , ns=~"a.*" ')
    'job="router",ns=~"a.*"'
    """
    if text.strip() == "":
        return ""
    matchers = []
    pos = 0
    while True:
        match = _MATCHER.match(text, pos)
        if match is None:
            raise MetadataError(
                key, ACCEPTED_FORM, text, f"not a label matcher at character {pos + 1}"
            )
        name, op, raw = match["name"], match["op"], match["value"]
        if name.startswith("__"):
            raise MetadataError(key, ACCEPTED_FORM, text, f"label {name!r} is reserved")
        value = _unescape(key, text, raw)
        if op in ("=~", "!~"):
            problem = re2_error(value)
            if problem is not None:
                raise MetadataError(
                    key,
                    ACCEPTED_FORM,
                    text,
                    f"label {name}: {value!r} is not an RE2 regular expression "
                    f"(Prometheus' syntax): {problem}",
                )
        matchers.append(f"{name}{op}{_quote(value)}")
        pos = match.end()
        if pos == len(text):
            break
        if text[pos] != ",":
            raise MetadataError(key, ACCEPTED_FORM, text, f"expected ',' at character {pos + 1}")
        pos += 1
        if text[pos:].strip() == "":  # a trailing comma is valid PromQL
            break
    return ",".join(matchers)


def re2_error(pattern: str) -> str | None:
    """Why RE2 refuses ``pattern`` (e.g. ``invalid perl operator: (?=``), or None if it compiles.

    >>> re2_error("llm-.*") is None, re2_error("(?=x)")
    (True, 'invalid perl operator: (?=')
    """
    try:
        re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        return detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
    return None


def _unescape(key: str, text: str, raw: str) -> str:
    out = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            nxt = raw[i + 1]
            if nxt not in _ESCAPES:
                raise MetadataError(
                    key, ACCEPTED_FORM, text, f"unsupported escape \\{nxt} in a label value"
                )
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        if not ch.isprintable():
            raise MetadataError(key, ACCEPTED_FORM, text, "control character in a label value")
        out.append(ch)
        i += 1
    return "".join(out)


def _quote(value: str) -> str:
    escaped = (
        value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    )
    return f'"{escaped}"'
