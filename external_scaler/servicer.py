"""KEDA's ``externalscaler.ExternalScaler``: translate calls, decide, encode. Nothing else.

Every handler is parse → observe → decide → encode, and the scaler's error tree is mapped
to gRPC status codes here, once:

* MetadataError, SourceRejected → INVALID_ARGUMENT (the message names the key);
* SourceError, NoSamples        → UNAVAILABLE (never a made-up 0; KEDA's ``fallback``
                                   decides what to do instead);
* LimitExceeded                 → RESOURCE_EXHAUSTED (too many streams, distinct
                                   triggers or Prometheus queries a second; the message
                                   names the bound and its flag);
* anything else                 → INTERNAL (logged; the process keeps serving).

A trigger's gauge series (``metric_name``) go when no admitted trigger has that name
(:meth:`ExternalScalerServicer.forget_idle`, at each scrape of ``/metrics``): a trigger
stays admitted while a call or its stream holds it and ``--trigger-idle-s`` after
(``external_scaler.limits``).

A window that may understate L (a router down in it, samples missing) is not an error: the
policy answers it with a raise or a hold of the ready count, never a drop
(``inflight.control.policy.guard``), and the metrics count it by kind.

Every call answers within KEDA's 3 s deadline: the source gets ``call_budget_s``, or less
when the caller's own deadline is nearer.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from typing import NoReturn

import grpc

from external_scaler.decision import Decided, costed_decision
from external_scaler.errors import MetadataError, ScalerError, SourceError, SourceRejected
from external_scaler.limits import LimitExceeded, Limits
from external_scaler.metadata import ScalerSpec, parse_metadata
from external_scaler.metrics import ScalerMetrics
from external_scaler.proto import externalscaler_pb2 as pb
from external_scaler.proto import externalscaler_pb2_grpc as pb_grpc
from external_scaler.sources import Observed, WindowSource
from inflight import names
from inflight.control.policy import Decision, NoSamples

log = logging.getLogger(__name__)

# KEDA gives each call 3 s; leave room for the network and the encoding.
DEFAULT_CALL_BUDGET_S = 2.5


class _Abort(Exception):
    def __init__(self, code: grpc.StatusCode, message: str, kind: str) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind


def _exhausted(exc: LimitExceeded) -> _Abort:
    return _Abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc), exc.kind)


class ExternalScalerServicer(pb_grpc.ExternalScalerServicer):
    """The four RPCs KEDA calls, over a WindowSource and the pure policy."""

    def __init__(
        self,
        source: WindowSource,
        metrics: ScalerMetrics,
        *,
        call_budget_s: float = DEFAULT_CALL_BUDGET_S,
        stream_interval_s: float = 1.0,
        limits: Limits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.limits = Limits() if limits is None else limits
        self.metrics = metrics
        self.call_budget_s = call_budget_s
        self.stream_interval_s = stream_interval_s
        self._clock = clock
        # Per metric name: the desired count and hold last logged (change_message).
        self._last_logged: dict[str, tuple[int, bool]] = {}
        # Metric names with gauge series, to remove when their trigger is gone.
        self._recorded: set[str] = set()
        # Per trigger spec, the window last decided on and the decision (most recent last,
        # at most max_triggers). The decision is a pure function of the two, so a call the
        # source answers from its cache (the same window) reuses it instead of deciding
        # again; the window is held weakly: the source's cache owns it, and once it drops
        # it the entry can match nothing.
        self._decided: dict[ScalerSpec, tuple[weakref.ref[Observed], Decided]] = {}

    # --- RPCs -------------------------------------------------------------------------

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        method = "GetMetricSpec"
        try:
            spec = self._parse(request.scalerMetadata)
        except _Abort as abort:
            await self._fail(context, method, abort)
        target = spec.policy.target
        self._count(method, grpc.StatusCode.OK)
        return pb.GetMetricSpecResponse(
            metricSpecs=[
                pb.MetricSpec(
                    metricName=spec.metric_name,
                    targetSize=math.ceil(target),
                    targetSizeFloat=target,
                )
            ]
        )

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        method = "GetMetrics"
        try:
            spec = self._parse(request.scaledObjectRef.scalerMetadata)
            # Older KEDA releases send the metric name lowercased: same name, any case.
            if request.metricName and request.metricName.lower() != spec.metric_name.lower():
                raise _Abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"metric {request.metricName!r} requested, but metadata key "
                    f"'metricName' is {spec.metric_name!r}",
                    names.SCALER_ERROR_INVALID_ARGUMENT,
                )
            decided = await self._decide(spec, context)
        except _Abort as abort:
            await self._fail(context, method, abort)
        decision = decided.decision
        self._recorded.add(spec.metric_name)
        self.metrics.record(spec.metric_name, decision, count=True)
        self.metrics.record_binding(spec.metric_name, decided.dimension)
        self.metrics.record_dimensions(spec.metric_name, decided.inflight)
        self._log_change(spec.metric_name, decision)
        self._count(method, grpc.StatusCode.OK)
        return pb.GetMetricsResponse(
            metricValues=[
                pb.MetricValue(
                    metricName=request.metricName or spec.metric_name,
                    metricValue=math.ceil(decision.value),
                    metricValueFloat=decision.value,
                )
            ]
        )

    async def IsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.IsActiveResponse:
        method = "IsActive"
        try:
            spec = self._parse(request.scalerMetadata)
            decision = (await self._decide(spec, context)).decision
        except _Abort as abort:
            await self._fail(context, method, abort)
        self._recorded.add(spec.metric_name)
        self.metrics.record(spec.metric_name, decision, count=False)
        self._count(method, grpc.StatusCode.OK)
        return pb.IsActiveResponse(result=decision.active)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        """Push ``true`` once each time the trigger turns active after being idle.

        KEDA scales from zero at once on a pushed ``true`` and ignores ``false``, so only
        the idle → active edge is sent (and ``true`` on opening when already active). A
        source failure leaves the state as it was and is retried next interval.
        """
        method = "StreamIsActive"
        try:
            spec = self._parse(request.scalerMetadata)
            # Admitted for as long as the stream is open: a stream slot, and its trigger.
            with self.limits.stream(), self.limits.trigger(spec):
                async for response in self._stream(spec, context, method):
                    yield response
        except LimitExceeded as exc:
            await self._fail(context, method, _exhausted(exc))
        except _Abort as abort:
            await self._fail(context, method, abort)

    async def _stream(
        self, spec: ScalerSpec, context: grpc.aio.ServicerContext, method: str
    ) -> AsyncIterator[pb.IsActiveResponse]:
        was_active = False
        while True:
            try:
                decision = (await self._decide(spec, None)).decision
            except _Abort as abort:
                self.metrics.errors.labels(abort.kind).inc()
                if abort.code == grpc.StatusCode.INVALID_ARGUMENT:
                    await self._fail(context, method, abort)
            else:
                if decision.active and not was_active:
                    yield pb.IsActiveResponse(result=True)
                was_active = decision.active
            await asyncio.sleep(self.stream_interval_s)

    # --- parse → observe → decide, errors mapped once ---------------------------------

    def _parse(self, metadata: Mapping[str, str]) -> ScalerSpec:
        try:
            return parse_metadata(metadata)
        except MetadataError as exc:
            raise _Abort(
                grpc.StatusCode.INVALID_ARGUMENT, str(exc), names.SCALER_ERROR_INVALID_ARGUMENT
            ) from exc

    async def _decide(self, spec: ScalerSpec, context: grpc.aio.ServicerContext | None) -> Decided:
        try:
            with self.limits.trigger(spec):
                return await self._decide_admitted(spec, context)
        except LimitExceeded as exc:  # the admission, or the source's query rate
            raise _exhausted(exc) from exc

    async def _decide_admitted(
        self, spec: ScalerSpec, context: grpc.aio.ServicerContext | None
    ) -> Decided:
        budget_s = self.call_budget_s
        remaining = context.time_remaining() if context is not None else None
        if remaining is not None:
            budget_s = min(budget_s, remaining - 0.1)
        if budget_s <= 0:
            raise _Abort(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                "no time left before the deadline",
                names.SCALER_ERROR_DEADLINE,
            )
        try:
            observed = await asyncio.wait_for(
                self.source.observe(spec, self._clock(), budget_s), budget_s
            )
            return self._decided_on(spec, observed)
        except TimeoutError as exc:
            raise _Abort(
                grpc.StatusCode.UNAVAILABLE,
                f"the metric source did not answer within {budget_s:.2f} s",
                names.SCALER_ERROR_SOURCE_TIMEOUT,
            ) from exc
        except MetadataError as exc:
            raise _Abort(
                grpc.StatusCode.INVALID_ARGUMENT, str(exc), names.SCALER_ERROR_INVALID_ARGUMENT
            ) from exc
        except LimitExceeded:
            raise  # the source's query rate: RESOURCE_EXHAUSTED (_decide)
        except SourceRejected as exc:
            raise _Abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc), exc.kind) from exc
        except SourceError as exc:
            raise _Abort(grpc.StatusCode.UNAVAILABLE, str(exc), exc.kind) from exc
        except NoSamples as exc:
            raise _Abort(
                grpc.StatusCode.UNAVAILABLE, str(exc), names.SCALER_ERROR_NO_SAMPLES
            ) from exc
        except ScalerError as exc:
            raise _Abort(grpc.StatusCode.INTERNAL, str(exc), names.SCALER_ERROR_INTERNAL) from exc
        except Exception as exc:
            log.exception("unexpected error deciding for %s", spec.metric_name)
            raise _Abort(
                grpc.StatusCode.INTERNAL, f"internal error: {exc!r}", names.SCALER_ERROR_INTERNAL
            ) from exc

    def _decided_on(self, spec: ScalerSpec, observed: Observed) -> Decided:
        """The decision on ``observed``, reused when ``spec`` last decided on that same
        window (a cache hit of the source's)."""
        memo = self._decided.pop(spec, None)
        # Saturation over every capacity dimension (docs/capacity.md): the policy decides
        # on max(L, KV-equivalent L) at each step (the simulator calls it too).
        decided = (
            memo[1]
            if memo is not None and memo[0]() is observed
            else costed_decision(spec, observed)
        )
        self._decided[spec] = (weakref.ref(observed), decided)
        while len(self._decided) > self.limits.max_triggers:
            del self._decided[next(iter(self._decided))]
        return decided

    async def _fail(
        self, context: grpc.aio.ServicerContext, method: str, abort: _Abort
    ) -> NoReturn:
        self.metrics.errors.labels(abort.kind).inc()
        self._count(method, abort.code)
        await context.abort(abort.code, str(abort))
        raise AssertionError("unreachable: context.abort raises")

    def forget_idle(self) -> list[str]:
        """Remove the gauge series of every metric name no admitted trigger has (its
        ScaledObject deleted or changed, its stream closed ``--trigger-idle-s`` ago); the
        names removed, sorted. The metrics endpoint calls it before each scrape."""
        live = {k.metric_name for k in self.limits.admitted() if isinstance(k, ScalerSpec)}
        gone = sorted(self._recorded - live)
        for metric_name in gone:
            self.metrics.forget(metric_name)
            self._recorded.discard(metric_name)
            self._last_logged.pop(metric_name, None)
        return gone

    def _log_change(self, metric_name: str, decision: Decision) -> None:
        """One log line when the replica count HPA will derive changes, or a late scale-up's
        hold begins or ends (not every poll)."""
        before = self._last_logged.get(metric_name)
        line = change_message(metric_name, before, decision)
        self._last_logged[metric_name] = (decision.desired_replicas, decision.held_scale_up)
        if line is not None:
            log.info("%s", line)

    def _count(self, method: str, code: grpc.StatusCode) -> None:
        self.metrics.grpc_requests.labels(method, code.name).inc()


def change_message(
    metric_name: str, before: tuple[int, bool] | None, decision: Decision
) -> str | None:
    """The scaler's log line for ``decision`` after ``before`` (the desired count and hold
    last logged; None: nothing yet), or None when neither changed. A late scale-up's hold
    changes no count, so its start and end get lines of their own
    (``tests/unit/test_scaler_change_log.py``).
    """
    desired, held = decision.desired_replicas, decision.held_scale_up
    if before == (desired, held):
        return None
    was, was_held = ("?", False) if before is None else (str(before[0]), before[1])
    if held and not was_held:
        what = f"scale-up held at {desired}"
    elif was_held and not held:
        what = f"scale-up no longer held, desired {was} -> {desired}"
    else:
        what = f"desired {was} -> {desired}"
    return (
        f"{metric_name}: {what} ({decision.policy} policy, value {decision.value:g}, "
        f"target {decision.target:g}): {decision.reason}"
    )
