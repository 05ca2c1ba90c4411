"""The ready file: written atomically, read back, and every malformed report named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inflight import ready


def test_write_then_read_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "r.json"
    ready.write(path, {"grpc": 40101, "metrics": 40102})
    report = ready.read(path)
    assert report is not None
    assert report.ports == {"grpc": 40101, "metrics": 40102}
    assert report.pid > 0
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left


def test_no_file_yet_is_none(tmp_path: Path) -> None:
    assert ready.read(tmp_path / "absent.json") is None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{", "not JSON"),
        ("[]", "want"),
        (json.dumps({"pid": 1}), "'ports' must map"),
        (json.dumps({"pid": 1, "ports": {}}), "'ports' must map"),
        (json.dumps({"pid": 1, "ports": {"http": 0}}), "'ports' must map"),
        (json.dumps({"pid": 1, "ports": {"http": "80"}}), "'ports' must map"),
        (json.dumps({"pid": "1", "ports": {"http": 80}}), "want"),
    ],
)
def test_a_malformed_report_is_an_error_naming_the_file(
    tmp_path: Path, text: str, fragment: str
) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(ready.ReadyFileError, match=fragment) as err:
        ready.read(path)
    assert str(path) in str(err.value)
