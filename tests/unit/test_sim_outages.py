"""``inflight sim --routers N --router-down FROM:TO``: a router target Prometheus cannot
scrape, simulated, and what the scaler and a peer do meanwhile (issue 26, item 6)."""

from __future__ import annotations

import argparse
import dataclasses
import random

import pytest

from inflight.sim import outages
from inflight.sim.core import SimConfig, simulate
from inflight.sim.scrapes import RouterDown
from inflight.workload.trace import PlannedRequest


def test_spans_are_parsed_and_bad_ones_named() -> None:
    assert outages.parse_span("200:450") == RouterDown(200.0, 450.0)
    for bad, why in (
        ("200", "expected FROM:TO"),
        ("a:b", "expected FROM:TO"),
        ("450:200", "FROM must be before TO"),
        ("-5:10", "FROM must be ≥ 0"),
        ("0:inf", "expected FROM:TO"),
    ):
        with pytest.raises(ValueError, match=f"--router-down: {why}"):
            outages.parse_span(bad)


def test_the_flags_go_into_the_config_and_a_bad_count_is_named() -> None:
    base = SimConfig(policy="saturation", max_replicas=4)
    args = argparse.Namespace(routers=2, router_down=["200:450"])
    config = outages.apply(base, args)
    assert (config.routers, config.router_down) == (2, (RouterDown(200.0, 450.0),))
    assert outages.apply(base, argparse.Namespace(routers=1, router_down=[])) is base
    with pytest.raises(ValueError, match="--routers must be ≥ 1"):
        outages.apply(base, argparse.Namespace(routers=0, router_down=[]))
    with pytest.raises(ValueError, match="--routers must be ≥ 1"):
        dataclasses.replace(base, routers=0)


def _steady(rate: float, until_s: float) -> list[PlannedRequest]:
    rng = random.Random(5)
    out: list[PlannedRequest] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= until_s:
            return out
        out.append(PlannedRequest(t_s=t, prompt_tokens=3000, max_tokens=300))


@pytest.mark.parametrize("routers", [1, 2])
def test_the_scaler_never_lowers_the_count_while_a_router_is_down_and_kpa_does_on_half(
    routers: int,
) -> None:
    """Steady load (L about 6: 2 to 3 replicas). One of two router targets down: the
    scaler's window is partial and holds; Knative's KPA reads half of L and scales down.
    The only target down: no L at all; the scaler holds (the KPA, reading nothing, lets
    its window empty out and scales down too: the comparison's table shows it)."""
    span = RouterDown(300.0, 700.0)
    planned = _steady(1.0, 800.0)
    rows = {}
    for policy in ("saturation", "kpa"):
        config = SimConfig(
            policy=policy, max_replicas=4, routers=routers, router_down=(span,), seed=1
        )
        rows[policy] = outages.during(simulate(config, planned, 800.0), [span])
    (sat,), (kpa,) = rows["saturation"], rows["kpa"]
    assert sat["desired_at_start"] >= 2
    assert sat["scale_downs"] == 0 and sat["desired_min"] == sat["desired_at_start"]
    assert kpa["desired_min"] < kpa["desired_at_start"], kpa
    table = outages.markdown(rows, routers)
    assert "| saturation | 300–700 |" in table
    assert ("1 of 2 router targets" if routers == 2 else "the only router target") in table


def test_compare_refuses_router_targets_on_a_closed_loop_and_bad_spans(tmp_path, capsys) -> None:
    from inflight.sim.cli import main

    out = str(tmp_path / "out")
    assert main(["sim", "compare", "--scenario", "sweep", "--router-down", "1:2",
                 "--out-dir", out]) == 2  # fmt: skip
    assert "--routers, --router-down: open-loop workloads only" in capsys.readouterr().err
    assert main(["sim", "compare", "--scenario", "ramp", "--router-down", "9:2",
                 "--out-dir", out]) == 2  # fmt: skip
    assert "--router-down: FROM must be before TO" in capsys.readouterr().err
