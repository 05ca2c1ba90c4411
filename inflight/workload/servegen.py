"""ServeGen's published per-client statistics, carried into the project (``servegen.json``).

ServeGen (Xiang et al., "ServeGen: Workload Characterization and Generation of Large
Language Model Serving in Production", arXiv 2505.09999; ``github.com/alibaba/ServeGen``,
Apache-2.0) publishes, per production model of Alibaba Cloud Model Studio, one trace and one
dataset file a client: every 10 minutes the client's rate, the coefficient of variation of
its inter-arrival times (burstiness) and a Gamma or Weibull fit; every 6 hours its input
and output length distributions. ``servegen.json`` keeps, for the busiest clients of the
language models ``m-large``, ``m-mid``, ``m-small`` and the reasoning model
``deepseek-r1``, what a random draw needs (:mod:`inflight.workload.draws`): the client's
share of the model's requests, its mean rate, the spread of its CV over its active
windows, and quantile tables of its input and output lengths (all its windows pooled).
ServeGen's code is not used or copied; only these figures, read from its data files.

:func:`load` reads the file (package data). ``python -m inflight.workload.servegen --data
DIR --commit SHA --out FILE`` rebuilds it from a checkout's ``data/`` folder (the only
I/O besides :func:`load`).
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

DATA_FILE = "servegen.json"
# Quantiles of the length tables; a draw interpolates between them (inverse CDF). The tail
# is read finely: a client's largest length is a rare outlier (m-mid's busiest client: 99.99 %
# of its outputs at most 643 tokens, its largest 8,192), and a line from p99 straight to it
# put 1 % of the draws' requests between them (a mean of ~4,200 output tokens where the
# data's top 1 % has 323), which doubled the client's mean work and left some draws with
# no fleet near the SLO.
QUANTILES = (0.0, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1.0)
MODELS = {"m-large": "language", "m-mid": "language", "m-small": "language",
          "deepseek-r1": "reason"}  # fmt: skip
TOP_CLIENTS = 12  # the busiest clients of each model kept
WINDOW_S = 600  # ServeGen's trace rows: one a client every 10 minutes


@dataclass(frozen=True)
class Client:
    """One ServeGen client: its share of its model's requests, burstiness and lengths."""

    model: str
    client_id: int
    share: float  # of the model's requests (all clients, over the whole trace)
    mean_rate_rps: float  # over its windows with traffic
    cv: tuple[float, float, float]  # inter-arrival CV over those windows: p10, p50, p90
    input_tokens: tuple[float, ...]  # at QUANTILES
    output_tokens: tuple[float, ...]  # at QUANTILES


@dataclass(frozen=True)
class Stats:
    """The file: its provenance and each model's clients, busiest first."""

    meta: dict[str, Any]
    quantiles: tuple[float, ...]
    models: dict[str, tuple[Client, ...]]


@cache
def load() -> Stats:
    """``servegen.json`` as shipped with the package."""
    text = resources.files("inflight.workload").joinpath(DATA_FILE).read_text(encoding="utf-8")
    doc = json.loads(text)
    models = {
        name: tuple(
            Client(
                model=name,
                client_id=int(c["id"]),
                share=float(c["share"]),
                mean_rate_rps=float(c["mean_rate_rps"]),
                cv=(float(c["cv"][0]), float(c["cv"][1]), float(c["cv"][2])),
                input_tokens=tuple(float(v) for v in c["input_tokens"]),
                output_tokens=tuple(float(v) for v in c["output_tokens"]),
            )
            for c in m["clients"]
        )
        for name, m in doc["models"].items()
    }
    meta = {k: v for k, v in doc.items() if k not in ("models", "quantiles")}
    return Stats(meta, tuple(doc["quantiles"]), models)


# --- rebuilding the file from a ServeGen checkout ------------------------------------------
def _pdf_quantiles(pdf: dict[float, float], qs: Sequence[float]) -> list[float]:
    """Quantiles of a discrete distribution {value: probability} (the least value whose
    cumulative probability reaches q; q = 0: the least value with mass)."""
    items = sorted((v, p) for v, p in pdf.items() if p > 0)
    total = sum(p for _, p in items)
    out, acc, i = [], 0.0, 0
    for q in qs:
        if q <= 0:
            out.append(items[0][0])
            continue
        while i < len(items) - 1 and acc + items[i][1] / total < q - 1e-12:
            acc += items[i][1] / total
            i += 1
        out.append(items[i][0])
    return [float(v) for v in out]


