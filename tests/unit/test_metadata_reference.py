"""The trigger metadata's reference page is the parser's own table (issue 40: parsing
table-driven, the docs' reference generated from it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from external_scaler.errors import MetadataError
from external_scaler.metadata import ROWS, parse_metadata
from external_scaler.metadata_reference import render
from inflight import names

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_page_is_the_rendered_table() -> None:
    page = (ROOT / "docs" / "trigger-metadata.md").read_text()
    regenerate = "python -m external_scaler.metadata_reference > docs/trigger-metadata.md"
    assert page == render(), f"run: {regenerate}"


def test_every_key_has_one_row_and_every_row_a_key() -> None:
    keys = [row.key for row in ROWS]
    assert sorted(keys) == sorted(names.METADATA_DEFAULTS)
    assert len(set(keys)) == len(keys)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.key)
def test_each_row_refuses_a_bad_value_naming_its_key_and_its_form(row: object) -> None:
    key, form = row.key, row.read.form  # type: ignore[attr-defined]
    bad = "\x00" if key in (names.META_MODEL,) else "-1 nonsense"
    if key in (names.META_SELECTOR, names.META_CAPACITY_SELECTOR):
        bad = "not a matcher"
    with pytest.raises(MetadataError) as caught:
        parse_metadata({key: bad})
    assert caught.value.key == key
    if key not in (names.META_SELECTOR, names.META_CAPACITY_SELECTOR):
        assert form in str(caught.value), (form, str(caught.value))
