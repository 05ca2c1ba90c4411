"""The proxies a router comparison runs side by side in front of the same upstreams: the
caller's own (``inflight router`` variants or commits), then nginx and vLLM's router where
asked for; ``router.py`` and ``ab.py`` both start theirs here."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from inflight.bench.components.nginx import start_nginx_proxy
from inflight.bench.components.procs import Stack, start_vllm_router
from inflight.procs import ManagedProcess

Start = Callable[[], tuple[str, ManagedProcess]]


@contextlib.contextmanager
def started_proxies(
    stack: Stack,
    upstreams: list[str],
    ours: list[tuple[str, Start]],
    nginx: bool,
    vllm_router_bin: str | None,
) -> Iterator[dict[str, str]]:
    """Start ``ours`` (name, start) in order, then nginx and vLLM's router where asked for,
    all in front of ``upstreams``; yield {name: url}, ``direct`` the first upstream; stop
    the ones started."""
    starts = list(ours)
    if nginx:
        starts.append(("nginx", lambda: start_nginx_proxy(stack, upstreams)))
    if vllm_router_bin:
        binary = vllm_router_bin
        starts.append(("vllm-router", lambda: start_vllm_router(stack, binary, upstreams)))
    started: list[ManagedProcess] = []
    urls = {"direct": upstreams[0]}
    try:
        for name, start in starts:
            url, proc = start()
            urls[name] = url
            started.append(proc)
        yield urls
    finally:
        for proc in started:
            stack.stop(proc)
