"""Endpoint sources: a static list and a file that is re-read when it changes.

A source produces the complete list of endpoint base URLs; :func:`apply` hands it to its
sink: the pool (which keeps in-flight counts across changes), waking held requests, or with
several model pools (:mod:`router.model_pools`) the pools' discovery, or one configured model's
pool (:class:`ModelSink`). The Kubernetes source lives in :mod:`router.k8s`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import yaml

from router.dispatch import Dispatcher
from router.pool import normalize_url

log = logging.getLogger(__name__)


class SourceError(ValueError):
    """An endpoint list could not be read; the message names where it came from."""


def parse_endpoint_list(text: str, origin: str) -> list[str]:
    """A JSON or YAML list of base URLs → normalized URLs. Empty text = no endpoints.

    >>> parse_endpoint_list('["http://127.0.0.1:8001/"]', "x")
    ['http://127.0.0.1:8001']
    """
    if not text.strip():
        return []
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise SourceError(f"{origin}: neither JSON nor YAML: {exc}") from exc
    if data is None:
        return []
    if not isinstance(data, list) or not all(isinstance(u, str) for u in data):
        raise SourceError(f"{origin}: expected a list of URL strings, got {type(data).__name__}")
    try:
        return [normalize_url(u) for u in data]
    except ValueError as exc:
        raise SourceError(f"{origin}: {exc}") from exc


def parse_endpoints_flag(value: str) -> list[str]:
    """``--endpoints URL,URL`` → normalized URLs; ``""`` = zero endpoints."""
    try:
        return [normalize_url(u) for u in value.split(",") if u.strip()]
    except ValueError as exc:
        raise SourceError(f"--endpoints: {exc}") from exc


class ListSink(Protocol):
    """Takes a source's whole list (model pools' discovery, a configured model's pool)."""

    def apply(self, urls: Sequence[str]) -> None: ...


Sink = Dispatcher | ListSink


class _Pools(Protocol):
    def set_endpoints(self, name: str, urls: Sequence[str]) -> None: ...


class ModelSink:
    """One configured model's pool as a source's sink (``--model-endpoints-file``)."""

    def __init__(self, pools: _Pools, model: str) -> None:
        self._pools = pools
        self.model = model

    def apply(self, urls: Sequence[str]) -> None:
        self._pools.set_endpoints(self.model, urls)


def apply(sink: Sink, urls: Sequence[str]) -> None:
    if not isinstance(sink, Dispatcher):
        sink.apply(urls)
        return
    added, removed = sink.pool.set_endpoints(urls)
    if added or removed:
        log.info("endpoints: +%s -%s", added, removed)
    if removed:
        sink.forget(removed)
    sink.pump()


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:  # missing, or not readable now: the read that follows tells which
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_endpoints_file(path: Path) -> list[str]:
    """Read ``path`` (a missing file is zero endpoints)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SourceError(f"--endpoints-file {path}: {exc}") from exc
    return parse_endpoint_list(text, f"--endpoints-file {path}")


async def watch_file_job(sink: Sink, path: Path, interval_s: float, _session: object) -> None:
    """:func:`watch_file` as the app's background job (which is given the session)."""
    await watch_file(sink, path, interval_s)


async def watch_file(sink: Sink, path: Path, interval_s: float = 1.0) -> None:
    """Re-read ``path`` whenever its inode, mtime or size changes (polled every
    ``interval_s`` seconds). Writers replace it atomically by rename, so a read never sees
    half a file; a bad file is logged and the previous list kept (never wiped to zero).

    The first poll always re-reads: the startup read happened before the server (and this
    watcher) started, and a change written in between must not wait for the next write.
    """
    seen: tuple[int, int, int] | None = (-1, -1, -1)  # matches no file: the first poll reads
    while True:
        await asyncio.sleep(interval_s)
        sig = _signature(path)
        if sig == seen:
            continue
        seen = sig
        try:
            urls = read_endpoints_file(path)
        except SourceError as exc:
            log.error("%s; keeping the previous endpoint list", exc)
            continue
        apply(sink, urls)
