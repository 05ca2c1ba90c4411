"""Our servers bind port 0 themselves and report the port in a ready file (no picked port).

The race this closes: a parent that binds port 0, closes it and passes the number to a
child leaves a window in which any outgoing connection can take the port (it happened in
CI). Here each server is told port 0, so there is no number to lose; the test checks that
the ports it reports are the ones its process group listens on, and that they answer.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from inflight.ports import listening_ports
from inflight.procs import ManagedProcess, ProcessError
from tests.conftest import PrometheusFactory
from tests.support import ProcessTracker

SCALER = ["scaler", "--grpc-port", "{port}", "--metrics-port", "{port}",
          "--prometheus-url", "http://127.0.0.1:9"]  # fmt: skip
SERVERS = {
    "emulator": (["emulator", "--port", "{port}", "--startup-s", "0"], {"http"}),
    "router": (["router", "--port", "{port}", "--endpoints="], {"http"}),
    "scaler": (SCALER, {"grpc", "metrics"}),
}


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_a_server_told_port_zero_reports_ports_that_it_listens_on(
    procs: ProcessTracker, name: str
) -> None:
    args, keys = SERVERS[name]
    server = procs.start_inflight(args, name=name)  # polls /health on the reported port
    argv = list(server.process.argv)
    assert "{port}" not in " ".join(argv)
    assert [a for a in argv if a.isdigit() and a != "0"] == [], argv  # no port handed over
    assert set(server.ports) == keys
    assert all(p > 0 for p in server.ports.values())
    assert set(server.ports.values()) <= listening_ports(server.process.pid)
    report = json.loads(Path(str(server.process.ready_file)).read_text())
    assert report == {"pid": server.process.pid, "ports": server.ports}


def test_a_child_that_exits_before_reporting_fails_fast(tmp_path: Path) -> None:
    proc = ManagedProcess(
        [sys.executable, "-c", "import sys; sys.exit(3)"],
        name="quitter",
        ready_file=tmp_path / "quitter.ready.json",
    ).start()
    with pytest.raises(ProcessError, match="quitter exited with code 3 before reporting"):
        proc.wait_ports(timeout_s=30)
    proc.stop()


def test_a_stale_or_foreign_report_is_never_read_as_the_childs(tmp_path: Path) -> None:
    ready_file = tmp_path / "r.json"
    ready_file.write_text(json.dumps({"pid": 1, "ports": {"http": 1234}}))  # a stale one
    script = (
        "import json, sys, time; from pathlib import Path\n"
        "time.sleep(0.3)\n"  # the child's own start-up: the parent must not take the stale file
        "Path(sys.argv[1]).write_text(json.dumps({'pid': 1, 'ports': {'http': 4321}}))\n"
        "time.sleep(60)\n"
    )
    proc = ManagedProcess(
        [sys.executable, "-c", script, str(ready_file)], name="liar", ready_file=ready_file
    ).start()
    try:
        assert not ready_file.exists(), "start() must remove a stale ready file"
        with pytest.raises(ProcessError, match="written by pid 1, not by a process of its group"):
            proc.wait_ports(timeout_s=30)
    finally:
        proc.stop(grace_s=1)


def test_prometheus_binds_port_zero_and_its_port_is_read_back(
    prometheus_factory: PrometheusFactory,
) -> None:
    server = prometheus_factory(jobs={})
    assert server.process is not None
    assert "--web.listen-address=127.0.0.1:0" in server.process.argv
    assert server.port > 0
    assert listening_ports(server.process.pid) == {server.port}


def test_connections_accepted_from_listen_have_nagle_off() -> None:
    """asyncio turns Nagle off only on IPPROTO_TCP sockets; accepted sockets inherit the
    listening socket's proto, so a 0 there left Nagle on (+41 ms a response, headers and
    body written apart, waiting for the client's delayed ACK)."""
    import asyncio
    import socket

    from inflight.ready import bound_port, listen

    async def main() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        sock = listen("127.0.0.1", 0)
        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            _reader, writer = await asyncio.open_connection("127.0.0.1", bound_port(sock))
            nodelay = await asyncio.wait_for(seen, 10)
            writer.close()
        return nodelay

    assert asyncio.run(main()) == 1
