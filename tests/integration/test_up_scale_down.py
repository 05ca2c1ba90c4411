"""A scale-down under load leaves the replica the rule names (issue 38, item 3), live.

``inflight up`` (emulator replicas, time-scale 0.05) at 1 replica of 4 slots; six long
requests: four run on replica 1, two are held, so it scales to 2 and the held two go to
replica 2, the newest. The four on replica 1 are then cut by their clients, leaving
replica 1 idle and replica 2 busy. L falls to 2, and the stack scales back to 1: the rule
(:mod:`inflight.control.scale_down`, fewest requests in flight leaves first) drains
replica 1, where the rule before it (newest first) would have drained replica 2 and its
two requests.
"""

from __future__ import annotations

import json
import socket

from inflight.emulator.cli import DEFAULT_MODEL
from tests.integration.test_up import TS, start_up, status, timeline
from tests.support import wait_for

# Long enough to outlast the scale-down (≈ 150 s at this time-scale); the clients cut them.
LONG_TOKENS = 20_000


def long_request(router_port: int) -> socket.socket:
    """A completion that runs for minutes, sent on its own connection (closing it cuts the
    request: the router releases its slot)."""
    body = json.dumps({"model": DEFAULT_MODEL, "prompt": "hi", "max_tokens": LONG_TOKENS})
    conn = socket.create_connection(("127.0.0.1", router_port))
    conn.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body.encode()
    )
    return conn


def endpoint_inflight(info) -> dict[str, int]:
    return {e["url"]: e["inflight"] for e in status(info)["endpoints"] if e["state"] == "ready"}


def test_a_scale_down_under_load_drains_the_idle_replica_not_the_newest(
    procs, tmp_path, monkeypatch
):
    # The rule comes with prefix-aware dispatch (its router's variable, which inflight up
    # passes through): without it, newest first as before.
    monkeypatch.setenv("INFLIGHT_ROUTER_DISPATCH", "prefix")
    state = tmp_path / "state"
    _, info = start_up(procs, state, "--time-scale", TS, "--max-replicas", "2",
                       "--scaler-metadata", "floorWindowSeconds=0")  # fmt: skip
    port = int(info.router_url.rsplit(":", 1)[1])
    first: list[socket.socket] = []
    held: list[socket.socket] = []
    try:
        first = [long_request(port) for _ in range(4)]

        def one_full_replica() -> list[str] | None:
            by_url = endpoint_inflight(info)
            return list(by_url) if list(by_url.values()) == [4] else None

        (old_url,) = wait_for(one_full_replica, 30, what="4 requests running on one replica")
        held = [long_request(port) for _ in range(2)]  # no free slot: held, L = 6 > 4

        def second_replica() -> list[str] | None:
            others = set(endpoint_inflight(info)) - {old_url}
            return list(others) or None

        (new_url,) = wait_for(second_replica, 60, what="a second replica")
        wait_for(
            lambda: endpoint_inflight(info).get(new_url) == 2 and status(info)["queued"] == 0,
            timeout_s=30,
            what="the held requests on the new replica",
        )
        for conn in first:
            conn.close()  # replica 1 idle, replica 2 busy: L = 2, one replica is enough
        wait_for(
            lambda: timeline(state)[-1].desired == 1 and list(endpoint_inflight(info)) == [new_url],
            timeout_s=60,
            what="back to 1 replica",
        )
        # The newest replica, busy, stayed; its requests were not cut by the scale-down.
        assert endpoint_inflight(info) == {new_url: 2}
        assert json.loads((state / "endpoints.json").read_text()) == [new_url]
        up_log = (state / "logs" / "up.log").read_text()
        assert f"({old_url}) draining: 0 in flight, 0 prefix blocks only it holds" in up_log
        assert f"({new_url}) draining" not in up_log
    finally:
        for conn in first + held:
            conn.close()
