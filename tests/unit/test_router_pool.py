"""The pure endpoint pool: dispatch choice, counts across rediscovery, health states."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.pool import (
    DRAINING,
    READY,
    UNHEALTHY,
    WRONG_MODEL,
    Endpoint,
    EndpointError,
    Pool,
    endpoint_label,
    normalize_url,
)

A, B, C = "http://127.0.0.1:9001", "http://127.0.0.1:9002", "http://127.0.0.1:9003"


def counts(pool: Pool) -> dict[str, int]:
    return {v.url: v.inflight for v in pool.snapshot()}


def draining_with_one_in_flight() -> tuple[Pool, Endpoint]:
    """A pool whose only endpoint, A, was removed while a request held a slot on it."""
    pool = Pool(4)
    pool.set_endpoints([A])
    a = pool.get(A)
    assert a is not None
    pool.acquire(a)
    pool.set_endpoints([])
    return pool, a


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        (" HTTP://Replica-0.svc:80 ", "http://replica-0.svc:80"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("https://h", "https://h"),
    ],
)
def test_normalize_url(raw: str, expected: str) -> None:
    assert normalize_url(raw) == expected


@pytest.mark.parametrize(
    "bad",
    ["ftp://h:1", "h:1", "http://h:1/v1", "http://u:p@h:1", "http://h:1?x=1", "http://h:99999"],
)
def test_normalize_url_rejects(bad: str) -> None:
    with pytest.raises(EndpointError, match="endpoint"):
        normalize_url(bad)


def test_label_is_host_port() -> None:
    assert endpoint_label("http://127.0.0.1:8000") == "127.0.0.1:8000"


def test_least_outstanding_picks_the_fewest() -> None:
    pool = Pool(4, rng=random.Random(1))
    pool.set_endpoints([A, B, C])
    pool.acquire(pool.get(A))  # type: ignore[arg-type]
    pool.acquire(pool.get(B))  # type: ignore[arg-type]
    for _ in range(20):
        chosen = pool.choose(below_slots=False)
        assert chosen is not None and chosen.url == C


def test_ties_are_broken_at_random() -> None:
    pool = Pool(4, rng=random.Random(7))
    pool.set_endpoints([A, B])
    seen = {pool.choose(below_slots=False).url for _ in range(50)}  # type: ignore[union-attr]
    assert seen == {A, B}


@given(st.integers(min_value=1, max_value=64), st.integers(min_value=1, max_value=6))
def test_acquiring_n_keeps_counts_within_one(n: int, endpoints: int) -> None:
    pool = Pool(4, rng=random.Random(n))
    pool.set_endpoints([f"http://127.0.0.1:{9000 + i}" for i in range(endpoints)])
    for _ in range(n):
        ep = pool.choose(below_slots=False)
        assert ep is not None
        pool.acquire(ep)
        values = counts(pool).values()
        assert max(values) - min(values) <= 1


def test_below_slots_refuses_full_endpoints() -> None:
    pool = Pool(2)
    pool.set_endpoints([A])
    ep = pool.get(A)
    assert ep is not None
    pool.acquire(ep)
    pool.acquire(ep)
    assert pool.choose(below_slots=True) is None
    assert pool.choose(below_slots=False) is ep  # without holding, vLLM queues it


def test_random_dispatch_ignores_counts() -> None:
    pool = Pool(4, dispatch="random", rng=random.Random(3))
    pool.set_endpoints([A, B])
    a = pool.get(A)
    assert a is not None
    for _ in range(3):
        pool.acquire(a)
    assert {pool.choose(below_slots=False).url for _ in range(60)} == {A, B}  # type: ignore[union-attr]


def test_rediscovery_keeps_counts_drains_removed_and_adds_at_zero() -> None:
    pool = Pool(4)
    pool.set_endpoints([A, B])
    a, b = pool.get(A), pool.get(B)
    assert a is not None and b is not None
    pool.acquire(a)
    pool.acquire(a)
    pool.acquire(b)
    added, removed = pool.set_endpoints([B, C])
    assert (added, removed) == ([C], [A])
    assert counts(pool) == {A: 2, B: 1, C: 0}
    assert pool.get(A).state == DRAINING  # type: ignore[union-attr]
    for _ in range(10):  # a draining endpoint gets nothing new
        assert pool.choose(below_slots=False).url != A  # type: ignore[union-attr]
    pool.release(a)
    assert A in counts(pool)
    pool.release(a)
    assert A not in counts(pool)  # drained: gone
    assert a.removed


def test_removed_idle_endpoint_disappears_at_once_and_can_come_back() -> None:
    pool = Pool(4)
    pool.set_endpoints([A, B])
    pool.set_endpoints([B])
    assert list(counts(pool)) == [B]
    pool.set_endpoints([A, B])
    assert counts(pool) == {A: 0, B: 0}


def test_draining_endpoint_that_returns_keeps_its_count() -> None:
    pool, a = draining_with_one_in_flight()
    assert a.state == DRAINING
    pool.set_endpoints([A])
    assert pool.get(A) is a and a.state == READY and a.inflight == 1


def test_release_without_acquire_is_a_bug() -> None:
    pool = Pool(4)
    pool.set_endpoints([A])
    with pytest.raises(RuntimeError, match="release without acquire"):
        pool.release(pool.get(A))  # type: ignore[arg-type]


def test_unhealthy_until_backoff_and_a_passing_check() -> None:
    pool = Pool(4)
    pool.set_endpoints([A, B])
    a = pool.get(A)
    assert a is not None
    pool.mark_unhealthy(a, now_s=100.0, backoff_s=5.0)
    assert a.state == UNHEALTHY
    assert all(pool.choose(below_slots=False).url == B for _ in range(10))  # type: ignore[union-attr]
    assert pool.health_result(A, ok=True, now_s=103.0, backoff_s=5.0) is False  # too soon
    assert a.state == UNHEALTHY
    assert pool.health_result(A, ok=True, now_s=105.0, backoff_s=5.0) is True
    assert a.state == READY
    pool.health_result(A, ok=False, now_s=106.0, backoff_s=5.0)
    assert a.state == UNHEALTHY
    assert pool.count_by_state() == {READY: 1, DRAINING: 0, UNHEALTHY: 1, WRONG_MODEL: 0}


def test_health_never_revives_a_draining_endpoint() -> None:
    pool, a = draining_with_one_in_flight()
    assert pool.health_result(A, ok=True, now_s=0.0, backoff_s=0.0) is False
    assert a.state == DRAINING


@pytest.mark.parametrize(("slots", "dispatch"), [(0, "least-outstanding"), (4, "round-robin")])
def test_pool_rejects_bad_settings(slots: int, dispatch: str) -> None:
    with pytest.raises(ValueError, match=r"slots|dispatch"):
        Pool(slots, dispatch=dispatch)
