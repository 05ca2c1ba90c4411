"""KEDA's side of the external-scaler protocol: calls the scaler over gRPC as KEDA does.

KEDA sends a ``ScaledObjectRef{name, namespace, scalerMetadata}`` on every call, with a
3 s deadline; uses ``targetSizeFloat`` / ``metricValueFloat`` when > 0, else the int
fields; and gives the HPA the **sum** of the values returned. StreamIsActive is a
server stream on which a pushed ``true`` scales from zero at once (a ``false`` is
ignored); KEDA reconnects when it breaks.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import grpc

from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc

log = logging.getLogger("inflight.up.keda")

KEDA_CALL_DEADLINE_S = 3.0


class ScalerUnavailable(RuntimeError):
    """A scaler call failed; the message carries the gRPC status and details."""


@dataclass(frozen=True)
class MetricSpec:
    metric_name: str
    target: float


def _float_or_int(f: float, i: int) -> float:
    return f if f > 0 else float(i)


class ScalerClient:
    """A gRPC client for one ScaledObject trigger (name, namespace, metadata)."""

    def __init__(
        self,
        address: str,
        metadata: Mapping[str, str],
        name: str = "inflight-up",
        namespace: str = "local",
        deadline_s: float = KEDA_CALL_DEADLINE_S,
    ) -> None:
        self.address = address
        self.deadline_s = deadline_s
        self._channel = grpc.insecure_channel(address)
        self._stub = pb_grpc.ExternalScalerStub(self._channel)
        self._ref = pb.ScaledObjectRef(
            name=name, namespace=namespace, scalerMetadata=dict(metadata)
        )
        self._stream: grpc.Future | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def wait_ready(self, timeout_s: float) -> None:
        try:
            grpc.channel_ready_future(self._channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError as exc:
            raise ScalerUnavailable(
                f"scaler at {self.address} not reachable after {timeout_s:.0f} s"
            ) from exc

    def _call(self, what: str, fn: Callable[[], object]) -> object:
        try:
            return fn()
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            details = exc.details() if hasattr(exc, "details") else str(exc)
            raise ScalerUnavailable(f"{what} failed: {code}: {details}") from exc

    def metric_spec(self) -> MetricSpec:
        resp = self._call(
            "GetMetricSpec", lambda: self._stub.GetMetricSpec(self._ref, timeout=self.deadline_s)
        )
        specs = list(resp.metricSpecs)  # type: ignore[attr-defined]
        if not specs:
            raise ScalerUnavailable("GetMetricSpec returned no metric spec")
        spec = specs[0]
        return MetricSpec(spec.metricName, _float_or_int(spec.targetSizeFloat, spec.targetSize))

    def metric_value(self, metric_name: str) -> float:
        """The value the HPA would see: the sum of the values returned."""
        request = pb.GetMetricsRequest(scaledObjectRef=self._ref, metricName=metric_name)
        resp = self._call(
            "GetMetrics", lambda: self._stub.GetMetrics(request, timeout=self.deadline_s)
        )
        values = list(resp.metricValues)  # type: ignore[attr-defined]
        if not values:
            raise ScalerUnavailable(f"GetMetrics returned no value for {metric_name!r}")
        return sum(_float_or_int(v.metricValueFloat, v.metricValue) for v in values)

    def is_active(self) -> bool:
        resp = self._call(
            "IsActive", lambda: self._stub.IsActive(self._ref, timeout=self.deadline_s)
        )
        return bool(resp.result)  # type: ignore[attr-defined]

    def watch_activation(self, on_active: Callable[[], None], retry_s: float = 1.0) -> None:
        """Follow StreamIsActive in a thread; call ``on_active`` on each pushed ``true``."""

        def follow() -> None:
            while not self._stop.is_set():
                try:
                    self._stream = self._stub.StreamIsActive(self._ref)
                    for resp in self._stream:
                        if resp.result:
                            on_active()
                except grpc.RpcError as exc:
                    if self._stop.is_set():
                        return
                    code = exc.code() if hasattr(exc, "code") else None
                    log.debug("StreamIsActive broke (%s); reconnecting", code)
                self._stop.wait(retry_s)

        self._thread = threading.Thread(target=follow, name="stream-is-active", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.cancel()
        self._channel.close()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
