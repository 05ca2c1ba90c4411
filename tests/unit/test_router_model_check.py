"""One pool, one model (router/model_check.py): a single-pool router keeps an endpoint that
serves another model out of rotation, by a rule that does not depend on which answered first."""

from __future__ import annotations

import logging

import pytest

from router.model_check import ModelCheck, base_model, pool_model
from router.pool import READY, WRONG_MODEL, Pool

pytestmark = pytest.mark.unit

A, B, C = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"


def pool_of(*urls: str) -> Pool:
    pool = Pool(4)
    pool.set_endpoints(urls)
    return pool


def states(pool: Pool) -> dict[str, str]:
    return {ep.url: ep.state for ep in pool.endpoints()}


def test_the_minority_model_is_kept_out_and_the_log_names_the_flag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = pool_of(A, B, C)
    check = ModelCheck(pool)
    with caplog.at_level(logging.ERROR, logger="router.model_check"):
        check.learn({A: "beta", B: "alpha", C: "alpha"})
    assert check.model == "alpha"
    assert states(pool) == {A: WRONG_MODEL, B: READY, C: READY}
    assert pool.choose(below_slots=True).url in (B, C)  # type: ignore[union-attr]
    assert "--discover-models" in caplog.text and "'beta'" in caplog.text
    # Said once, not every round.
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="router.model_check"):
        check.learn({A: "beta", B: "alpha", C: "alpha"})
    assert caplog.text == ""


def test_a_tie_goes_to_the_endpoint_listed_first_whatever_answered_first() -> None:
    pool = pool_of(A, B)
    check = ModelCheck(pool)
    check.learn({B: "beta"})  # B answered first, alone: its model, for now
    assert check.model == "beta" and states(pool) == {A: READY, B: READY}
    check.learn({A: "alpha"})  # both known: a tie, A is listed first
    assert check.model == "alpha" and states(pool) == {A: READY, B: WRONG_MODEL}


def test_an_endpoint_rejoins_when_it_serves_the_pools_model_again() -> None:
    pool = pool_of(A, B)
    check = ModelCheck(pool)
    check.learn({A: "alpha", B: "beta"})
    assert states(pool)[B] == WRONG_MODEL
    check.learn({A: None, B: None})  # no answers: the last ones stand
    assert states(pool)[B] == WRONG_MODEL
    check.learn({B: "alpha"})  # redeployed
    assert states(pool) == {A: READY, B: READY}


def test_one_model_changes_nothing_and_a_removed_endpoint_is_forgotten() -> None:
    pool = pool_of(A, B)
    check = ModelCheck(pool)
    check.learn({A: "m", B: "m"})
    assert states(pool) == {A: READY, B: READY}
    pool.set_endpoints([A])
    check.learn({A: "m"})
    assert check.model == "m" and check.to_read() == [A]


def test_the_base_model_skips_adapters() -> None:
    cards: list[dict[str, object]] = [{"id": "lora-1", "parent": "base"}, {"id": "base"}]
    assert base_model(cards) == "base"
    assert base_model([]) is None
    assert pool_model([]) is None
