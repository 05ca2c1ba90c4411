"""Result files stored gzipped (``x.json.gz``) read as the plain ones, and the committed
``results/`` folder: every run a comparison names is readable, per-request files are
gzipped (issue #21, item 4; its budget, read with git: tests/component/test_results_budget.py)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from inflight.measure.results import ResultFileExists, dumps, read_json, stored_path, write_new

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
DOC = {"schema": "x/1", "requests": [[4, 0.0, 1.5, 0.2, 100, True, None]]}


def test_read_json_reads_the_plain_and_the_gzipped_form(tmp_path: Path) -> None:
    plain = write_new(tmp_path / "a.json", dumps(DOC), force=False)
    packed = write_new(tmp_path / "b.json.gz", dumps(DOC), force=False)
    assert packed.read_bytes()[:2] == b"\x1f\x8b"  # gzip's magic number
    assert json.loads(gzip.decompress(packed.read_bytes())) == DOC
    assert read_json(plain) == read_json(packed) == read_json(str(packed)) == DOC


def test_either_name_finds_the_file_that_is_there(tmp_path: Path) -> None:
    write_new(tmp_path / "run.json.gz", dumps(DOC), force=False)
    write_new(tmp_path / "old.json", dumps(DOC), force=False)
    assert stored_path(tmp_path / "run.json") == tmp_path / "run.json.gz"
    assert read_json(tmp_path / "run.json") == DOC  # what comparison.json names
    assert read_json(tmp_path / "old.json.gz") == DOC
    with pytest.raises(FileNotFoundError, match=r"absent\.json"):
        read_json(tmp_path / "absent.json")


def test_a_bad_gzip_file_is_an_error_the_readers_catch(tmp_path: Path) -> None:
    (tmp_path / "bad.json.gz").write_bytes(b"not gzip")
    with pytest.raises(OSError):
        read_json(tmp_path / "bad.json.gz")
    whole = gzip.compress(dumps(DOC).encode())
    (tmp_path / "cut.json.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(EOFError):
        read_json(tmp_path / "cut.json.gz")


def test_gzipped_results_are_never_overwritten_and_are_the_same_bytes_each_time(
    tmp_path: Path,
) -> None:
    path = write_new(tmp_path / "r.json.gz", dumps(DOC), force=False)
    first = path.read_bytes()
    with pytest.raises(ResultFileExists):
        write_new(path, dumps({}), force=False)
    assert path.read_bytes() == first
    write_new(path, dumps(DOC), force=True)  # --force: atomic, and no timestamp inside
    assert path.read_bytes() == first
    assert [p.name for p in tmp_path.iterdir()] == ["r.json.gz"]  # no temp file left


# --- the committed results/ ---------------------------------------------------------------
def _named_files(body: object) -> set[str]:
    """Every ``"file"`` a comparison.json names (its runs and slowing runs)."""
    if isinstance(body, dict):
        return {v for k, v in body.items() if k == "file" and isinstance(v, str)} | {
            f for v in body.values() for f in _named_files(v)
        }
    if isinstance(body, list):
        return {f for v in body for f in _named_files(v)}
    return set()


@pytest.mark.parametrize(
    "comparison",
    sorted(RESULTS.glob("**/comparison.json")),
    ids=lambda p: str(p.parent.relative_to(RESULTS)),
)
def test_every_committed_run_is_readable_and_stored_gzipped(comparison: Path) -> None:
    for name in _named_files(read_json(comparison)):
        path = stored_path(comparison.parent / name)
        assert path.name.endswith(".json.gz"), f"{path}: store per-request files gzipped"
        doc = read_json(comparison.parent / name)
        assert isinstance(doc, dict) and doc.get("schema"), path
