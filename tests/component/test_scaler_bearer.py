"""``--prometheus-bearer-token-file``: the token reaches Prometheus' API, and a rotated
file is picked up without a restart.

Debian's Prometheus 2.42 cannot demand a bearer token, so the far end here is a loopback
HTTP server that records the Authorization header and answers a minimal matrix.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from tests.support import LoopbackHTTPServer, ProcessTracker, QuietHandler, wait_for


class RecordingPrometheus:
    """Answers /api/v1/query_range with L = 5 at the requested end; records auth headers."""

    def __init__(self) -> None:
        self.authorizations: list[str] = []
        seen = self.authorizations

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                from urllib.parse import parse_qs, urlparse

                seen.append(self.headers.get("Authorization", ""))
                end = float(parse_qs(urlparse(self.path).query)["end"][0])
                body = json.dumps(
                    {
                        "status": "success",
                        "data": {
                            "resultType": "matrix",
                            "result": [{"metric": {"signal": "inflight"}, "values": [[end, "5"]]}],
                        },
                    }
                ).encode()
                self.respond(body)

        self.http = LoopbackHTTPServer(Handler)
        self.url = self.http.url

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def prometheus() -> Iterator[RecordingPrometheus]:
    p = RecordingPrometheus()
    yield p
    p.close()


def test_bearer_token_is_sent_and_rotation_is_picked_up(
    procs: ProcessTracker, prometheus: RecordingPrometheus, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("first-token\n")
    scaler = procs.start_inflight(
        ["scaler", "--grpc-port", "0", "--metrics-port", "{port}",
         "--prometheus-url", prometheus.url, "--prometheus-bearer-token-file", str(token),
         "--cache-ttl-s", "0"],
        name="scaler",
    )  # fmt: skip
    ref = pb.ScaledObjectRef(name="llm", scalerMetadata={"timeScale": "0.1"})
    request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="inflight")
    with grpc.insecure_channel(f"127.0.0.1:{scaler.ports['grpc']}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        reply = stub.GetMetrics(request, timeout=3)
        assert reply.metricValues[0].metricValueFloat == 5.0
        assert prometheus.authorizations[-1] == "Bearer first-token"
        # A rotated Secret: new content and a new mtime (file systems with coarse mtimes).
        token.write_text("second-token\n")
        later = time.time() + 5
        os.utime(token, (later, later))

        def sent_second() -> bool:
            stub.GetMetrics(request, timeout=3)
            return prometheus.authorizations[-1] == "Bearer second-token"

        wait_for(sent_second, timeout_s=30, what="the rotated token to be sent")


def test_unreadable_token_file_exits_2_naming_the_flag(tmp_path: Path) -> None:
    import subprocess

    from tests.support import INFLIGHT

    result = subprocess.run(
        [*INFLIGHT, "scaler", "--prometheus-url", "http://127.0.0.1:1",
         "--prometheus-bearer-token-file", str(tmp_path / "missing")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--prometheus-bearer-token-file" in result.stderr
