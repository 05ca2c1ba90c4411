"""The simulator's Prometheus answers the scaler's range query as a real Prometheus does.

``inflight sim`` never runs Prometheus: ``inflight.sim.scrapes.Scrapes.matrix`` evaluates
the scaler's range query (``external_scaler.sources.promql.range_query``) on the simulated
scrapes, a hand-written twin of PromQL. Here one scraped history (``tests/prom_feed.py``)
is recorded in the simulator's ``Scrapes`` and written into Debian's Prometheus 2.42 as its
scrape loop would have stored it; the default trigger's query (the one ``inflight sim``
and ``inflight up`` send, ``inflight.control.trigger.scaler_metadata``), under ``capacity``
``auto`` (L, arrivals, ready, down, frozen, vLLM's KV series and the router's token
demand) and ``requests``, runs as a range query on both, and the two answers are compared
step by step, series by series; then the windows the scaler's own code builds from them
(``observed_from_matrix``) and its decisions (``external_scaler.decision.costed_decision``).

The history: three router targets sharing the router's load, a counter reset (the router
restarted), replicas appearing (their router endpoints first with an unknown KV capacity,
0, which the capacity's ``> 0`` drops), two stretches without scrapes (Prometheus down:
one shorter than its 5-minute lookback, whose steps repeat the last sample and count as
``frozen``, one longer, where L has no sample at all), and, with staleness markers, a
router target failing its scrapes (mid-window, and at the window's end: ``down``, a partial
window) and a replica removed. Two ways in:

* ``promtool tsdb create-blocks-from openmetrics`` (as ``inflight bench scaler`` backfills
  its history): the history without the events that write staleness markers, which
  OpenMetrics text cannot carry;
* Prometheus' remote-write receiver: the whole history, markers included.

Values are compared within ``REL_TOL``: where the real query sums several series (a share
of L per router target, a replica's KV usage) Prometheus adds them in its own order, and
the simulator multiplies (``value × up ÷ routers``) or adds in another; float addition is
not associative, so the last bits may differ. Steps (their timestamps, which steps have
a sample) and labels are compared exactly.

Checked to fail when the twin diverges: each of these, made by hand in
``inflight/sim/scrapes.py`` and then undone, failed the test(s) whose history reaches it,
naming the steps and both values: the lookback ``(T − 5m, T]`` (as it was until this test
found it: Prometheus 2.42 reads a sample exactly 5 minutes old); ``LOOKBACK_DELTA_S`` 300
→ 310; the frozen test ``>`` made ``>=``; a down target's share left in L
(``_router_value`` returning the whole value); a down target's counter still answered;
the target memory 1 h → 30 s (``down`` lost); ``kv_waiting`` read from every waiting
request instead of those waiting for capacity.
"""

from __future__ import annotations

import json
import math
import random
import stat
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from external_scaler.decision import costed_decision
from external_scaler.metadata import ScalerSpec, parse_metadata
from external_scaler.sources import Observed
from external_scaler.sources.prometheus import observed_from_matrix
from external_scaler.sources.promql import (
    SIGNAL_ARRIVALS,
    SIGNAL_DOWN,
    SIGNAL_KV_CONFIG,
    SIGNAL_LABEL,
    RangeQuery,
    range_query,
)
from inflight import names
from inflight.bench.components.scaler_history import backfill
from inflight.control.capacity import token_capacity
from inflight.control.trigger import SCRAPE_INTERVAL_S, scaler_metadata
from inflight.prom import PrometheusServer, find_prometheus
from inflight.sim.scrapes import RouterDown
from tests import prom_feed as feed

REL_TOL = 1e-12
ROUTERS = 3
SPAN_S = 2400  # seconds of scrapes; the query's window (1,810 s) ends at the last one
GAPS = ((900, 960), (1700, 2040))  # Prometheus down: no scrape strictly inside
DOWN = ((1200, 1260, 1), (2330, SPAN_S + 1, 2))  # router target r fails [from, to) (s)
REPLICAS = {"replica-0": (650, None), "replica-1": (800, None), "replica-2": (1300, 1600)}


