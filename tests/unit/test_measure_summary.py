"""``inflight results summarize`` (inflight.measure.summary): a folder of comparisons as
Markdown tables, on two small rows written here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from inflight.cli import main
from inflight.measure.summary import Options, load_rows, summarize

pytestmark = pytest.mark.unit


def run(att: float, ratio: float, gap: float, dominated=(), **extra) -> dict:
    return {"slo_attainment": att, "replica_seconds_ratio": ratio, "frontier_gap": gap,
            "dominated_by_fixed": list(dominated), **extra}  # fmt: skip


def write(folder: Path, runs: dict, fleets: dict, gz: bool) -> None:
    folder.mkdir(parents=True)
    body = json.dumps({"runs": runs, "frontier": {"fleets": fleets}}).encode()
    if gz:
        (folder / "comparison.json.gz").write_bytes(gzip.compress(body))
    else:
        (folder / "comparison.json").write_bytes(body)


@pytest.fixture
def rows_dir(tmp_path: Path) -> Path:
    d = tmp_path / "held"
    fleets = {"fixed:1": run(0.5, 0.25, 0.0), "fixed:2": run(0.9, 0.5, 0.0)}
    write(d / "spike", {
        "fixed:2": run(0.9, 0.5, 0.0),
        "saturation": run(0.931, 0.6, -0.0451, ["fixed:3", "fixed:2"],
                          misses={"slo_ttft": 4, "slo_tpot": 1},
                          seeds={"1": {"capacity": {"kv_tokens": 3, "decisions": 9}}}),
        "saturation[startupSeconds=100]": run(0.95, 0.55, 0.012),
        "kpa": run(0.8, 0.7, -0.1),
    }, fleets, gz=True)  # fmt: skip
    write(d / "azure-code", {
        "saturation": run(0.999, 0.4, 0.002),
        "saturation[startupSeconds=30]": run(0.94, 0.35, -0.02, ["fixed:2"]),
    }, {"fixed:2": run(1.0, 0.5, 0.0)}, gz=False)  # fmt: skip
    (d / "notes").mkdir()  # no comparison: not a row
    return d


LABELS = {
    "saturation": "default",
    "saturation[startupSeconds=100]": "L",
    "saturation[startupSeconds=30]": "L",
}


def test_a_row_a_workload_a_column_a_label_the_fixed_fleets_left_out(rows_dir: Path) -> None:
    rows = load_rows(rows_dir)
    assert [r.name for r in rows] == ["azure-code", "spike"]  # by name, .gz or not
    text = summarize(rows, "held", Options(labels=LABELS))
    assert text == (
        "| workload | default | L | `kpa` |\n"
        "|---|---|---|---|\n"
        "| `azure-code` | 99.9 % at 0.40, +0.2 | 94.0 % at 0.35, −2.0 ✗2 |  |\n"
        "| `spike` | 93.1 % at 0.60, −4.5 ✗2 | 95.0 % at 0.55, +1.2 | 80.0 % at 0.70, −10.0 |\n"
        "\n"
        "| mean gap, dominated | default | L | `kpa` |\n"
        "|---|---:|---:|---:|\n"
        "| held (2 rows) | −2.15, 1/2 | −0.40, 1/2 | −10.00, 0/1 |\n"
    )


def test_rows_in_a_given_order_turned_round_with_the_frontier(rows_dir: Path) -> None:
    rows = load_rows(rows_dir, ["spike", "azure-code"])
    text = summarize(rows, "held", Options(labels={}, layout="policies", means=False, fleets=True))
    assert text == (
        "| policy | `spike` | `azure-code` |\n"
        "|---|---|---|\n"
        "| saturation | 93.1 % at 0.60, −4.5 ✗2 | 99.9 % at 0.40, +0.2 |\n"
        "| saturation[startupSeconds=100] | 95.0 % at 0.55, +1.2 |  |\n"
        "| kpa | 80.0 % at 0.70, −10.0 |  |\n"
        "| saturation[startupSeconds=30] |  | 94.0 % at 0.35, −2.0 ✗2 |\n"
        "\n"
        "| fleet | `spike` | `azure-code` |\n"
        "|---|---|---|\n"
        "| `fixed:1` | 50.0 % at 0.25 |  |\n"
        "| `fixed:2` | 90.0 % at 0.50 | 100.0 % at 0.50 |\n"
    )


def test_a_fleets_column_the_misses_and_the_rows_below_a_share(rows_dir: Path) -> None:
    options = Options(labels={"saturation": "default"}, means=False, fixed_column="fixed:2",
                      misses=True, below=0.95, below_prefix="azure")  # fmt: skip
    text = summarize(load_rows(rows_dir, ["spike"]), "held", options)
    tables = text.split("\n\n")
    assert tables[0].splitlines()[2].startswith("| `spike` | 90.0 % | 93.1 % at 0.60")
    assert tables[1].splitlines()[2] == "| `spike` | 0/0 | 4/1; KV 3/9 | 0/0 | 0/0 |"
    assert tables[2].splitlines()[0] == "- default: azure rows below 95 %: none"
    text = summarize(load_rows(rows_dir), "held", options)
    assert "- `saturation[startupSeconds=30]`" not in text  # a label or the bare name
    assert "- saturation[startupSeconds=30]: azure rows below 95 %: azure-code" in text


def test_the_command_prints_the_tables_and_names_a_missing_row(
    rows_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["results", "summarize", str(rows_dir), "--label", "saturation[startupSeconds=30]=L"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    labels = {"saturation[startupSeconds=30]": "L"}  # labelled columns first
    assert out.startswith("| workload | L | `saturation` | ")
    assert out == summarize(load_rows(rows_dir), "held", Options(labels=labels))
    assert main(["results", "summarize", str(rows_dir), "--rows", "spike,gone"]) == 2
    assert "no comparison.json(.gz) in" in capsys.readouterr().err
    assert main(["results", "summarize", str(rows_dir / "notes")]) == 2
    with pytest.raises(SystemExit):
        main(["results", "summarize", str(rows_dir), "--label", "no-label"])
