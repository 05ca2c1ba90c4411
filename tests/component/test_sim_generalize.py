"""``inflight sim generalize`` end to end: two tiny draws through ``inflight sim compare``
(child processes, two at once), the report's fields, and an out-dir never overwritten."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from inflight.bench import proctree
from inflight.procs import inflight_command
from inflight.sim.draws import draw
from inflight.sim.generalize import REPORT_SEEDS_FROM
from tests.support import wait_for

SEEDS = [REPORT_SEEDS_FROM + 3, REPORT_SEEDS_FROM + 4]
ARGS = [
    "sim", "generalize", "--draws", "2", "--seeds-from", str(SEEDS[0]),
    "--purpose", "report", "--max-replicas", "3", "--duration-s", "90", "--warmup-s", "60",
    "--peers", "kpa", "--jobs", "2",
]  # fmt: skip


def _run(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        inflight_command(*ARGS, *extra), capture_output=True, text=True, timeout=300, check=False
    )


def test_generalize_reports_the_gap_distribution_of_every_draw(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    done = _run("--out-dir", str(out))
    assert done.returncode == 0, done.stderr
    doc = json.loads((out / "generalize.json").read_text())
    meta = doc["meta"]
    assert meta["purpose"] == "report" and meta["seeds"] == SEEDS
    assert meta["mode"] == "warm" and meta["policy"] == "saturation" and meta["peers"] == ["kpa"]
    assert set(doc["summary"]) == {"saturation", "kpa"}
    for name in ("saturation", "kpa"):
        s = doc["summary"][name]
        assert s["draws"] == 2
        assert s["gap_worst"] <= s["gap_p10"] <= s["gap_median"]
        assert 0 <= s["share_dominated"] <= 1
    assert 0 <= doc["summary"]["kpa"]["beaten_by_saturation"] <= 1
    assert [r["draw"]["seed"] for r in doc["draws"]] == SEEDS
    for row in doc["draws"]:
        seed = row["draw"]["seed"]
        expected = draw(seed, 3, duration_s=90.0, warmup_s=60.0)
        assert row["draw"] == expected.describe()  # the draw is the seed's, as drawn here
        folder = out / row["dir"]
        comparison = json.loads((folder / "compare" / "comparison.json").read_text())
        # the fixed fleets 1..3 judged on the same requests: the static frontier
        assert set(comparison["frontier"]["fleets"]) == {"fixed:1", "fixed:2", "fixed:3"}
        assert comparison["scenario"]["requests_planned"] == len(expected.requests)
        for name, fig in row["policies"].items():
            run = comparison["runs"][name]
            assert fig["frontier_gap_points"] == round(100 * run["frontier_gap"], 3)
            assert fig["dominated_by_fixed"] == run["dominated_by_fixed"]
        fleets = comparison["frontier"]["fleets"].values()
        assert row["best_fixed_attainment"] == max(f["slo_attainment"] for f in fleets)
        assert row["command"][:3] == ["inflight", "sim", "compare"]
    # the summary again over the draws some fixed fleet meets for half the requests
    kept = [r for r in doc["draws"] if r["best_fixed_attainment"] >= 0.5]
    assert doc["meta"]["meetable_attainment"] == 0.5
    assert doc["summary_meetable"]["saturation"]["draws"] == len(kept)
    gaps = [r["policies"]["saturation"]["frontier_gap_points"] for r in kept]
    if kept:  # the mean the choose draws are judged by, and the draws by shape
        assert doc["summary_meetable"]["saturation"]["gap_mean"] == round(sum(gaps) / len(gaps), 3)
    shapes = {r["draw"]["shape"] for r in kept}
    assert set(doc["meetable_by_shape"]) == shapes
    assert sum(s["draws"] for s in doc["meetable_by_shape"].values()) == len(kept)
    md = (out / "generalize.md").read_text()
    assert "Purpose: **report**" in md and f"Seeds {SEEDS[0]}–{SEEDS[1]}" in md
    assert f"### The {len(kept)} meetable draws" in md

    before = (out / "generalize.json").read_text()
    again = _run("--out-dir", str(out))  # an existing out-dir is refused, untouched
    assert again.returncode == 2 and "never overwritten" in again.stderr
    assert (out / "generalize.json").read_text() == before


def test_a_seed_of_the_other_purpose_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        inflight_command(*ARGS[:6], "--purpose", "choose", "--out-dir", str(tmp_path / "x")),
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "--purpose choose" in done.stderr
    assert not (tmp_path / "x").exists()


def test_sigterm_stops_the_running_draw_and_starts_no_other(tmp_path: Path) -> None:
    # One draw at a time, each long enough to be caught running: SIGTERM to the command
    # stops its `inflight sim compare` child (its own process group), and no draw not begun
    # by then begins.
    out = tmp_path / "gen"
    argv = [*ARGS[:6], "--purpose", "report", "--max-replicas", "8", "--duration-s", "1200",
            "--peers", "kpa", "--jobs", "1", "--out-dir", str(out)]  # fmt: skip
    proc = subprocess.Popen(
        inflight_command(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        children = wait_for(
            lambda: proctree.descendants(proc.pid), timeout_s=120, what="a draw's child"
        )
        started = sorted(out.glob("draws/*/compare.log"))  # the draws begun by now
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM: every draw's run stopped" in err
    assert not proctree.alive(children)  # reaped before the command exited
    assert started and sorted(out.glob("draws/*/compare.log")) == started  # none began after
    assert not (out / "generalize.json").exists()