def history(t0: float, staleness: bool) -> list[feed.Scrape]:
    """The scraped history from ``t0``: seeded values, the events of the module docstring
    (a replica removed only ``staleness``)."""
    rng = random.Random(37)
    out: list[feed.Scrape] = []
    received = 0.0
    step = round(SCRAPE_INTERVAL_S)
    for rel in range(0, SPAN_S + 1, step):
        if any(a < rel < b for a, b in GAPS):
            continue
        replicas: dict[str, feed.Replica] = {}
        starting = 0
        for name, (since, until) in REPLICAS.items():
            if rel < since or (staleness and until is not None and rel >= until):
                continue
            new = rel < since + 2 * step  # its first two scrapes: starting, capacity unknown
            starting += new
            running = float(rng.randint(0, 4))
            replicas[name] = feed.Replica(
                usage=round(rng.uniform(0.0, 1.0), 4),
                running=running,
                waiting_capacity=float(rng.randint(0, 2)),
                waiting_deferred=float(rng.randint(0, 1)),
                cache_blocks=1000,
                block_size=16,
                endpoint_tokens=running * 1500 + rng.randint(0, 99),
                endpoint_kv_tokens=0.0 if new else 16000.0,
            )
        received = 3.0 if rel == 1100 else received + rng.randint(0, 7)  # 1100: a restart
        inflight = float(max(0, round(8 + 6 * math.sin(rel / 200) + rng.gauss(0, 2))))
        ready = float(len(replicas) - starting)
        out.append(
            feed.Scrape(
                t_s=t0 + rel,
                inflight=inflight,
                queued=max(0.0, inflight - 4 * ready),
                received=received,
                ready=ready,
                queued_tokens=float(rng.randint(0, 3000)),
                replicas=replicas,
                after_restart=any(rel == b for _, b in GAPS),
            )
        )
    return out


def router_down(t0: float) -> tuple[RouterDown, ...]:
    """:data:`DOWN` in unix seconds."""
    return tuple(RouterDown(t0 + a, t0 + b, router=r) for a, b, r in DOWN)


def specs() -> list[ScalerSpec]:
    """The default trigger as the simulator and ``inflight up`` send it, both capacities."""
    base = scaler_metadata(4, 1.0, "saturation")
    return [
        parse_metadata({**base, names.META_CAPACITY: capacity}) for capacity in ("auto", "requests")
    ]


