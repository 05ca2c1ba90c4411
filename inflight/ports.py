"""Which TCP ports a process group really listens on, read from /proc (Linux).

For a child that cannot report its port (``vllm serve``, Prometheus) this is how we learn
or check it. An external replica is given a port picked here, but between our probe and
its bind another process can take the port (the seed's ports drifted 8003 → 8004 → 8005):
so before such a replica joins the router the supervisor reads back the ports its process
group listens on and checks that ours is one of them (a ``/health`` that answers on the
port proves nothing if the answer comes from someone else). Prometheus is started on port
0 and its one listening port is read here (:mod:`inflight.prom`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from inflight.procs import group_pids

_PROC = Path("/proc")
_TCP_LISTEN = "0A"


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    fd_dir = _PROC / str(pid) / "fd"
    try:
        fds = list(fd_dir.iterdir())
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def _listening_by_inode() -> dict[int, int]:
    """inode -> port for every listening TCP socket (IPv4 and IPv6)."""
    found: dict[int, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = (_PROC / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _TCP_LISTEN:
                continue
            port = int(fields[1].rsplit(":", 1)[1], 16)
            found[int(fields[9])] = port
    return found


def ports_of(pids: Iterable[int]) -> set[int]:
    """TCP ports on which any of ``pids`` listens."""
    inodes: set[int] = set()
    for pid in pids:
        inodes |= _socket_inodes(pid)
    by_inode = _listening_by_inode()
    return {by_inode[i] for i in inodes if i in by_inode}


def listening_ports(pgid: int) -> set[int]:
    """TCP ports on which some member of process group ``pgid`` listens."""
    return ports_of(group_pids(pgid))
