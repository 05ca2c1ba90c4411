"""Which ``/v1/*`` requests the proxy forwards: a method-and-path table, and the path
checks that keep a request on it.

Why: vLLM's server has more under ``/v1`` than inference. With
``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` set it serves ``POST /v1/load_lora_adapter`` and
``/v1/unload_lora_adapter`` (load any adapter from a path or hub name), and anything
between the router and vLLM (a sidecar, an ingress) may resolve ``/v1/../admin`` to
``/admin``. A proxy that forwards every ``/v1/*`` path and method hands all of that to
whoever can reach the router. So the proxy forwards a request only when its method and
path are in the table, and answers the rest itself, never forwarding them:

* **400** ``bad_path`` — a dot-segment (``.`` or ``..``), an encoded dot, slash or
  backslash (``%2e``, ``%2f``, ``%5c``, any case), or a backslash. uvicorn hands the
  proxy both ``path`` (percent-decoded, dot-segments kept: ``/v1/%2e%2e/admin`` arrives as
  ``/v1/../admin``) and ``raw_path`` (the bytes as sent); the proxy checks and forwards
  ``raw_path``, so what it checked is what the upstream gets;
* **404** ``route_not_found`` — a path not in the table (``/v1/load_lora_adapter``). Not 403:
  the router does not serve that route, exactly as vLLM answers 404 for a route it has not
  registered, and a 404 says nothing about which admin routes the upstream has;
* **405** ``method_not_allowed`` with ``Allow`` — a path in the table with another method
  (``GET /v1/completions``). ``OPTIONS`` (a CORS preflight) is forwarded on every path
  of the table, and ``HEAD`` wherever ``GET`` is: the proxy passes both as metadata.

The table, :data:`OPENAI_ROUTES`, is vLLM's OpenAI-compatible server's ``/v1`` routes
(vllm-project/vllm ``vllm/entrypoints/openai/api_server.py``, commit 048027fb: its
``/load`` handler lists the routes that run the model, and ``build_app`` attaches the
chat-completion, completion, responses, translations, Anthropic-messages, models and
pooling routers; ``vllm/entrypoints/openai/responses/api_router.py`` for the
``/v1/responses/{response_id}`` pair). Routes outside ``/v1`` (``/tokenize``, ``/pooling``,
``/score``) never reach the proxy: :mod:`router.app` sends only ``/v1/*`` here. Anything
else is opt-in, ``--allow-route METHOD:/v1/path`` (:mod:`router.config`).

Cost on the hot path: one dict lookup on the raw path (table paths are validated to hold no
dot-segment or escape, so an exact hit needs no further check) and a set membership for
the method; the byte scans and templates run only on a miss.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from router.errors import BadPath, MethodNotAllowed, RouteNotFound

# Methods a route may name (RFC 9110 §9 less CONNECT and TRACE, which a proxy must never
# forward to an inference server).
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# RFC 3986 §2.3 unreserved characters: what a path segment of a route, and a request's
# value for a ``{parameter}`` segment, may hold. No "%": an escaped byte never matches.
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Escapes that would hide a dot-segment or a path separator, lowercased.
_HIDING_ESCAPES = ((b"%2e", "an encoded dot"), (b"%2f", "an encoded slash"),
                   (b"%5c", "an encoded backslash"))  # fmt: skip


class RouteSpecError(ValueError):
    """A route given to the router (``--allow-route``) is not ``METHOD:/v1/path``."""


@dataclass(frozen=True)
class Route:
    """One forwarded method and path; a ``{name}`` segment matches one path segment."""

    method: str
    path: str

    def __str__(self) -> str:
        return f"{self.method}:{self.path}"


OPENAI_ROUTES: tuple[Route, ...] = (
    Route("POST", "/v1/completions"),
    Route("POST", "/v1/chat/completions"),
    Route("POST", "/v1/embeddings"),
    Route("POST", "/v1/responses"),
    Route("GET", "/v1/responses/{response_id}"),
    Route("POST", "/v1/responses/{response_id}/cancel"),
    Route("POST", "/v1/audio/transcriptions"),
    Route("POST", "/v1/audio/translations"),
    Route("POST", "/v1/messages"),
    Route("POST", "/v1/score"),
    Route("POST", "/v1/rerank"),
    Route("GET", "/v1/models"),
)


def parse_route(text: str) -> Route:
    """``"POST:/v1/load_lora_adapter"`` → Route; RouteSpecError says what is wrong.

    >>> parse_route("post:/v1/load_lora_adapter")
    Route(method='POST', path='/v1/load_lora_adapter')
    """
    method, sep, path = text.partition(":")
    if not sep:
        raise RouteSpecError(f"{text!r}: expected METHOD:/v1/path, e.g. POST:/v1/load_lora_adapter")
    method = method.strip().upper()
    if method not in METHODS:
        raise RouteSpecError(f"{text!r}: method must be one of {', '.join(METHODS)}")
    route = Route(method, path.strip())
    _segments(route)  # validates the path
    return route


def _segments(route: Route) -> tuple[bytes | None, ...]:
    """The path's segments after ``/v1/``, None for a ``{name}`` one; RouteSpecError if
    the path could not be matched exactly (escapes, dot-segments, empty segments)."""
    path = route.path
    if not path.startswith("/v1/"):
        raise RouteSpecError(f"{route}: the path must start with /v1/")
    out: list[bytes | None] = []
    for seg in path[len("/v1/") :].split("/"):
        if seg.startswith("{") and seg.endswith("}") and seg[1:-1].isidentifier():
            out.append(None)
            continue
        raw = seg.encode("utf-8")
        if not raw or raw in (b".", b"..") or not _UNRESERVED.issuperset(raw):
            raise RouteSpecError(
                f"{route}: bad path segment {seg!r} (each segment is letters, digits, "
                "'-', '.', '_', '~' or a {name}; no empty, '.' or '..' segment)"
            )
        out.append(raw)
    return tuple(out)


@dataclass(frozen=True)
class Allowed:
    """The methods one path accepts, and its ``Allow`` header value."""

    methods: frozenset[str]
    allow: bytes


def _allowed(methods: Iterable[str]) -> Allowed:
    ordered = sorted(set(methods), key=METHODS.index)
    return Allowed(frozenset(ordered), ", ".join(ordered).encode("ascii"))


def _metadata(methods: set[str]) -> set[str]:
    """A route's methods and the metadata ones that go with them: ``HEAD`` wherever ``GET``
    is (RFC 9110 §9.3.2: a GET without the body; ``HEAD /v1/models`` from a load balancer's
    check), and ``OPTIONS`` on every route (a browser's CORS preflight before a POST; the
    upstream answers it, vLLM with its ``--allowed-origins`` CORS middleware). Both are
    metadata to the proxy: no slot, not in L."""
    extra = {"OPTIONS", "HEAD"} if "GET" in methods else {"OPTIONS"}
    return methods | extra


class RouteTable:
    """Routes by path: exact paths in a dict, ``{name}`` templates tried after it; each
    path also takes ``OPTIONS``, and ``HEAD`` where it takes ``GET`` (:func:`_metadata`)."""

    def __init__(self, routes: Iterable[Route]) -> None:
        exact: dict[bytes, set[str]] = {}
        templates: dict[tuple[bytes | None, ...], set[str]] = {}
        for route in routes:
            segments = _segments(route)
            if None in segments:
                templates.setdefault(segments, set()).add(route.method)
            else:
                exact.setdefault(route.path.encode(), set()).add(route.method)
        self._exact = {path: _allowed(_metadata(methods)) for path, methods in exact.items()}
        self._templates = [
            (segs, _allowed(_metadata(methods))) for segs, methods in templates.items()
        ]

    def exact_methods(self) -> dict[bytes, frozenset[str]]:
        """Raw path → methods of the table's exact (template-free) routes: for a caller's
        fast path, where a hit with one of those methods needs no further check (table
        paths hold no dot-segment or escape); anything else goes to :meth:`lookup`."""
        return {path: allowed.methods for path, allowed in self._exact.items()}

    def lookup(self, method: str, raw_path: bytes) -> Allowed:
        """The route of ``raw_path`` (no query string) if ``method`` may be forwarded there.

        Raises BadPath (400), RouteNotFound (404) or MethodNotAllowed (405).
        """
        found = self._exact.get(raw_path)
        if found is None:
            found = self._slow(raw_path)
        if method not in found.methods:
            raise MethodNotAllowed(
                f"{method} is not forwarded for this path; allowed: {found.allow.decode()}",
                found.allow,
            )
        return found

    def _slow(self, raw_path: bytes) -> Allowed:
        problem = path_problem(raw_path)
        if problem is not None:
            raise BadPath(problem)
        if not raw_path.startswith(b"/v1/"):
            # The upstream URL is <endpoint base URL> + the raw path: a request can pick
            # the path on that endpoint, never the host (here "/%761/…" decoded to "/v1/").
            raise BadPath("path must start with /v1/")
        segments = raw_path[len(b"/v1/") :].split(b"/")
        for template, allowed in self._templates:
            if _matches(template, segments):
                return allowed
        raise RouteNotFound(
            "this path is not forwarded by the router (see --allow-route to add one)"
        )


def _matches(template: tuple[bytes | None, ...], segments: list[bytes]) -> bool:
    if len(template) != len(segments):
        return False
    for want, got in zip(template, segments, strict=True):
        if want is None:
            if not got or got in (b".", b"..") or not _UNRESERVED.issuperset(got):
                return False
        elif want != got:
            return False
    return True


def path_problem(raw_path: bytes) -> str | None:
    """Why ``raw_path`` must be refused with 400 (a dot-segment, or an escape or backslash
    that could turn into one or into a separator upstream), or None.

    >>> path_problem(b"/v1/%2E%2e/admin")
    'an encoded dot in the path'
    >>> path_problem(b"/v1/../admin")
    "a dot-segment ('.' or '..') in the path"
    """
    if b"%" in raw_path:
        lowered = raw_path.lower()
        for escape, what in _HIDING_ESCAPES:
            if escape in lowered:
                return f"{what} in the path"
    if b"\\" in raw_path:
        return "a backslash in the path"
    if b"/." in raw_path:
        for seg in raw_path.split(b"/"):
            if seg == b"." or seg == b"..":
                return "a dot-segment ('.' or '..') in the path"
    return None