@pytest.fixture
def t0() -> float:
    """An hour and a bit ago, whole seconds (the query's steps are whole seconds)."""
    return float(int(time.time()) // 10 * 10 - 3 * 3600)


@pytest.fixture
def prometheus_dir(tmp_path: Path) -> Iterator[Path]:
    if find_prometheus() is None:
        pytest.fail("prometheus not found: apt-get install -y --no-install-recommends prometheus")
    yield tmp_path / "prometheus"


def start(server: PrometheusServer, started: list[PrometheusServer]) -> PrometheusServer:
    started.append(server)
    return server.start()


@pytest.fixture
def servers() -> Iterator[list[PrometheusServer]]:
    started: list[PrometheusServer] = []
    yield started
    for server in started:
        server.stop()
        assert server.process is None or not server.process.alive(), "prometheus survived stop"


def range_answer(base_url: str, query: RangeQuery, start_s: float, end_s: float) -> dict[str, Any]:
    """The range query's ``data`` as the live source asks it (its parts' answers together,
    the same start, end and step text: ``PrometheusSource._range``)."""
    result: list[dict[str, Any]] = []
    for expr in query.requests:
        params = {
            "query": expr,
            "start": f"{start_s:.3f}",
            "end": f"{end_s:.3f}",
            "step": f"{query.step_s:g}",
        }
        url = f"{base_url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=60) as resp:
            payload = json.load(resp)
        assert payload["status"] == "success", payload
        result += payload["data"]["result"]
    return {"resultType": "matrix", "result": result}


Key = tuple[str, ...]


def steps_by_series(data: dict[str, Any]) -> dict[Key, dict[int, float]]:
    """Each series of an answer by its signal (and job/instance for the per-target ones),
    its samples by step (ms). ``kv_config`` (one series per replica live, one in the
    simulator, read only for its labels): at each step, the largest cache any states."""
    out: dict[Key, dict[int, float]] = {}
    for item in data["result"]:
        labels = item["metric"]
        signal = labels[SIGNAL_LABEL]
        per_target = signal in (SIGNAL_ARRIVALS, SIGNAL_DOWN)
        key = (signal, labels["job"], labels["instance"]) if per_target else (signal,)
        steps = out.setdefault(key, {})
        for t, v in item["values"]:
            t_ms = round(float(t) * 1000)
            if signal == SIGNAL_KV_CONFIG:
                size = float(token_capacity(labels) or 0)
                steps[t_ms] = max(size, steps.get(t_ms, 0.0))
            else:
                assert t_ms not in steps, f"two series answer {key} at {t_ms} ms: {labels}"
                steps[t_ms] = float(v)
    return out


def differences(
    sim: dict[Key, dict[int, float]], real: dict[Key, dict[int, float]], start_s: float
) -> list[str]:
    """Every step where the two answers differ: a step only one has, or values apart."""
    out: list[str] = []
    for key in sorted(set(sim) | set(real)):
        a, b = sim.get(key, {}), real.get(key, {})
        for t_ms in sorted(set(a) | set(b)):
            va, vb = a.get(t_ms), b.get(t_ms)
            if va is None or vb is None or not math.isclose(va, vb, rel_tol=REL_TOL):
                rel = t_ms / 1000 - start_s
                out.append(f"{'/'.join(key)} at start+{rel:g} s: simulator {va}, Prometheus {vb}")
    return out


def assert_close(sim: object, real: object, path: str = "observed") -> None:
    """``sim`` equals ``real`` field by field, floats within REL_TOL."""
    if is_dataclass(sim) and not isinstance(sim, type):
        assert type(sim) is type(real), path
        for f in fields(sim):
            assert_close(getattr(sim, f.name), getattr(real, f.name), f"{path}.{f.name}")
    elif isinstance(sim, tuple):
        assert isinstance(real, tuple) and len(sim) == len(real), f"{path}: {sim} vs {real}"
        for i, (x, y) in enumerate(zip(sim, real, strict=True)):
            assert_close(x, y, f"{path}[{i}]")
    elif isinstance(sim, float):
        assert isinstance(real, float) and math.isclose(sim, real, rel_tol=REL_TOL), (
            f"{path}: simulator {sim}, Prometheus {real}"
        )
    else:
        assert sim == real, f"{path}: simulator {sim!r}, Prometheus {real!r}"


def compare(
    base_url: str, scraped: Sequence[feed.Scrape], down: Sequence[RouterDown]
) -> tuple[set[str], Observed]:
    """Both answers alike, both windows and decisions alike, for each capacity; the signals
    the answers had and the window under ``capacity`` ``auto``, for the caller to check
    its history reached them."""
    sim = feed.sim_scrapes(scraped, ROUTERS, down)
    observed: list[Observed] = []
    seen: set[Key] = set()
    for spec in specs():
        query = range_query(spec)
        start_s, end_s = query.bounds(scraped[-1].t_s + 0.4)
        sim_data = sim.matrix(query, start_s, end_s)
        real_data = range_answer(base_url, query, start_s, end_s)
        sim_steps, real_steps = steps_by_series(sim_data), steps_by_series(real_data)
        diffs = differences(sim_steps, real_steps, start_s)
        assert not diffs, f"capacity {spec.capacity}: {len(diffs)} step(s) differ:\n" + "\n".join(
            diffs[:25]
        )
        seen |= set(real_steps)
        sim_obs = observed_from_matrix(sim_data, query, start_s, end_s)
        real_obs = observed_from_matrix(real_data, query, start_s, end_s)
        assert_close(sim_obs, real_obs)
        observed.append(real_obs)
        assert_close(
            costed_decision(spec, sim_obs).decision,
            costed_decision(spec, real_obs).decision,
            "decision",
        )
    return {key[0] for key in seen}, observed[0]


#: The signals every history reaches (a contract over empty answers would be none).
SIGNALS = {"inflight", "arrivals", "ready", "frozen", "kv_usage", "kv_running", "kv_waiting"}
SIGNALS |= {"kv_config", "tok_inflight", "tok_queued", "tok_capacity"}


def test_backfilled_prometheus_answers_as_the_simulator(
    prometheus_dir: Path, servers: list[PrometheusServer], t0: float
) -> None:
    scraped = history(t0, staleness=False)
    stored = feed.stored_series(scraped, ROUTERS, ())
    assert not any(v is None for samples in stored.values() for _, v in samples)
    server = PrometheusServer(prometheus_dir, jobs={})  # scrapes nothing: only the history
    backfill(server.data_dir / "tsdb", feed.openmetrics(stored))
    signals, _ = compare(start(server, servers).url, scraped, ())
    assert signals == SIGNALS


def test_remote_written_prometheus_with_staleness_answers_as_the_simulator(
    prometheus_dir: Path, servers: list[PrometheusServer], t0: float, tmp_path: Path
) -> None:
    # PrometheusServer starts a fixed command line; this one adds the receiver's flag.
    wrapper = tmp_path / "prometheus-remote-write"
    wrapper.write_text(
        f'#!/bin/sh\nexec {find_prometheus()} "$@" --web.enable-remote-write-receiver\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    scraped = history(t0, staleness=True)
    down = router_down(t0)
    stored = feed.stored_series(scraped, ROUTERS, down)
    markers = sum(v is None for samples in stored.values() for _, v in samples)
    assert markers > 0, "the history writes staleness markers (a router down, a replica gone)"
    server = start(PrometheusServer(prometheus_dir, jobs={}, binary=str(wrapper)), servers)
    feed.remote_write(server.url, stored)
    signals, observed = compare(server.url, scraped, down)
    assert signals == SIGNALS | {"down"}
    # router-2 down at the end: the window is partial (its frozen steps only dropped)
    assert [p.kind for p in observed.window.partial] == [names.SCALER_ERROR_SOURCE_PARTIAL]
