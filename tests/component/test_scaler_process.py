"""``inflight scaler`` as a process: its printed port, TLS and mutual TLS, graceful stop."""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from tests.component.test_scaler_servicer import FakeRouter
from tests.support import ProcessTracker, Server, wait_for

REF = pb.ScaledObjectRef(
    name="llm", scalerMetadata={"scaleUpWindowSeconds": "0", "scaleDownWindowSeconds": "0"}
)


@pytest.fixture
def router() -> Iterator[FakeRouter]:
    r = FakeRouter()
    r.inflight.set(5)
    yield r
    r.close()


def start_scaler(procs: ProcessTracker, router: FakeRouter, *extra: str) -> Server:
    return procs.start_inflight(
        [
            "scaler",
            "--grpc-port", "0",
            "--metrics-port", "{port}",
            "--source", "direct",
            "--router-url", router.url,
            "--poll-interval-s", "0.1",
            *extra,
        ],
        name="scaler",
    )  # fmt: skip


def get_value(stub: pb_grpc.ExternalScalerStub) -> float:
    request = pb.GetMetricsRequest(scaledObjectRef=REF, metricName="inflight")
    return stub.GetMetrics(request, timeout=3).metricValues[0].metricValueFloat


def answers(stub: pb_grpc.ExternalScalerStub) -> float | None:
    try:
        return get_value(stub)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAVAILABLE:
            return None
        raise


def test_port_zero_is_printed_and_sigterm_stops_gracefully(
    procs: ProcessTracker, router: FakeRouter, tmp_path: Path
) -> None:
    scaler = start_scaler(procs, router)
    assert scaler.process.log_path is not None
    log = Path(scaler.process.log_path)
    line = wait_for(
        lambda: re.search(r"gRPC on 127\.0\.0\.1:(\d+) \(plaintext\)", log.read_text()),
        what="the printed gRPC port",
    )
    port = int(line.group(1))
    assert port != 0
    assert port == scaler.ports["grpc"]  # the ready file and the log agree
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = pb_grpc.ExternalScalerStub(channel)
        assert wait_for(lambda: answers(stub), what="a value") == 5.0
        stream = stub.StreamIsActive(REF)
        assert next(stream).result is True  # already active when the stream opens
        scaler.process.signal_group(signal.SIGTERM)
        assert scaler.process.popen is not None
        assert scaler.process.popen.wait(timeout=15) == 0  # graceful: exit code 0
        with pytest.raises(grpc.RpcError):
            next(stream)  # the server ended the stream on its way out


def test_tls_serves_keda_with_ca_cert(procs: ProcessTracker, router: FakeRouter, certs: Path):
    port = start_scaler(procs, router, "--tls-cert", str(certs / "server.crt"),
                        "--tls-key", str(certs / "server.key")).ports["grpc"]  # fmt: skip
    creds = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes())
    with grpc.secure_channel(f"127.0.0.1:{port}", creds) as channel:
        assert wait_for(lambda: answers(pb_grpc.ExternalScalerStub(channel)), what="value") == 5.0
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:  # plaintext: refused
        with pytest.raises(grpc.RpcError) as err:
            get_value(pb_grpc.ExternalScalerStub(channel))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


def test_mutual_tls_needs_a_client_certificate(
    procs: ProcessTracker, router: FakeRouter, certs: Path
) -> None:
    port = start_scaler(procs, router, "--tls-cert", str(certs / "server.crt"),
                        "--tls-key", str(certs / "server.key"),
                        "--tls-client-ca", str(certs / "ca.crt")).ports["grpc"]  # fmt: skip
    ca = (certs / "ca.crt").read_bytes()
    with_cert = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=(certs / "client.key").read_bytes(),
        certificate_chain=(certs / "client.crt").read_bytes(),
    )
    with grpc.secure_channel(f"127.0.0.1:{port}", with_cert) as channel:
        assert wait_for(lambda: answers(pb_grpc.ExternalScalerStub(channel)), what="value") == 5.0
    without = grpc.ssl_channel_credentials(root_certificates=ca)
    with grpc.secure_channel(f"127.0.0.1:{port}", without) as channel:
        with pytest.raises(grpc.RpcError) as err:
            get_value(pb_grpc.ExternalScalerStub(channel))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # handshake refused


def test_bad_flags_exit_2_naming_the_flag(tmp_path: Path) -> None:
    from tests.support import INFLIGHT

    result = subprocess.run(
        [*INFLIGHT, "scaler", "--source", "direct"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "--router-url" in result.stderr
    missing = tmp_path / "missing.pem"
    result = subprocess.run(
        [*INFLIGHT, "scaler", "--prometheus-url", "http://127.0.0.1:1",
         "--tls-cert", str(missing), "--tls-key", str(missing)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "--tls-cert" in result.stderr
