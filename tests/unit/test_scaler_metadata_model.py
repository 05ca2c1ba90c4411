"""The ``model`` metadata key: one model pool's L (router/model_pools.py), ``up`` left whole."""

from __future__ import annotations

import pytest

from external_scaler.errors import MetadataError
from external_scaler.metadata import parse_metadata
from external_scaler.sources.promql import model_selector, range_query


def test_model_selects_the_pools_series_but_not_up() -> None:
    spec = parse_metadata({"selector": 'job="router"', "model": "llama-3"})
    assert spec.model == "llama-3"
    expr = range_query(spec).expr
    assert 'router_inflight_requests{job="router",model="llama-3"}' in expr
    assert 'router_endpoints{state="ready",job="router",model="llama-3"}' in expr
    # A router target that is down makes this model's L partial too: up is read whole.
    assert 'up{job="router"} == 0' in expr
    assert 'up{job="router",model' not in expr


def test_vllm_source_selects_model_name() -> None:
    spec = parse_metadata({"source": "vllm", "model": "m"})
    assert model_selector(spec) == 'model_name="m"'
    assert 'vllm:num_requests_running{model_name="m"}' in range_query(spec).expr


def test_no_model_is_the_whole_router() -> None:
    spec = parse_metadata({})
    assert spec.model == ""
    assert "router_inflight_requests{}" in range_query(spec).expr


@pytest.mark.parametrize("bad", ["a\nb", "x" * 300])
def test_a_bad_model_names_the_key(bad: str) -> None:
    with pytest.raises(MetadataError) as info:
        parse_metadata({"model": bad})
    assert info.value.key == "model"
