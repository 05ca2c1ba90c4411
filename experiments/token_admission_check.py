"""Where concurrent long requests wait: in the engine's queue or at the router (issue 23).

``python -m experiments.token_admission_check --router-url R --engine-url E --model M
--out FILE``: sends ``--requests`` completions of ``--prompt-tokens`` token ids +
``--max-tokens`` output tokens at once through the router (OpenAI SDK, one thread each) and,
until all are answered, polls every ``--poll-s``: the engine's ``vllm:num_requests_running``
and ``vllm:num_requests_waiting``, the router's ``router_queued_requests`` and its token
gauges. Writes the samples and a summary (the most requests in the engine at once, the most
held at the router, the answers) as JSON and prints the summary.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from inflight import names


def scrape(url: str) -> dict[str, float]:
    """Each metric's samples summed (one engine, one endpoint)."""
    with urllib.request.urlopen(url + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m experiments.token_admission_check",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--router-url", required=True)
    p.add_argument("--engine-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=1800)
    p.add_argument("--max-tokens", type=int, default=200)
    p.add_argument("--poll-s", type=float, default=0.1)
    p.add_argument("--timeout-s", type=float, default=600.0)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    import openai

    client = openai.OpenAI(
        base_url=args.router_url.rstrip("/") + "/v1", api_key="none", max_retries=0,
        timeout=args.timeout_s,
    )  # fmt: skip
    answers: list[dict[str, Any]] = []

    def send(i: int) -> None:
        t0 = time.monotonic()
        try:
            out = client.completions.create(
                model=args.model,
                prompt=[(i * 7919 + k) % 5000 + 10 for k in range(args.prompt_tokens)],
                max_tokens=args.max_tokens,
                extra_body={"ignore_eos": True},
            )
            usage = out.usage
            answers.append(
                {"i": i, "s": time.monotonic() - t0,
                 "prompt_tokens": usage.prompt_tokens if usage else None,
                 "completion_tokens": usage.completion_tokens if usage else None}
            )  # fmt: skip
        except Exception as exc:  # reported in the summary
            answers.append({"i": i, "s": time.monotonic() - t0, "error": repr(exc)})

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(args.requests)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    samples = []
    while len(answers) < args.requests and time.monotonic() - t0 < args.timeout_s:
        engine, router = scrape(args.engine_url), scrape(args.router_url)
        samples.append(
            {"t": round(time.monotonic() - t0, 3),
             "engine_running": engine.get(names.VLLM_RUNNING, 0.0),
             "engine_waiting": engine.get(names.VLLM_WAITING, 0.0),
             "router_inflight": router.get(names.ROUTER_INFLIGHT, 0.0),
             "router_held": router.get(names.ROUTER_QUEUED, 0.0),
             "router_tokens_in_flight": router.get(names.ROUTER_ENDPOINT_INFLIGHT_TOKENS, 0.0),
             "router_tokens_held": router.get(names.ROUTER_QUEUED_TOKENS, 0.0),
             "router_kv_tokens": router.get(names.ROUTER_ENDPOINT_KV_TOKENS, 0.0)}
        )  # fmt: skip
        time.sleep(args.poll_s)
    summary = {
        "router_url": args.router_url,
        "requests": args.requests,
        "prompt_tokens": args.prompt_tokens,
        "max_tokens": args.max_tokens,
        "most_in_engine": max(s["engine_running"] + s["engine_waiting"] for s in samples),
        "most_waiting_in_engine": max(s["engine_waiting"] for s in samples),
        "most_running_in_engine": max(s["engine_running"] for s in samples),
        "most_held_at_router": max(s["router_held"] for s in samples),
        "router_kv_tokens": max(s["router_kv_tokens"] for s in samples),
        "answers": sorted(answers, key=lambda a: a["i"]),
        "wall_s": round(time.monotonic() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "samples": samples}, indent=1) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
