"""The router's text-prompt token estimate against a real engine's count (issue 23, item 1).

``inflight bench token-estimate --url URL --model NAME --out-dir DIR``: sends
``--samples`` prompts cut from texts (``--corpus KIND=GLOB``, repeatable, relative to the
working directory; by default this repository's own files, run from a clone: prose
docs/*.md, code Python modules, JSON the dashboards), of lengths drawn log-uniformly in
``[--min-chars, --max-chars]``, half as ``/v1/completions`` text prompts and half as
two-message chat requests, each with ``max_tokens`` 1 through the OpenAI SDK, and reads the engine's
``usage.prompt_tokens``. Beside it, the router's estimate (:mod:`router.tokens`, the same
functions the proxy calls) at ``--chars-per-token`` and at the ratio fitted on the other
half of the samples (even-numbered samples fit, odd ones are scored, and the reverse: the
fitted figure is never scored on the samples it came from).

Writes ``samples.jsonl`` (one row a sample: kind, source, characters, engine tokens,
estimates) and ``summary.json`` (the relative error's distribution, by kind and source);
prints the summary.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from router import tokens

ROOT = Path(__file__).resolve().parents[2]
SOURCES = {
    "prose": ("docs/*.md",),
    "code": ("router/*.py", "inflight/control/*.py"),
    "json": ("dashboards/json/*.json",),
}


def corpus(
    root: Path = ROOT, sources: dict[str, tuple[str, ...]] = SOURCES
) -> dict[str, list[str]]:
    """The texts a source kind, in file-name order."""
    out: dict[str, list[str]] = {}
    for kind, patterns in sources.items():
        files = sorted({p for pattern in patterns for p in root.glob(pattern)})
        out[kind] = [p.read_text(encoding="utf-8") for p in files]
    return out


def cut(rng: random.Random, texts: Sequence[str], min_chars: int, max_chars: int) -> str:
    """A slice of one text, its length log-uniform in ``[min_chars, max_chars]`` (at most
    the text's)."""
    text = rng.choice([t for t in texts if len(t) >= min_chars])
    n = round(math.exp(rng.uniform(math.log(min_chars), math.log(max_chars))))
    n = min(n, len(text))
    start = rng.randrange(len(text) - n + 1)
    return text[start : start + n]


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p5, p25, p50, p75, p95 of ``values``, their mean and mean absolute value."""
    qs = statistics.quantiles(values, n=20, method="inclusive")
    return {
        "n": len(values),
        "p5": qs[0],
        "p25": qs[4],
        "p50": qs[9],
        "p75": qs[14],
        "p95": qs[18],
        "mean": statistics.fmean(values),
        "mean_abs": statistics.fmean(abs(v) for v in values),
    }


def _chars(row: dict[str, Any]) -> int:
    return int(row["chars"])


def fitted_ratio(rows: Sequence[dict[str, Any]], overhead: int) -> float:
    """Characters a token fitted on ``rows``: total characters ÷ total engine tokens (the
    chat rows' template overhead taken out first)."""
    chars = sum(_chars(r) for r in rows)
    toks = sum(r["engine"] - (overhead * r["messages"] if r["kind"] == "chat" else 0) for r in rows)
    return chars / toks


def estimate(row: dict[str, Any], ratio: float) -> int:
    """The router's estimate for a sample's request at ``ratio``."""
    body = row["request"]
    if row["kind"] == "chat":
        return tokens.chat_tokens(body["messages"], ratio)
    return tokens.text_tokens(body["prompt"], ratio)


def summarize(rows: list[dict[str, Any]], ratio: float) -> dict[str, Any]:
    """The error distribution at ``ratio`` and at the held-out fitted ratio."""
    overhead = tokens.MESSAGE_OVERHEAD_TOKENS
    halves = (rows[0::2], rows[1::2])
    fits = [fitted_ratio(halves[1], overhead), fitted_ratio(halves[0], overhead)]
    for i, half in enumerate(halves):  # each half scored with the other half's fit
        for r in half:
            r["estimate_fitted"] = estimate(r, fits[i])
    for r in rows:
        r["estimate"] = estimate(r, ratio)

    def errors(key: str, pick: list[dict[str, Any]]) -> dict[str, float]:
        return percentiles(
            tokens.estimate_errors([r[key] for r in pick], [r["engine"] for r in pick])
        )

    groups: dict[str, list[dict[str, Any]]] = {"all": rows}
    for r in rows:
        groups.setdefault(f"{r['kind']}", []).append(r)
        groups.setdefault(f"source:{r['source']}", []).append(r)
    return {
        "chars_per_token": ratio,
        "fitted_chars_per_token": fits,
        "fitted_chars_per_token_all": fitted_ratio(rows, overhead),
        "engine_chars_per_token_by_source": {
            k.removeprefix("source:"): fitted_ratio(v, overhead)
            for k, v in groups.items()
            if k.startswith("source:")
        },
        "error": {k: errors("estimate", v) for k, v in groups.items()},
        "error_fitted": {k: errors("estimate_fitted", v) for k, v in groups.items()},
    }


def corpus_flag(text: str) -> tuple[str, str]:
    """``KIND=GLOB``: a kind of text and the files that hold it."""
    kind, sep, pattern = text.partition("=")
    if not sep or not kind or not pattern:
        raise argparse.ArgumentTypeError(f"expected KIND=GLOB, got {text!r}")
    return kind, pattern


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``inflight bench token-estimate``'s flags."""
    p.add_argument("--url", required=True, help="the engine's base URL (vLLM's OpenAI server)")
    p.add_argument("--model", required=True)
    p.add_argument("--samples", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--min-chars", type=int, default=40)
    p.add_argument("--max-chars", type=int, default=6000)
    p.add_argument("--chars-per-token", type=float, default=tokens.DEFAULT_CHARS_PER_TOKEN)
    p.add_argument("--out-dir", type=Path, required=True)
    p.add_argument(
        "--corpus",
        type=corpus_flag,
        action="append",
        metavar="KIND=GLOB",
        help="texts to cut prompts from, by kind (repeatable; relative to the working "
        "directory); default: this repository's docs, Python modules and dashboards",
    )


def main(args: argparse.Namespace) -> int:
    import openai

    client = openai.OpenAI(base_url=args.url.rstrip("/") + "/v1", api_key="none", max_retries=0)
    rng = random.Random(args.seed)
    if args.corpus:
        sources: dict[str, tuple[str, ...]] = {}
        for kind, pattern in args.corpus:
            sources[kind] = (*sources.get(kind, ()), pattern)
        texts = corpus(Path.cwd(), sources)
    else:
        texts = corpus()
    if empty := sorted(k for k, v in texts.items() if not any(len(t) >= args.min_chars for t in v)):
        print(f"inflight bench token-estimate: no text of {args.min_chars}+ characters for "
              f"{', '.join(empty)}: give --corpus KIND=GLOB")  # fmt: skip
        return 2
    kinds = sorted(texts)
    rows: list[dict[str, Any]] = []
    for i in range(args.samples):
        source = kinds[i % len(kinds)]
        text = cut(rng, texts[source], args.min_chars, args.max_chars)
        if i % 2 == 0:
            request: dict[str, Any] = {"prompt": text}
            out = client.completions.create(model=args.model, prompt=text, max_tokens=1)
            kind, messages, chars = "completion", 0, len(text)
        else:
            split = rng.randrange(len(text) // 4 + 1)  # a system message, then the user's
            msgs = [
                {"role": "system", "content": text[:split]},
                {"role": "user", "content": text[split:]},
            ]
            request = {"messages": msgs}
            chat = client.chat.completions.create(model=args.model, messages=msgs, max_tokens=1)  # type: ignore[arg-type]
            kind, messages, chars = "chat", 2, len(text)
            out = chat  # type: ignore[assignment]
        assert out.usage is not None
        rows.append(
            {"i": i, "kind": kind, "source": source, "chars": chars, "messages": messages,
             "engine": out.usage.prompt_tokens, "request": request}
        )  # fmt: skip
    summary = summarize(rows, args.chars_per_token)
    summary.update(url=args.url, model=args.model, samples=args.samples, seed=args.seed,
                   min_chars=args.min_chars, max_chars=args.max_chars)  # fmt: skip
    args.out_dir.mkdir(parents=True, exist_ok=True)
    with (args.out_dir / "samples.jsonl").open("w") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if k != "request"}) + "\n")
    (args.out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0
