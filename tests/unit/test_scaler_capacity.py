"""The ``capacity`` and ``capacitySelector`` trigger keys, the KV signals of the range
query and their reading back from Prometheus' answer (docs/capacity.md)."""

from __future__ import annotations

import pytest

from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from external_scaler.sources.prometheus import kv_from_matrix
from external_scaler.sources.promql import (
    SIGNAL_KV_CONFIG,
    SIGNAL_KV_RUNNING,
    SIGNAL_KV_USAGE,
    SIGNAL_KV_WAITING,
    SIGNAL_LABEL,
    range_query,
)
from inflight import names


def test_capacity_defaults_to_auto_and_accepts_requests() -> None:
    assert names.METADATA_DEFAULTS[names.META_CAPACITY] == "auto"
    assert parse_metadata({}).capacity == "auto"
    assert parse_metadata({"capacity": " requests "}).capacity == "requests"
    assert parse_metadata({}).capacity_selector == ""
    spec = parse_metadata({"capacitySelector": ' job = "vllm" '})
    assert spec.capacity_selector == 'job="vllm"'


@pytest.mark.parametrize("bad", ["tokens", "", "AUTO", "kv"])
def test_an_unknown_capacity_is_refused_naming_the_key_and_the_choices(bad: str) -> None:
    with pytest.raises(MetadataError, match="capacity") as err:
        parse_metadata({"capacity": bad})
    assert '"auto", "requests"' in str(err.value)


def test_a_bad_capacity_selector_is_refused_naming_the_key() -> None:
    with pytest.raises(MetadataError, match="capacitySelector"):
        parse_metadata({"capacitySelector": "up == 1"})


def test_auto_reads_the_kv_series_on_the_capacity_selector() -> None:
    meta = {"selector": 'job="router"', "capacitySelector": 'job="vllm"', "model": "m"}
    expr = range_query(parse_metadata(meta)).expr
    sel = 'job="vllm",model_name="m"'
    assert names.promql(names.PROMQL_KV_USAGE, sel) in expr
    assert names.promql(names.PROMQL_KV_RUNNING, sel) in expr
    assert (
        'sum(vllm:num_requests_waiting_by_reason{reason="capacity",job="vllm",model_name="m"})'
        in expr
    )
    assert names.promql(names.PROMQL_KV_CONFIG, sel) in expr
    for signal in (SIGNAL_KV_USAGE, SIGNAL_KV_RUNNING, SIGNAL_KV_WAITING, SIGNAL_KV_CONFIG):
        assert f'"{SIGNAL_LABEL}", "{signal}"' in expr
    # Without capacitySelector the KV series are read on the selector.
    plain = range_query(parse_metadata({"selector": 'job="x"'})).expr
    assert names.promql(names.PROMQL_KV_USAGE, 'job="x"') in plain


def test_requests_leaves_the_kv_series_out() -> None:
    expr = range_query(parse_metadata({"capacity": "requests"})).expr
    assert names.VLLM_KV_CACHE_USAGE not in expr and names.VLLM_CACHE_CONFIG_INFO not in expr


def _series(signal: str, values: list[tuple[float, str]], **labels: str) -> dict[str, object]:
    return {"metric": {SIGNAL_LABEL: signal, **labels}, "values": values}


def test_kv_from_matrix_reads_the_sums_and_the_cache_size() -> None:
    data = {
        "resultType": "matrix",
        "result": [
            _series("inflight", [(1.0, "4")]),
            _series(SIGNAL_KV_USAGE, [(1.0, "0.7692"), (2.0, "NaN")]),
            _series(SIGNAL_KV_RUNNING, [(1.0, "2")]),
            _series(SIGNAL_KV_WAITING, [(1.0, "2")]),
            _series(SIGNAL_KV_CONFIG, [(1.0, "1")], num_gpu_blocks="40", block_size="128"),
            _series(SIGNAL_KV_CONFIG, [(1.0, "1")], kv_cache_size_tokens="2048"),
        ],
    }
    kv = kv_from_matrix(data)
    assert kv.seen
    assert [(s.t_s, s.value) for s in kv.usage] == [(1.0, 0.7692)]
    assert kv.running[0].value == 2 and kv.waiting_capacity[0].value == 2
    assert kv.tokens_per_replica == 5120


def test_kv_from_matrix_without_kv_series_is_empty() -> None:
    kv = kv_from_matrix({"resultType": "matrix", "result": [_series("inflight", [(1.0, "4")])]})
    assert not kv.seen and kv.tokens_per_replica is None
