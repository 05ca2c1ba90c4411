"""``inflight sim tune --kv-blocks`` with ``--jobs 2``: the search's worker processes (a
process pool, so not in the unit tier) simulate the cache the header names, as the
in-process run of ``tests/unit/test_sim_tune_kv.py`` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_sim_tune_kv import assert_tune_on_a_bound_cache_says_so_and_differs


@pytest.mark.serial  # two CPU-bound worker processes: run alone, after the parallel stage
def test_tune_workers_on_a_bound_cache_say_so_and_differ(tmp_path: Path) -> None:
    assert_tune_on_a_bound_cache_says_so_and_differs(tmp_path, jobs="2")