def _client(folder: Path, cid: int) -> tuple[list[tuple[int, float, float]], dict[str, Any]]:
    """A client's trace rows (t, rate, cv) with traffic, and its dataset file."""
    rows = []
    for line in (folder / f"chunk-{cid}-trace.csv").read_text().splitlines():
        t, rate, cv, pat, *_ = line.split(",")
        if pat:
            rows.append((int(t), float(rate), float(cv)))
    return rows, json.loads((folder / f"chunk-{cid}-dataset.json").read_text())


def _pooled(dataset: dict[str, Any], field: str) -> dict[float, float]:
    """A length field's pdf, the mean over the client's dataset windows."""
    pooled: dict[float, float] = {}
    windows = [ast.literal_eval(fields[field]) for fields in dataset.values() if field in fields]
    windows = [w for w in windows if w]
    for pdf in windows:
        for v, p in pdf.items():
            pooled[float(v)] = pooled.get(float(v), 0.0) + p / len(windows)
    return pooled


def extract(data_dir: Path, commit: str) -> dict[str, Any]:
    """``servegen.json``'s body from ServeGen's ``data/`` folder."""
    models: dict[str, Any] = {}
    absent = 0
    for model, category in MODELS.items():
        folder = data_dir / category / model
        ids = sorted(int(p.name.split("-")[1]) for p in folder.glob("chunk-*-trace.csv"))
        totals = {}
        for cid in ids:  # expected requests: rate × 600 s summed over the windows
            lines = (folder / f"chunk-{cid}-trace.csv").read_text().splitlines()
            totals[cid] = sum(float(line.split(",")[1]) * WINDOW_S for line in lines)
        grand = sum(totals.values())
        kept: list[dict[str, Any]] = []
        for cid in sorted(ids, key=lambda c: -totals[c]):
            if len(kept) == TOP_CLIENTS:
                break
            if not (folder / f"chunk-{cid}-dataset.json").exists():
                absent += 1
                continue
            rows, dataset = _client(folder, cid)
            inp, outp = _pooled(dataset, "input_tokens"), _pooled(dataset, "output_tokens")
            if not rows or not inp or not outp:
                continue
            cvs = sorted(cv for _, _, cv in rows)
            dec = statistics.quantiles(cvs, n=10, method="inclusive") if len(cvs) > 1 else cvs * 9
            kept.append(
                {
                    "id": cid,
                    "share": round(totals[cid] / grand, 5),
                    "mean_rate_rps": round(statistics.fmean(r for _, r, _ in rows), 4),
                    "active_windows": len(rows),
                    "cv": [round(dec[0], 3), round(statistics.median(cvs), 3), round(dec[8], 3)],
                    "input_tokens": _pdf_quantiles(inp, QUANTILES),
                    "output_tokens": _pdf_quantiles(outp, QUANTILES),
                }
            )
        models[model] = {
            "category": category,
            "clients_total": len(ids),
            "clients": kept,
        }
    return {
        "source": "https://github.com/alibaba/ServeGen",
        "commit": commit,
        "licence": "Apache-2.0 (https://www.apache.org/licenses/LICENSE-2.0)",
        "attribution": (
            "Derived from the data files of ServeGen, Copyright Alibaba, Apache License 2.0: "
            "Y. Xiang, X. Li, K. Qian, W. Yu, E. Zhai, X. Jin, 'ServeGen: Workload "
            "Characterization and Generation of Large Language Model Serving in "
            "Production', arXiv:2505.09999, 2025. Changes: per-client summaries computed "
            "by inflight/workload/servegen.py; no ServeGen code is included."
        ),
        "extracted_by": "python -m inflight.workload.servegen --data DIR --commit SHA --out FILE",
        "notes": [
            "share: the client's expected requests (10-minute rate x 600 s, summed) over all "
            "clients of the model with a trace file",
            "mean_rate_rps and cv (p10, p50, p90): over the client's windows with traffic",
            "input_tokens, output_tokens: quantiles of the client's length pdfs, pooled "
            "(mean) over its 6-hourly windows",
            f"clients whose dataset file was absent from the snapshot read were skipped "
            f"({absent} among the busiest); the next busiest were kept",
        ],
        "quantiles": list(QUANTILES),
        "models": models,
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m inflight.workload.servegen")
    p.add_argument("--data", type=Path, required=True, help="ServeGen's data/ folder")
    p.add_argument("--commit", required=True, help="the ServeGen commit it was read at")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    if a.out.exists():
        p.error(f"--out {a.out}: exists; not overwritten")
    a.out.write_text(json.dumps(extract(a.data, a.commit), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
