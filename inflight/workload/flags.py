"""argparse value types of the workload flags, shared by ``inflight bench`` and ``inflight sim``.

Each raises ``argparse.ArgumentTypeError`` (argparse names the flag); :func:`concurrency_list`
names ``--concurrency`` itself, as it is also read outside argparse.
"""

from __future__ import annotations

import argparse


def positive_int_list(text: str) -> list[int]:
    """``"4,8,16"`` → [4, 8, 16]; every value ≥ 1, at least one."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from exc
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"every value must be >= 1, got {text!r}")
    return values


def concurrency_list(text: str) -> list[int]:
    """``"4,8,16"`` → [4, 8, 16]; errors name the flag (also read outside argparse)."""
    try:
        return positive_int_list(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"--concurrency: {exc}") from None


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from exc
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value
