"""Issue 40: each run's results record the fully resolved trigger settings, and a run that
kept them is re-simulated with them, whatever today's defaults are (``as_recorded``'s table
of old defaults serves only runs from before, and is frozen)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from external_scaler import metadata as scaler_metadata_module
from inflight import names
from inflight.control.trigger import SET_BY_THE_STACK, policy_settings, resolved
from inflight.planes.policy_catalogue import as_recorded, as_run, parse_policies
from inflight.sim.calibrate import calibrate
from inflight.sim.cli import main
from inflight.statedir import StackInfo, StateDir, read_stack


def test_resolved_names_every_key_at_its_value_or_default() -> None:
    got = resolved({names.META_TARGET_SATURATION: "0.8"})
    assert set(got) == set(names.METADATA_DEFAULTS)
    assert got[names.META_TARGET_SATURATION] == "0.8"
    assert got[names.META_FLOOR_FRACTION] == names.METADATA_DEFAULTS[names.META_FLOOR_FRACTION]


def test_policy_settings_leave_the_stacks_own_keys_out() -> None:
    kept = dict(policy_settings(resolved({names.META_TIME_SCALE: "0.1"})))
    assert not set(kept) & SET_BY_THE_STACK
    assert kept[names.META_FLOOR_FRACTION] == names.METADATA_DEFAULTS[names.META_FLOOR_FRACTION]


def test_a_named_key_stays_as_named_and_an_old_run_goes_through_the_table() -> None:
    (policy,) = parse_policies("saturation[floorFraction=0.3]", start_replicas=1)
    recorded = resolved({names.META_FLOOR_FRACTION: "0.6", names.META_STARTUP_S: "45"})
    ran = dict(as_run(policy, recorded, "2026-12-08T00:00:00+00:00").metadata)
    assert ran[names.META_FLOOR_FRACTION] == "0.3" and ran[names.META_STARTUP_S] == "45"
    old = "2026-12-01T12:00:00+00:00"  # before the floor: no settings kept, the table's
    assert as_run(policy, None, old) == as_recorded(policy, old)
    (kpa,) = parse_policies("kpa", start_replicas=1)
    assert as_run(kpa, recorded, old) == kpa


def test_stack_json_keeps_the_settings_and_reads_an_older_one(tmp_path: Path) -> None:
    settings = resolved({names.META_POLICY: "saturation"})
    info = StackInfo(1, "http://r", None, "127.0.0.1:1", 1.0, "saturation", 0.0, settings)
    state = StateDir(tmp_path)
    state.write_stack(info)
    assert read_stack(tmp_path / "stack.json") == info
    doc = json.loads((tmp_path / "stack.json").read_text())
    del doc["trigger_metadata"]  # written before the settings were kept
    (tmp_path / "stack.json").write_text(json.dumps(doc))
    assert read_stack(tmp_path / "stack.json").trigger_metadata is None


def _compare(out: Path) -> dict[str, Any]:
    argv = ["sim", "compare", "--arrivals", "poisson:0:2,300:6,600:6,900:1,1200:1",
            "--policies", "saturation,kpa", "--seeds", "1", "--no-frontier",
            "--max-replicas", "6", "--out-dir", str(out)]  # fmt: skip
    assert main(argv) == 0
    body: dict[str, Any] = json.loads((out / "comparison.json").read_text())
    return body


def test_a_comparison_records_what_its_scaler_ran_with(tmp_path: Path) -> None:
    body = _compare(tmp_path / "c")
    kept = body["runs"]["saturation"]["trigger_metadata"]
    assert set(kept) == set(names.METADATA_DEFAULTS)
    assert kept[names.META_POLICY] == "saturation" and kept[names.META_MAX_REPLICA_COUNT] == "6"
    assert "trigger_metadata" not in body["runs"]["kpa"]  # a peer runs no trigger of ours


def test_a_run_that_kept_its_settings_resimulates_the_same_after_a_default_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = tmp_path / "c"
    body = _compare(live)
    before = body["runs"]["saturation"]
    # The SLO stage's default changes after the run (off): the run kept 2 s, so it reads the
    # same.
    monkeypatch.setitem(names.METADATA_DEFAULTS, names.META_SLO_TTFT_S, "0")
    scaler_metadata_module._parsed.cache_clear()
    try:
        row = calibrate([live], ["saturation"])["policies"]["saturation"]
        assert row["attainment_diff_points"] == pytest.approx(0.0, abs=1e-6)
        assert row["replica_seconds_diff"] == pytest.approx(0.0, abs=1e-6)
        # Without its settings the run would be re-simulated at today's (changed) default.
        del body["runs"]["saturation"]["trigger_metadata"]
        (live / "comparison.json").write_text(json.dumps(body))
        row = calibrate([live], ["saturation"])["policies"]["saturation"]
        assert abs(row["replica_seconds_diff"]) > 0.01, before["replica_seconds"]
    finally:
        scaler_metadata_module._parsed.cache_clear()


def test_a_live_sweep_that_kept_its_settings_is_resimulated_with_them(tmp_path: Path) -> None:
    # The seed's committed live sweep, its saturation run given recorded settings that differ
    # from today's defaults (as a run recorded under other defaults would carry): the
    # re-simulation follows the record, not today's defaults.
    import gzip
    import shutil

    src = Path(__file__).resolve().parents[2] / "results" / "2026-11-29-compare"
    live = tmp_path / "sweep"
    shutil.copytree(src, live)
    before = calibrate([live], ["saturation"])["policies"]["saturation"]
    run_file = live / "saturation.json.gz"
    doc = json.loads(gzip.decompress(run_file.read_bytes()))
    doc["stack"]["stack_info"]["trigger_metadata"] = resolved(
        {names.META_POLICY: "saturation", names.META_TARGET_SATURATION: "0.25"}
    )
    run_file.write_bytes(gzip.compress(json.dumps(doc).encode()))
    after = calibrate([live], ["saturation"])["policies"]["saturation"]
    assert after != before  # a quarter of the slots per replica: it scales at lower load
