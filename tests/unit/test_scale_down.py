"""The scale-down rule (inflight/control/scale_down.py): which replica leaves, and the
pod-deletion-cost that tells the ReplicaSet controller the same."""

from __future__ import annotations

import doctest

import pytest

from inflight.control import scale_down
from inflight.control.scale_down import (
    COLD,
    MAX_DELETION_COST,
    Warmth,
    deletion_costs,
    leave_order,
)


def test_doctests():
    assert doctest.testmod(scale_down).failed == 0


def test_fewest_in_flight_leaves_first_whatever_its_cache():
    order = leave_order([("a", Warmth(1, 0)), ("b", Warmth(0, 1000)), ("c", Warmth(3, 0))])
    assert order == ["b", "a", "c"]


def test_among_equally_busy_the_least_unique_cache_leaves_first():
    order = leave_order([("a", Warmth(2, 30)), ("b", Warmth(2, 7)), ("c", Warmth(2, 0))])
    assert order == ["c", "b", "a"]


def test_ties_keep_the_callers_order_so_nothing_known_is_the_callers_rule():
    listed = [("r9", COLD), ("r4", COLD), ("r1", Warmth(0, 0))]
    assert leave_order(listed) == ["r9", "r4", "r1"]
    assert leave_order(list(reversed(listed))) == ["r1", "r4", "r9"]


def test_deletion_cost_is_the_rank_in_the_leave_order():
    cands = [("a", Warmth(2, 0)), ("b", Warmth(0, 50)), ("c", Warmth(0, 10))]
    costs = deletion_costs(cands)
    assert costs == {"c": 0, "b": 1, "a": 2}
    # The ReplicaSet controller deletes the lowest cost first: the rule's first leaver.
    assert min(costs, key=lambda k: costs[k]) == leave_order(cands)[0]
    assert all(0 <= v <= MAX_DELETION_COST for v in costs.values())


def test_deletion_cost_moves_only_when_the_order_does():
    before = deletion_costs([("a", Warmth(1, 5)), ("b", Warmth(3, 5))])
    after = deletion_costs([("a", Warmth(2, 9)), ("b", Warmth(4, 5))])  # figures moved
    assert before == after == {"a": 0, "b": 1}


def test_no_candidates_no_order():
    assert leave_order([]) == []
    assert deletion_costs([]) == {}


@pytest.mark.parametrize("bad", [(-1, 0), (0, -1)])
def test_negative_warmth_is_refused(bad):
    with pytest.raises(ValueError, match="cannot be negative"):
        Warmth(*bad)
