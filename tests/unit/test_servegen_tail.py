"""The length tables' tail (``inflight.workload.servegen.QUANTILES``): a draw's inverse CDF,
linear between the table's quantiles, keeps a long thin tail's mean only when the table reads
the tail finely. Built on a made-up pdf shaped like m-mid's busiest client's outputs (99.99 %
at most ~640 tokens, a rare 8,192), not on ServeGen's files (not in the repository)."""

from __future__ import annotations

import random

from inflight.sim.draws import quantile_value
from inflight.workload.servegen import QUANTILES, _pdf_quantiles

OLD_QUANTILES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def thin_tail_pdf() -> dict[float, float]:
    """Mostly 5–60 tokens, 9 % up to 216, 1 % thinning out to 640, and 1 in 20,000 at 8,192
    (the real client: mean 49, p99 216, p99.99 643, largest 8,192)."""
    pdf: dict[float, float] = {float(v): 0.9 / 56 for v in range(5, 61)}
    pdf.update({float(v): 0.09 / 156 for v in range(61, 217)})
    pdf.update({float(v): 0.00995 / 424 for v in range(217, 641)})
    pdf[8192.0] = 0.00005
    return pdf


def drawn_mean(table: list[float], qs: tuple[float, ...], n: int = 200_000) -> float:
    rng = random.Random(1)
    return sum(quantile_value(table, qs, rng.random()) for _ in range(n)) / n


def test_the_fine_tail_keeps_the_mean_that_a_line_to_the_maximum_doubles() -> None:
    pdf = thin_tail_pdf()
    true_mean = sum(v * p for v, p in pdf.items()) / sum(pdf.values())
    fine = drawn_mean(_pdf_quantiles(pdf, QUANTILES), QUANTILES)
    coarse = drawn_mean(_pdf_quantiles(pdf, OLD_QUANTILES), OLD_QUANTILES)
    assert abs(fine / true_mean - 1) < 0.1, (fine, true_mean)
    assert coarse > 1.5 * true_mean, (coarse, true_mean)


def test_the_table_keeps_the_least_and_the_largest_length() -> None:
    table = _pdf_quantiles(thin_tail_pdf(), QUANTILES)
    assert (table[0], table[-1]) == (5.0, 8192.0)
    assert table == sorted(table)
