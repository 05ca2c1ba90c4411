"""The committed stubs are what grpcio-tools makes of the committed .proto, which is KEDA's."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor

from external_scaler.proto import externalscaler_pb2 as pb

REPO = Path(__file__).resolve().parents[2]


def _gen_proto():
    spec = importlib.util.spec_from_file_location("gen_proto", REPO / "scripts" / "gen_proto.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_proto"] = module
    spec.loader.exec_module(module)
    return module


def test_committed_stubs_are_current(tmp_path: Path) -> None:
    stale = _gen_proto().stale_files(tmp_path)
    assert not stale, f"stale generated stubs {stale}: run .venv/bin/python scripts/gen_proto.py"


def test_generation_is_byte_identical(tmp_path: Path) -> None:
    gen = _gen_proto()
    first = [p.read_bytes() for p in gen.generate(tmp_path / "a")]
    second = [p.read_bytes() for p in gen.generate(tmp_path / "b")]
    assert first == second


def test_service_is_keda_externalscaler() -> None:
    service = pb.DESCRIPTOR.services_by_name["ExternalScaler"]
    assert service.full_name == "externalscaler.ExternalScaler"
    methods = {m.name: m for m in service.methods}
    assert set(methods) == {"IsActive", "StreamIsActive", "GetMetricSpec", "GetMetrics"}
    assert methods["IsActive"].input_type.name == "ScaledObjectRef"
    assert methods["GetMetrics"].input_type.name == "GetMetricsRequest"
    assert methods["GetMetrics"].output_type.name == "GetMetricsResponse"
    assert methods["StreamIsActive"].server_streaming is True


T = FieldDescriptor


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (
            "ScaledObjectRef",
            [
                ("name", 1, T.TYPE_STRING),
                ("namespace", 2, T.TYPE_STRING),
                ("scalerMetadata", 3, T.TYPE_MESSAGE),
            ],
        ),
        ("IsActiveResponse", [("result", 1, T.TYPE_BOOL)]),
        ("GetMetricSpecResponse", [("metricSpecs", 1, T.TYPE_MESSAGE)]),
        (
            "MetricSpec",
            [
                ("metricName", 1, T.TYPE_STRING),
                ("targetSize", 2, T.TYPE_INT64),
                ("targetSizeFloat", 3, T.TYPE_DOUBLE),
            ],
        ),
        (
            "GetMetricsRequest",
            [("scaledObjectRef", 1, T.TYPE_MESSAGE), ("metricName", 2, T.TYPE_STRING)],
        ),
        ("GetMetricsResponse", [("metricValues", 1, T.TYPE_MESSAGE)]),
        (
            "MetricValue",
            [
                ("metricName", 1, T.TYPE_STRING),
                ("metricValue", 2, T.TYPE_INT64),
                ("metricValueFloat", 3, T.TYPE_DOUBLE),
            ],
        ),
    ],
)
def test_fields_and_numbers_are_kedas(message: str, fields: list[tuple[str, int, int]]) -> None:
    descriptor = pb.DESCRIPTOR.message_types_by_name[message]
    got = [(f.name, f.number, f.type) for f in descriptor.fields]
    assert got == fields
