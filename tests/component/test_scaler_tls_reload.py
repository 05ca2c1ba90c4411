"""TLS certificates rotate without a restart: new connections get the new certificate.

The files are laid out the way the kubelet mounts a Secret (``tls.crt`` → ``..data/
tls.crt``, ``..data`` → a timestamped directory) and rotated the way it does, by
renaming a new ``..data`` symlink over the old one. Real certificates from the openssl
command line (the ``certs`` fixture's CA, and a second CA made here); real gRPC clients
over TLS on loopback, each trusting one CA only, so which certificate the server
presents is read off which client gets through.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry

from external_scaler.metrics import ScalerMetrics
from external_scaler.server import ScalerApp
from external_scaler.servicer import ExternalScalerServicer
from external_scaler.sources.direct import DirectSource
from external_scaler.tls import CertificateReloader, TlsFiles
from tests.component.test_scaler_servicer import FakeRouter, poll
from tests.support import openssl

EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def second_ca(d: Path) -> Path:
    """CA "two" and a server certificate for 127.0.0.1 signed by it, in ``d``."""
    d.mkdir()
    openssl("req", "-x509", *EC, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
            "-subj", "/CN=inflight-test-ca-two", cwd=d)  # fmt: skip
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", *EC, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=two",
            cwd=d)  # fmt: skip
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "server.ext",
            cwd=d)  # fmt: skip
    return d


class SecretVolume:
    """A directory laid out like a kubelet-mounted Secret, with atomic updates."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir()
        self.version = 0
        for name in ("tls.crt", "tls.key"):
            (root / name).symlink_to(Path("..data") / name)

    def publish(self, cert: Path, key: Path) -> None:
        self.version += 1
        target = self.root / f"..2026_12_01_v{self.version}"
        target.mkdir()
        (target / "tls.crt").write_bytes(cert.read_bytes())
        (target / "tls.key").write_bytes(key.read_bytes())
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(target.name)
        os.replace(tmp, self.root / "..data")  # the kubelet's atomic swap

    @property
    def files(self) -> TlsFiles:
        return TlsFiles(self.root / "tls.crt", self.root / "tls.key")


@pytest.fixture
async def tls_app(certs: Path, tmp_path: Path) -> AsyncIterator[tuple[ScalerApp, SecretVolume]]:
    volume = SecretVolume(tmp_path / "secret")
    volume.publish(certs / "server.crt", certs / "server.key")
    router = FakeRouter()
    registry = CollectorRegistry()
    metrics = ScalerMetrics(registry)
    try:
        async with aiohttp.ClientSession() as session:
            source = DirectSource([router.url], session, metrics, poll_interval_s=0.2)
            app = ScalerApp(ExternalScalerServicer(source, metrics), registry, tls=volume.files)
            await app.start()
            try:
                yield app, volume
            finally:
                await app.stop(grace_s=1.0)
    finally:
        router.close()


async def serving(port: int, ca: Path) -> bool:
    """One health check on a new TLS connection that trusts only ``ca``."""
    pem = await asyncio.to_thread(ca.read_bytes)
    creds = grpc.ssl_channel_credentials(root_certificates=pem)
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", creds) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=3
            )
        except grpc.aio.AioRpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE, exc  # handshake refused
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_rotated_certificate_is_served_to_new_connections(
    tls_app: tuple[ScalerApp, SecretVolume], certs: Path, tmp_path: Path
) -> None:
    app, volume = tls_app
    two = second_ca(tmp_path / "two")
    assert await serving(app.grpc_port, certs / "ca.crt")
    assert not await serving(app.grpc_port, two / "ca.crt")

    volume.publish(two / "server.crt", two / "server.key")

    assert await poll(lambda: serving(app.grpc_port, two / "ca.crt"), what="the new certificate")
    assert not await serving(app.grpc_port, certs / "ca.crt")


async def test_a_mismatched_update_keeps_the_last_good_certificate(
    tls_app: tuple[ScalerApp, SecretVolume], certs: Path, tmp_path: Path
) -> None:
    """A key that is not the certificate's (half an update) is never served."""
    app, volume = tls_app
    two = second_ca(tmp_path / "two")
    volume.publish(two / "server.crt", certs / "server.key")  # new cert, old key
    for _ in range(3):  # each new connection asks the fetcher again
        assert await serving(app.grpc_port, certs / "ca.crt")
    volume.publish(two / "server.crt", two / "server.key")  # the update completes
    assert await poll(lambda: serving(app.grpc_port, two / "ca.crt"), what="the completed update")


def test_the_fetcher_reloads_once_per_change_and_never_raises(certs: Path, tmp_path: Path) -> None:
    volume = SecretVolume(tmp_path / "secret")
    volume.publish(certs / "server.crt", certs / "server.key")
    reloader = CertificateReloader(volume.files)
    assert reloader.fetch() is None  # unchanged: gRPC keeps what it has
    two = second_ca(tmp_path / "two")
    volume.publish(two / "server.crt", two / "server.key")
    assert reloader.fetch() is not None
    assert (reloader.fetch(), reloader.reloads) == (None, 1)
    (tmp_path / "secret" / "..data").unlink()  # files gone: keep serving, do not raise
    assert reloader.fetch() is None


def test_unusable_files_at_start_up_name_the_flag(certs: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--tls-key"):
        CertificateReloader(TlsFiles(certs / "server.crt", tmp_path / "missing.key"))
    with pytest.raises(ValueError, match="--tls-cert/--tls-key"):
        CertificateReloader(TlsFiles(certs / "server.crt", certs / "client.key"))
