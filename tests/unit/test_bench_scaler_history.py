"""``inflight bench scaler``'s backfilled history (inflight/bench/components/scaler_history.py):
the OpenMetrics promtool reads, and the live target that continues it. The backfill itself
runs against Debian's promtool and Prometheus in tests/component/test_bench_components.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inflight import names
from inflight.bench.components import scaler_history as history
from inflight.procs import ProcessError

INSTANCE = "127.0.0.1:9999"


def test_every_series_the_default_trigger_reads_is_in_the_history() -> None:
    text = history.openmetrics(history.states(5), end_s=1_000_000.0, instance=INSTANCE)
    wanted = {
        names.ROUTER_INFLIGHT, names.ROUTER_REQUESTS_RECEIVED, names.ROUTER_ENDPOINTS, "up",
        names.VLLM_KV_CACHE_USAGE, names.VLLM_RUNNING, names.VLLM_WAITING_BY_REASON,
        names.VLLM_CACHE_CONFIG_INFO, names.ROUTER_ENDPOINT_INFLIGHT_TOKENS,
        names.ROUTER_QUEUED_TOKENS, names.ROUTER_ENDPOINT_KV_TOKENS,
    }  # fmt: skip
    found = {line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
    assert found == wanted
    assert text.endswith("# EOF\n")
    assert 'job="router"' in text and f'instance="{INSTANCE}"' in text


def test_each_family_is_typed_once_and_its_samples_are_together_in_time_order() -> None:
    """promtool refuses a family split in two or a series going back in time."""
    text = history.openmetrics(history.states(30), end_s=1_000_000.0, instance=INSTANCE)
    families: list[str] = []
    last_t: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            families.append(line.split()[2])
            continue
        if line == "# EOF":
            continue
        series, _value, t = line.rsplit(" ", 2)
        family = series.split("{")[0].removesuffix("_total")
        assert family == families[-1], f"{family} outside its family's block"
        assert float(t) > last_t.get(series, float("-inf")), series
        last_t[series] = float(t)
    assert len(families) == len(set(families))
    times = sorted({t for t in last_t.values()})
    assert times == [1_000_000.0]  # every series ends at end_s, one sample a second
    assert text.count(f"{names.ROUTER_INFLIGHT}{{") == 30


def test_the_live_target_carries_the_same_series_without_the_scrape_labels() -> None:
    state = history.states(1)[0]
    body = history.exposition(state)
    assert "job=" not in body and "instance=" not in body and not body.startswith("up{")
    history_names = {
        line.split("{")[0]
        for line in history.openmetrics([state], 1.0, INSTANCE).splitlines()
        if not line.startswith("#")
    }
    assert {line.split("{")[0] for line in body.splitlines()} == history_names - {"up"}
    inflight = re.search(rf"^{names.ROUTER_INFLIGHT}\{{\}} (\S+)$", body, re.M)
    assert inflight is not None and float(inflight.group(1)) == state.inflight


def test_a_missing_promtool_is_named(tmp_path: Path) -> None:
    with pytest.raises(ProcessError, match="no-promtool-here is not an executable"):
        history.backfill(tmp_path / "tsdb", "# EOF\n", promtool=str(tmp_path / "no-promtool-here"))
