"""The gRPC server's TLS files, re-read when they change: certificates rotate without a restart.

cert-manager renews a certificate into its Secret and the kubelet swaps the mounted
files (an atomic rename of the volume's ``..data`` symlink) within a minute or so; a
scaler that read them once at start-up would serve the old certificate until it
expires. gRPC asks for the server's certificates at every new TLS handshake through a
*fetcher* (``grpc.dynamic_ssl_server_credentials``): ours stats the files (cheap), and
only when one changed reads them, checks that the key matches the certificate, and hands
the new set over. Connections already open keep the certificate they started with.

A half-written update (the key replaced before the certificate, a file mid-write) is
never served: the fetcher keeps the last good set, logs why, and tries again at the next
handshake.
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

# (device, inode, size, mtime) of each file after following symlinks: the kubelet's swap
# gives new inodes, an in-place rewrite a new mtime or size.
_Stamp = tuple[tuple[int, int, int, int], ...]


@dataclass(frozen=True)
class TlsFiles:
    """Server certificate and key (PEM); with ``client_ca``, clients must present a
    certificate signed by it (mutual TLS, KEDA's ``tlsClientCert``/``tlsClientKey``)."""

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """Credentials that follow the files: re-read at the first handshake after a change.

        Raises ValueError naming the flag when the files cannot be read, or the key does
        not match the certificate, at start-up.
        """
        return CertificateReloader(self).credentials()

    def flags(self) -> tuple[tuple[str, Path], ...]:
        files = [("--tls-cert", self.cert), ("--tls-key", self.key)]
        if self.client_ca is not None:
            files.append(("--tls-client-ca", self.client_ca))
        return tuple(files)


@dataclass(frozen=True)
class _Loaded:
    stamp: _Stamp
    cert: bytes
    key: bytes
    ca: bytes | None

    def configuration(self) -> grpc.ServerCertificateConfiguration:
        return grpc.ssl_server_certificate_configuration([(self.key, self.cert)], self.ca)


class CertificateReloader:
    """Reads ``files`` and serves them to gRPC's certificate fetcher, re-reading on change."""

    def __init__(self, files: TlsFiles) -> None:
        self.files = files
        self.reloads = 0  # how many times a changed set was taken (for tests and logs)
        self._lock = threading.Lock()  # the fetcher runs on gRPC's threads
        self._current = self._load()
        self._rejected: _Stamp | None = None

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.dynamic_ssl_server_credentials(
            self._current.configuration(),
            self.fetch,
            require_client_authentication=self.files.client_ca is not None,
        )

    def fetch(self) -> grpc.ServerCertificateConfiguration | None:
        """gRPC's fetcher: a new configuration when the files changed, else None (keep).

        Never raises: an exception here would fail the handshake of a client that did
        nothing wrong. A bad new set is logged once and the last good one kept.
        """
        try:
            with self._lock:
                stamp = self._stamp()
                if stamp == self._current.stamp or stamp == self._rejected:
                    return None
                try:
                    loaded = self._load()
                except ValueError as exc:
                    self._rejected = stamp
                    log.warning(
                        "TLS files changed but are not usable yet, keeping the old: %s", exc
                    )
                    return None
                self._current, self._rejected = loaded, None
                self.reloads += 1
            log.info("TLS certificate reloaded from %s", self.files.cert)
            return loaded.configuration()
        except Exception:  # never raise into a handshake (docstring)
            log.exception("TLS certificate reload failed; keeping the old certificate")
            return None

    def _stamp(self) -> _Stamp:
        stamps = []
        for flag, path in self.files.flags():
            try:
                st = path.stat()
            except OSError as exc:
                raise ValueError(f"{flag}: cannot read {path}: {exc}") from exc
            stamps.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(stamps)

    def _load(self) -> _Loaded:
        """Read the files, consistently (unchanged while read), and check the key pair."""
        before = self._stamp()
        cert = _read("--tls-cert", self.files.cert)
        key = _read("--tls-key", self.files.key)
        ca = _read("--tls-client-ca", self.files.client_ca) if self.files.client_ca else None
        if self._stamp() != before:
            raise ValueError("the TLS files changed while they were read")
        _check_pair(cert, key)
        return _Loaded(before, cert, key, ca)


def _read(flag: str, path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{flag}: cannot read {path}: {exc}") from exc


def _check_pair(cert: bytes, key: bytes) -> None:
    """Raise ValueError unless ``key`` is the private key of ``cert`` (both PEM).

    OpenSSL (through ``ssl``) checks the pair, from private temporary files: it reads
    only paths, and the files on disk may change again meanwhile.
    """
    with tempfile.TemporaryDirectory(prefix="inflight-tls-") as tmp:
        cert_path, key_path = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as out:
                out.write(data)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, OSError) as exc:
            raise ValueError(
                f"--tls-cert/--tls-key: not a certificate and its private key (PEM): {exc}"
            ) from exc
