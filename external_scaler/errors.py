"""The scaler's one error tree, mapped to gRPC status codes once, in the servicer.

    ScalerError
    ├── MetadataError        bad ScaledObject metadata       → INVALID_ARGUMENT
    └── SourceError          no window of L at all           → UNAVAILABLE
        ├── SourceTimeout    the source did not answer in time
        ├── SourceEmpty      the source answered with no (fresh) sample of L
        └── SourceRejected   the source refused the query itself → INVALID_ARGUMENT
                             (e.g. a selector regex Prometheus' RE2 cannot compile)

``inflight.control.policy.NoSamples`` (the pure core's "no data yet", or a partial window
with no ready count to hold) is mapped to UNAVAILABLE as well: a missing signal is never
reported as 0, which would scale a busy service down; KEDA's ``fallback`` decides what to
do instead.

A window that may understate L (a router down in it, samples missing for a stretch) is
not an error: the source returns it with ``Window.partial`` and the policy answers it with
a raise or a hold, never a drop; the metrics count it under ``source_partial`` or
``source_stale`` (``names.SCALER_ERROR_*``).
"""

from __future__ import annotations

from inflight import names


class ScalerError(Exception):
    """Base of every error the scaler maps to a gRPC status."""


class MetadataError(ScalerError):
    """A ScaledObject metadata key has a bad value; the message names key and form."""

    def __init__(self, key: str, accepted: str, got: str | None = None, detail: str = "") -> None:
        self.key = key
        self.accepted = accepted
        self.got = got
        self.detail = detail
        parts = [f"metadata key {key!r}"]
        if got is not None:
            shown = got if len(got) <= 80 else got[:77] + "..."
            parts.append(f"got {shown!r}")
        if detail:
            parts.append(detail)
        parts.append(f"expected {accepted}")
        super().__init__(": ".join(parts))

    def for_key(self, key: str) -> MetadataError:
        """The same error, naming ``key`` (e.g. ``selectorFromEnv`` for ``selector``)."""
        return MetadataError(key, self.accepted, self.got, self.detail)


class SourceError(ScalerError):
    """The metric source could not deliver a window (unreachable, error status, bad data)."""

    kind = names.SCALER_ERROR_SOURCE


class SourceTimeout(SourceError):
    """The source did not answer within the time the call had left."""

    kind = names.SCALER_ERROR_SOURCE_TIMEOUT


class SourceEmpty(SourceError):
    """The source answered, but without any sample of L for this selector."""

    kind = names.SCALER_ERROR_SOURCE_EMPTY


class SourceRejected(SourceError):
    """The source rejected the query itself (e.g. Prometheus ``bad_data``): a metadata fault."""

    kind = names.SCALER_ERROR_SOURCE_REJECTED
