"""Which replica leaves on a scale-down: the one whose loss costs least (pure: no I/O, no clock).

A replica's loss costs the requests it still has in flight (they must finish, or be cut, before
it goes) and the prefix-cache blocks that no other replica also holds (their prompts are
recomputed elsewhere). :class:`Warmth` is those two figures, read from the router: its
requests in flight per endpoint, and its prefix index (:meth:`router.prefix_index.PrefixIndex.
unique_blocks`, ``--dispatch prefix``; 0 without it, where the router knows no cache).

The order (:func:`leave_order`): fewest requests in flight first, then the fewest unique
cache blocks, then the order the caller lists the candidates in (``inflight up`` and the
simulator list ready replicas newest first, their rule before this one:
:func:`inflight.control.lifecycle.scale_plan`). So with no request in flight and nothing
cached, the newest replica still leaves first.

On Kubernetes the ReplicaSet controller picks the pod, not us; it deletes the pods with the
lowest ``controller.kubernetes.io/pod-deletion-cost`` first (an int32 annotation, KEP-2255;
pods without one count as 0). :func:`deletion_costs` writes the same order as that value:
a pod's rank in :func:`leave_order` (0 leaves first, then 1, …), so the controller's choice
is this rule's. A rank, not a raw score, so the value moves only when the order does
(Kubernetes warns against updating the annotation often; the router's job that writes it,
``router/deletion_cost.py``, also rate-limits).

Worked example: replicas a (2 in flight, 0 unique blocks), b (0, 50), c (0, 10), listed
newest first c, b, a. Order: c (0, 10), b (0, 50), a (2, 0); deletion costs c 0, b 1, a 2.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)  # what names a replica: an id, a URL, a pod

#: The largest ``controller.kubernetes.io/pod-deletion-cost`` (an int32).
MAX_DELETION_COST = 2**31 - 1


@dataclass(frozen=True)
class Warmth:
    """What losing a replica costs: its requests in flight, and the prefix-cache blocks it
    holds that no other replica also holds (0 where nothing is known)."""

    inflight: int = 0
    unique_blocks: int = 0

    def __post_init__(self) -> None:
        if self.inflight < 0 or self.unique_blocks < 0:
            raise ValueError(f"a replica's warmth cannot be negative: {self}")


#: A replica the router knows nothing of: nothing in flight, nothing cached.
COLD = Warmth()


def leave_order(candidates: Sequence[tuple[K, Warmth]]) -> list[K]:
    """The replicas in the order they should leave: fewest in flight, then fewest unique
    cache blocks, then as listed (the caller's tie-break).

    >>> leave_order([("c", Warmth(0, 10)), ("b", Warmth(0, 50)), ("a", Warmth(2, 0))])
    ['c', 'b', 'a']
    >>> leave_order([("new", COLD), ("old", COLD)])  # nothing known: as listed
    ['new', 'old']
    >>> leave_order([("new", Warmth(1, 0)), ("old", COLD)])
    ['old', 'new']
    """
    ranked = sorted(
        range(len(candidates)),
        key=lambda i: (candidates[i][1].inflight, candidates[i][1].unique_blocks, i),
    )
    return [candidates[i][0] for i in ranked]


def deletion_costs(candidates: Sequence[tuple[K, Warmth]]) -> dict[K, int]:
    """Each replica's ``controller.kubernetes.io/pod-deletion-cost``: its rank in
    :func:`leave_order` (higher: kept longer), within int32.

    >>> deletion_costs([("c", Warmth(0, 10)), ("b", Warmth(0, 50)), ("a", Warmth(2, 0))])
    {'c': 0, 'b': 1, 'a': 2}
    """
    return {key: min(rank, MAX_DELETION_COST) for rank, key in enumerate(leave_order(candidates))}
