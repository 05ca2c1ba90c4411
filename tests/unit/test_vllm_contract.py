"""vLLM's real metric contract: the emulator and ``inflight.names`` against a vLLM release.

``inflight/emulator/vllm_metrics.json`` was read from the pinned vLLM wheel by
``python -m inflight.vllm_contract refresh`` (no network here: the file is committed).
The emulator is read through its own registry, as a scrape would see it. The static reader
itself is tested on small sources below.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from inflight import names
from inflight.emulator import metrics as emulator_metrics
from inflight.emulator.metrics import EngineMetrics, request_tokens_buckets
from inflight.emulator.profile import Profile
from inflight.vllm_contract import contract
from inflight.vllm_contract.static import read_constant, read_metrics

CONTRACT = contract.load()
RELEASE = contract.by_series(CONTRACT)
MAX_MODEL_LEN = Profile().max_model_len  # the emulator's default --max-model-len
# vLLM's bucket family whose bounds it computes at run time from max_model_len (1-2-5)
TOKEN_FAMILY = "bucket family 'request_tokens' has no static default"


def one(series: str) -> dict[str, Any]:
    found = RELEASE.get(series)
    assert found, f"{series} is not registered by vLLM {CONTRACT['vllm_version']}"
    assert len({(m["type"], str(m["labels"])) for m in found}) == 1, f"{series}: ambiguous"
    return found[0]


def emulator_families() -> dict[str, Any]:
    """The emulator's vLLM families as a scraper parses its text exposition."""
    registry = CollectorRegistry()
    EngineMetrics("m", lambda: (1, 2, 0.5), registry, MAX_MODEL_LEN)
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("vllm:")}


def series_of(family: Any) -> str:
    return family.name + "_total" if family.type == "counter" else family.name


# --- the contract file --------------------------------------------------------------------
def test_contract_names_its_release_and_wheel() -> None:
    assert re.fullmatch(r"\d+\.\d+(\.\d+)*", CONTRACT["vllm_version"])
    assert CONTRACT["wheel"].startswith(f"vllm-{CONTRACT['vllm_version']}-")
    assert re.fullmatch(r"[0-9a-f]{64}", CONTRACT["wheel_sha256"])
    assert CONTRACT["refresh"] == f"make vllm-contract VLLM={CONTRACT['vllm_version']}"
    # the engine's scheduler gauges are read from PrometheusStatLogger, not guessed
    assert one(names.VLLM_RUNNING)["scope"] == "PrometheusStatLogger.__init__"


# --- the emulator -------------------------------------------------------------------------
def test_emulator_exposes_only_metrics_of_the_release_with_their_type_labels_help() -> None:
    families = emulator_families()
    assert families, "the emulator exposes no vllm: metric"
    wrong = {}
    for family in families.values():
        want = one(series_of(family))
        labels = sorted({k for s in family.samples for k in s.labels} - {"le"})
        got = {"type": family.type, "labels": labels, "help": family.documentation}
        # an info metric's labels are vLLM's config at run time (unresolved); tests/real_engine
        # compares them with a live scrape
        want_labels = labels if family.name in names.VLLM_INFO_METRICS else want["labels"]
        expected = {"type": want["type"], "labels": sorted(want_labels), "help": want["help"]}
        if got != expected:
            wrong[family.name] = (got, expected)
    assert wrong == {}


def run_time_buckets(series: str) -> list[dict[str, Any]]:
    """The contract's note that ``series``' bounds are computed at run time, if any."""
    return [
        u
        for u in CONTRACT["unresolved"]
        if u.get("name") == series and u["what"] == "buckets" and TOKEN_FAMILY in u["reason"]
    ]


