"""The unit tier is pure: any attempt to open a network connection or bind a socket fails,
and so does any attempt to start a process (a subprocess, a fork, a multiprocessing process
or pool, a ``ProcessPoolExecutor``): such a test belongs in tests/component."""

from __future__ import annotations

import concurrent.futures
import contextlib
import multiprocessing.pool
import multiprocessing.process
import os
import socket
import subprocess
from collections.abc import Iterator

import pytest


class _NoSockets(AssertionError):
    pass


class _NoProcesses(AssertionError):
    pass


@pytest.fixture(autouse=True)
def _no_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*_args: object, **_kwargs: object) -> None:
        raise _NoSockets("unit tests must not use the network; move this test to component/")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket.socket, "bind", refuse)
    yield


@pytest.fixture(scope="session", autouse=True)
def _matplotlib_fonts_found() -> None:
    """matplotlib lists the system's fonts (``fc-list``, a process) the first time it is
    imported on a machine without its font cache: done once here, before the guard below,
    so that a unit test drawing a plot starts no process on a fresh machine either. Under
    pytest-xdist each worker does it: matplotlib writes the cache under a lock file and
    rebuilds when it reads a half-written one, so concurrent workers are safe."""
    with contextlib.suppress(ImportError):
        import matplotlib.font_manager  # noqa: F401


@pytest.fixture(autouse=True)
def _no_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every way the standard library starts a process: subprocess (and asyncio's
    subprocesses, os.popen, which go through it), fork, posix_spawn, os.system, the
    multiprocessing Process and Pool, and ProcessPoolExecutor (refused when made, before it
    forks a worker)."""

    def refusing(what: str) -> object:
        def refuse(*_args: object, **_kwargs: object) -> None:
            raise _NoProcesses(
                f"unit tests must not start processes ({what}): run it in this process, or "
                "move this test to tests/component/"
            )

        return refuse

    monkeypatch.setattr(subprocess.Popen, "__init__", refusing("subprocess.Popen"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refusing(f"os.{name}"))
    monkeypatch.setattr(
        multiprocessing.process.BaseProcess, "start", refusing("a multiprocessing Process")
    )
    monkeypatch.setattr(multiprocessing.pool.Pool, "__init__", refusing("a multiprocessing Pool"))
    monkeypatch.setattr(
        concurrent.futures.ProcessPoolExecutor, "__init__", refusing("a ProcessPoolExecutor")
    )
    yield
