"""The ready file: how a server of ours tells whoever started it which ports it got.

Picking a free port in the parent (bind to 0, close, pass the number on) leaves a window in
which any outgoing connection of the machine can take the port; it happened in CI. So our
servers (emulator, router, scaler) are told ``--port 0`` and ``--ready-file PATH``: each
binds and listens itself, then writes PATH atomically (temp file + rename), once, as

    {"pid": 4242, "ports": {"http": 41235}}                   # emulator, router
    {"pid": 4243, "ports": {"grpc": 40101, "metrics": 40102}}  # scaler

The file says the sockets listen (connections queue from then on), not that the server is
ready: readiness is still ``/health`` (or gRPC health), polled on the reported port.
Readers remove a stale file before starting the child and poll for the new one
(:meth:`inflight.procs.ManagedProcess.wait_ports`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

FLAG = "--ready-file"
HELP = (
    "once listening, write this JSON file (atomically): "
    '{"pid": PID, "ports": {NAME: PORT}}; with --port 0 it is how a parent learns the port'
)


class ReadyFileError(ValueError):
    """A ready file exists but does not hold a port report."""


@dataclass(frozen=True)
class ReadyReport:
    """What a server wrote: its PID and the ports it listens on, by name."""

    pid: int
    ports: Mapping[str, int]


def add_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--ready-file PATH`` to a server's flags."""
    parser.add_argument(FLAG, dest="ready_file", type=Path, default=None, help=HELP)


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: the OS picks) and listening.

    Connections queue in the backlog until the server accepts them, so the port can be
    reported before the event loop runs. OSError names the address on failure.

    The socket is made with ``proto=IPPROTO_TCP`` (not ``socket.create_server``'s 0): the
    sockets it accepts inherit that, and asyncio turns Nagle's algorithm off only on
    sockets whose ``proto`` is ``IPPROTO_TCP``. Without it, a response written as headers
    then body waited for the client's delayed ACK: +41 ms a request, measured.
    """
    try:
        family, _type, _proto, _name, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(backlog)
        except OSError:
            sock.close()
            raise
        return sock
    except OSError as exc:
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def bound_port(sock: socket.socket) -> int:
    port: int = sock.getsockname()[1]
    return port


def write(path: Path, ports: Mapping[str, int]) -> None:
    """Write the report atomically (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "ports": dict(ports)}) + "\n")
    os.replace(tmp, path)


def read(path: Path) -> ReadyReport | None:
    """The report at ``path``, None while there is none; ReadyFileError if it is malformed."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ReadyFileError(f"ready file {path}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("pid"), int):
        raise ReadyFileError(f"ready file {path}: want {{'pid': int, 'ports': {{...}}}}: {text!r}")
    ports = doc.get("ports")
    if (
        not isinstance(ports, dict)
        or not ports
        or not all(isinstance(p, int) and 0 < p <= 65535 for p in ports.values())
    ):
        raise ReadyFileError(f"ready file {path}: 'ports' must map names to ports 1..65535")
    return ReadyReport(doc["pid"], {str(k): v for k, v in ports.items()})