def test_emulator_histograms_use_the_release_default_buckets() -> None:
    token_histograms = set()
    for family in emulator_families().values():
        if family.type != "histogram":
            continue
        bounds = sorted(
            {float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")}
        )
        assert bounds[-1] == float("inf")
        release = one(family.name)["buckets"]
        if release is None:  # vLLM computes them at run time: its 1-2-5 rule
            assert run_time_buckets(family.name), f"{family.name}: no bounds in the contract"
            assert tuple(bounds[:-1]) == request_tokens_buckets(MAX_MODEL_LEN), family.name
            token_histograms.add(family.name)
        else:
            assert tuple(bounds[:-1]) == tuple(release), family.name
    assert token_histograms == {
        names.VLLM_REQUEST_PROMPT_TOKENS,
        names.VLLM_REQUEST_GENERATION_TOKENS,
    }


def test_emulator_reports_every_finished_reason_vllm_creates() -> None:
    # PrometheusStatLogger creates vllm:request_success for every FinishReason up front,
    # so a dashboard sees each reason at 0 before the first request finishes that way.
    reasons = CONTRACT["constants"]["vllm.v1.engine.FINISH_REASON_STRINGS"]
    success = emulator_families()[names.VLLM_REQUEST_SUCCESS.removesuffix("_total")]
    label = names.VLLM_FINISHED_REASON_LABEL
    seen = [s.labels[label] for s in success.samples if s.name.endswith("_total")]
    assert sorted(seen) == sorted(reasons)
    assert set(emulator_metrics.FINISHED_REASONS) == set(reasons)


def test_emulator_emulates_every_vllm_metric_names_lists() -> None:
    assert {series_of(f) for f in emulator_families().values()} == set(names.VLLM_METRICS) | set(
        names.VLLM_INFO_METRICS
    )


# --- inflight.names -----------------------------------------------------------------------
def test_every_vllm_name_in_names_exists_in_the_release_with_its_type() -> None:
    declared = {v for k, v in vars(names).items() if k.startswith("VLLM_") and isinstance(v, str)}
    metric_names = {v for v in declared if v.startswith("vllm:")}
    listed = {**names.VLLM_METRICS, **names.VLLM_INFO_METRICS}
    assert metric_names == set(listed), "a VLLM_* name is missing from VLLM_METRICS"
    for series, kind in listed.items():
        assert one(series)["type"] == kind, series


def test_vllm_label_names_are_the_release_labels() -> None:
    for series in names.VLLM_METRICS:
        labels = one(series)["labels"]
        assert labels[:2] == [names.VLLM_MODEL_LABEL, names.VLLM_ENGINE_LABEL], series
    assert names.VLLM_FINISHED_REASON_LABEL in one(names.VLLM_REQUEST_SUCCESS)["labels"]


@pytest.mark.parametrize(
    "template",
    [n for n in dir(names) if n.startswith("PROMQL_") and "vllm:" in getattr(names, n)],
)
def test_promql_reads_only_vllm_names_of_the_release(template: str) -> None:
    # The scaler's ``source: vllm`` (PROMQL_L_VLLM, PROMQL_VLLM_DOWN) and, with
    # names.VLLM_WAITING, the vllm-waiting control plane.
    used = set(re.findall(r"vllm:[a-z_][a-z0-9_:]*", getattr(names, template)))
    # vllm:cache_config_info (PROMQL_KV_CONFIG, the KV dimension's cache size) is an info
    # metric: its labels are the engine's configuration (names.VLLM_INFO_METRICS).
    assert used and used <= set(names.VLLM_METRICS) | set(names.VLLM_INFO_METRICS)
    assert all(one(n)["type"] == "gauge" for n in used)


def test_queue_signal_used_by_vllm_waiting_is_a_release_gauge() -> None:
    assert names.VLLM_WAITING == "vllm:num_requests_waiting"
    assert one(names.VLLM_WAITING)["type"] == "gauge"


# --- the static reader --------------------------------------------------------------------
LOGGER = """
from prometheus_client import Counter, Gauge, Histogram
from pkg.buckets import histogram_buckets
from pkg.engine import REASONS

PREFIX = "vllm:"

class Logger:
    _gauge_cls = Gauge
    _counter_cls = Counter

    def __init__(self, config, extra_labels):
        labelnames = ["model_name", "engine"]
        self._gauge_cls(name=PREFIX + "running", documentation="R.", labelnames=labelnames)
        Counter(f"{PREFIX}tokens_total", "T.", labelnames + ["source"])
        Histogram("vllm:ttft_seconds", "H.", buckets=histogram_buckets("ttft"))
        Histogram("vllm:prompt_tokens", "P.", buckets=histogram_buckets("tokens"))
        if config.spec:
            specs = [("vllm:a", "A."), ("vllm:b", "B.")]
            _ = [self._counter_cls(name=n, documentation=d) for n, d in specs]
        self._gauge_cls(name="vllm:x", documentation="X.", labelnames=extra_labels)
        self._gauge_cls(name=config.name, documentation="?")
        kind = self._counter_cls
        kind(**config.kwargs)
"""
BUCKETS = '_STATIC_FAMILY_DEFAULTS = {"ttft": (0.1, 1.0)}\nOTHER = "vllm:not_registered"\n'


def test_reader_resolves_constants_fstrings_loops_and_bucket_families() -> None:
    reading = read_metrics(
        {"pkg/logger.py": LOGGER, "pkg/buckets.py": BUCKETS, "pkg/engine.py": ""}
    )
    got = {m.name: (m.type, m.labels, m.help, m.buckets, m.only_if) for m in reading.metrics}
    assert got["vllm:running"] == ("gauge", ("model_name", "engine"), "R.", None, ())
    assert got["vllm:tokens_total"][:2] == ("counter", ("model_name", "engine", "source"))
    assert got["vllm:ttft_seconds"][3] == (0.1, 1.0)
    assert got["vllm:a"] == ("counter", (), "A.", None, ("config.spec",))
    assert got["vllm:b"][2] == "B."
    family = {m.name: (m.family, m.series) for m in reading.metrics}
    assert family["vllm:tokens_total"] == ("vllm:tokens", "vllm:tokens_total")
    assert family["vllm:running"] == ("vllm:running", "vllm:running")
    assert ("vllm:not_registered", "pkg/buckets.py:2") in reading.other_names


def test_reader_lists_what_it_cannot_resolve_with_a_reason() -> None:
    reading = read_metrics({"pkg/logger.py": LOGGER, "pkg/buckets.py": BUCKETS})
    why = {(u.name, u.what): u.reason for u in reading.unresolved}
    assert "parameter of Logger.__init__" in why[("vllm:x", "labels")]
    assert "no static default" in why[("vllm:prompt_tokens", "buckets")]
    by_expr = {u.expr: u.reason for u in reading.unresolved if u.what == "name"}
    assert any("computed at run time: config.name" in r for r in by_expr.values())
    assert "chosen at run time" in by_expr["kind(**config.kwargs)"]
    # a metric whose labels are unknown is listed with labels None, never guessed
    assert {m.name: m.labels for m in reading.metrics}["vllm:x"] is None


def test_read_constant_names_what_is_missing() -> None:
    src = {"pkg/engine/__init__.py": 'REASONS = ("stop", "length")\n'}
    assert read_constant(src, "pkg.engine", "REASONS") == ["stop", "length"]
    with pytest.raises(ValueError, match=r"pkg\.engine\.NOPE: no such module constant"):
        read_constant(src, "pkg.engine", "NOPE")
