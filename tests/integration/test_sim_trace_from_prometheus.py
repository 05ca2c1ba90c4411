"""``trace-from-prometheus`` against a real Prometheus that scraped a real router and a real
emulator under a known open load: the rebuilt trace has the requests that were sent, their
rate profile and their lengths.

A real router in front of a real emulator (``--max-model-len 2048``) is scraped every
0.5 s. The test sends two phases of evenly spaced requests — 3 req/s for 16 s, then 10 req/s
for 8 s — without waiting for answers (open loop), and records when each was sent and the
prompt and completion tokens the emulator's answer counted. Lengths come from the
emulator's own ``vllm:request_prompt_tokens`` and ``vllm:request_generation_tokens``
(vLLM's names, labels and 1-2-5 token buckets up to 2048): a quarter of the prompts are 15
tokens, the rest 70; half the requests ask for 4 tokens, half for 40.

What must hold, and why those tolerances:

* the request count is **exact**: the window starts 1.5 s (3 scrapes) before the first
  send and ends after Prometheus scraped the last one, so every arrival lies in an
  interval between two scrapes inside the window, and each interval contributes exactly
  its counted increase;
* per phase, the rebuilt count differs from the sent count by at most the requests sent
  within Δ of the phase's two boundaries, where Δ is the longest interval between two
  scrapes of the counter (plus 0.2 s for the request's trip to the router and the
  scrape's read after its timestamp): a rebuilt time lies in the same scrape interval as
  its request's arrival, so only requests that near a boundary can cross it;
* lengths reproduce the histograms' buckets exactly: every request finished inside the
  window, and 128 requests in shares of 1/4 and 1/2 make whole counts per bucket; so the
  rebuilt mean prompt and output lengths differ from the sent means by at most the mean
  width of the buckets the lengths fell in (within a bucket a length is drawn uniformly).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import statistics
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from prometheus_api_client import PrometheusConnect

from inflight import names
from inflight.sim import prom_trace
from inflight.workload.trace import read_trace
from tests.conftest import PrometheusFactory
from tests.support import ProcessTracker, Server, wait_for

SCRAPE_S = 0.5
MODEL = "trace-test-model"
PHASES = ((3.0, 16.0), (10.0, 8.0))  # (req/s, seconds): 48 + 80 requests
SLACK_S = 0.2
MAX_MODEL_LEN = 2048
# vLLM's request_tokens buckets for max_model_len 2048 (build_1_2_5_buckets)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
# request i: a 15-token prompt (60 characters) when i % 4 == 0, else 70 (280); max_tokens
# 4 when i is even, else 40: buckets (10, 20] and (50, 100]; (2, 5] and (20, 50]
PROMPT_CHARS = (60, 280, 280, 280)
MAX_TOKENS = (4, 40)
LEAD_S = 1.5  # from the window's start to the first send: over 2 scrape intervals
HISTOGRAMS = (names.VLLM_REQUEST_PROMPT_TOKENS, names.VLLM_REQUEST_GENERATION_TOKENS)


def start_stack(procs: ProcessTracker) -> tuple[Server, Server]:
    """The emulator and the router in front of it."""
    emulator = procs.start_inflight(
        ["emulator", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", MODEL,
         "--max-num-seqs", "4", "--time-scale", "0.05", "--startup-s", "0",
         "--max-model-len", str(MAX_MODEL_LEN)],
        name="emulator",
    )  # fmt: skip
    router = procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--slots-per-endpoint", "4",
         "--endpoints", emulator.url],
        name="router",
    )  # fmt: skip
    return emulator, router


def send_open_loop(url: str, start_wall: float) -> tuple[list[float], list[tuple[int, int]]]:
    """Send PHASES' requests at their times from ``start_wall`` without waiting for answers;
    return the wall time each was sent and, per answer, the (prompt, completion) tokens its
    usage counted (all answered 200, or the test fails)."""

    async def run() -> tuple[list[float], list[tuple[int, int]]]:
        loop = asyncio.get_running_loop()
        offset = start_wall - time.time()  # wall → loop time
        base = loop.time() + offset
        sent: list[float] = []
        codes: list[int] = []
        usage: list[tuple[int, int]] = []
        async with aiohttp.ClientSession() as session:

            async def one(i: int) -> None:
                body = {
                    "model": MODEL,
                    "prompt": "x" * PROMPT_CHARS[i % len(PROMPT_CHARS)],
                    "max_tokens": MAX_TOKENS[i % len(MAX_TOKENS)],
                }
                sent.append(time.time())
                async with session.post(url + "/v1/completions", json=body) as resp:
                    codes.append(resp.status)
                    if resp.status != 200:
                        await resp.read()
                        return
                    counted = (await resp.json())["usage"]
                    usage.append((counted["prompt_tokens"], counted["completion_tokens"]))

            tasks = []
            t = 0.0
            i = 0
            for rate, seconds in PHASES:
                n = round(rate * seconds)
                for k in range(n):
                    delay = base + t + k / rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)  # open loop: the schedule, not a condition
                    tasks.append(asyncio.create_task(one(i)))
                    i += 1
                t += seconds
            await asyncio.gather(*tasks)
        assert codes == [200] * len(codes), sorted(set(codes))
        return sent, usage

    return asyncio.run(run())


def bucket_of(tokens: int) -> tuple[float, float]:
    """The token bucket ``(lo, hi]`` that holds ``tokens``."""
    i = bisect.bisect_left(TOKEN_BUCKETS, tokens)
    lo = 0.0 if i == 0 else float(TOKEN_BUCKETS[i - 1])
    return lo, float(TOKEN_BUCKETS[i]) if i < len(TOKEN_BUCKETS) else float("inf")


def assert_lengths_match(rebuilt: list[int], sent: list[int], what: str) -> None:
    """Per bucket the same counts; means apart by at most the mean width of those buckets."""
    assert Counter(map(bucket_of, rebuilt)) == Counter(map(bucket_of, sent)), what
    width = statistics.fmean(hi - lo for lo, hi in map(bucket_of, sent))
    gap = abs(statistics.fmean(rebuilt) - statistics.fmean(sent))
    assert gap <= width, (what, statistics.fmean(rebuilt), statistics.fmean(sent), width)


def scrape_times(client: PrometheusConnect, start: float, end: float) -> list[float]:
    """Timestamps of the router counter's samples in ``(start, end]``."""
    result = client.custom_query(
        f'{names.ROUTER_REQUESTS_RECEIVED}{{job="router"}}[{int(end - start) + 1}s]',
        params={"time": f"{end:.3f}"},
    )
    assert len(result) == 1, result
    return [float(t) for t, _ in result[0]["values"] if float(t) > start]


def latest(client: PrometheusConnect, query: str) -> float | None:
    result = client.custom_query(query)
    return float(result[0]["value"][1]) if result else None


def test_a_trace_rebuilt_from_prometheus_matches_the_load_sent(
    procs: ProcessTracker,
    prometheus_factory: PrometheusFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    emulator, router = start_stack(procs)
    prom = prometheus_factory(
        jobs={
            "router": [router.url.removeprefix("http://")],
            "vllm": [emulator.url.removeprefix("http://")],
        },
        scrape_interval_s=SCRAPE_S,
    )
    client = PrometheusConnect(url=prom.url)
    counter = f'{names.ROUTER_REQUESTS_RECEIVED}{{job="router"}}'
    counts = [f'{h}_count{{job="vllm"}}' for h in HISTOGRAMS]
    wait_for(lambda: latest(client, counter) == 0, 30, 0.1, "the router's first scrape")
    wait_for(
        lambda: all(latest(client, c) == 0 for c in counts), 30, 0.1, "the emulator's first scrape"
    )
    empty_from = time.time()
    # one more scrape, so the quiet window before the load has two samples
    wait_for(lambda: len(scrape_times(client, empty_from, time.time())) >= 1, 30, 0.1, "a scrape")
    start = time.time()
    sent, usage = send_open_loop(router.url, start + LEAD_S)
    total = len(sent)
    assert total == sum(round(r * s) for r, s in PHASES)
    sent_prompts = [p for p, _ in usage]
    sent_outputs = [o for _, o in usage]
    # whole shares of 128: 32 and 96 prompts, 64 and 64 outputs
    assert Counter(sent_prompts) == {15: total // 4, 70: total - total // 4}
    assert Counter(sent_outputs) == {4: total // 2, 40: total // 2}
    wait_for(lambda: latest(client, counter) == total, 30, 0.1, "the last request's scrape")
    # every request finished (was observed) before the window's end
    wait_for(
        lambda: all(latest(client, c) == total for c in counts), 30, 0.1, "the histograms' scrape"
    )
    end = time.time()

    out = tmp_path / "trace.jsonl"
    args = ["--url", prom.url, "--selector", 'job="router"', "--vllm-selector", 'job="vllm"',
            "--start", str(start), "--end", str(end), "--seed", "1"]  # fmt: skip
    assert prom_trace.main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    report = capsys.readouterr().out
    assert f"wrote {total} requests" in report
    assert f"prompt_tokens from {HISTOGRAMS[0]} ({total} observations)" in report
    assert f"max_tokens from {HISTOGRAMS[1]} ({total} observations)" in report

    trace = read_trace(out)
    # the count is exact
    assert len(trace) == total
    # the rate profile, per phase, within the requests sent near the phase's boundaries
    times = sorted(start + r.t_s for r in trace)
    scrapes = scrape_times(client, start - 5, end)
    delta = max(b - a for a, b in itertools.pairwise(scrapes)) + SLACK_S
    assert delta < 2.0, f"scrapes {delta:.2f} s apart: too far for the profile check"
    phase_start = start + LEAD_S
    rates = []
    for _rate, seconds in PHASES:
        phase_end = phase_start + seconds
        rebuilt = sum(phase_start <= t < phase_end for t in times)
        # (a send scheduled at a boundary may be recorded a few ms early)
        sent_in = sum(phase_start - 0.01 <= t < phase_end - 0.01 for t in sent)
        near = sum(abs(t - b) <= delta for t in sent for b in (phase_start, phase_end))
        assert abs(rebuilt - sent_in) <= near, (rebuilt, sent_in, near, delta)
        assert near < sent_in / 2, "the bound would not tell the phases apart"
        rates.append(rebuilt / seconds)
        phase_start = phase_end
    # the rebuilt profile: 3 then 10 req/s, each within its bound above
    assert rates[1] > 2 * rates[0], rates
    # lengths, from the emulator's histograms: per bucket exact, means within resolution
    assert_lengths_match([r.prompt_tokens for r in trace], sent_prompts, "prompt_tokens")
    assert_lengths_match([r.max_tokens for r in trace], sent_outputs, "max_tokens")

    # the same flags and seed give the same trace
    again = tmp_path / "again.jsonl"
    assert prom_trace.main([*args, "--out", str(again)]) == 0
    assert again.read_text() == out.read_text()

    # no histogram matches --vllm-selector: the length flags are used
    capsys.readouterr()
    elsewhere = [a if a != 'job="vllm"' else 'job="nosuch"' for a in args]
    flags = tmp_path / "flags.jsonl"
    with_flags = [*elsewhere, "--prompt-tokens", "5", "--max-tokens", "7"]
    assert prom_trace.main([*with_flags, "--out", str(flags)]) == 0, capsys.readouterr().err
    report = capsys.readouterr().out
    assert "prompt_tokens from --prompt-tokens; max_tokens from --max-tokens" in report
    assert {(r.prompt_tokens, r.max_tokens) for r in read_trace(flags)} == {(5, 7)}

    # errors: an existing --out, a selector that matches nothing, a quiet window, no
    # histogram for max_tokens and no fallback
    assert prom_trace.main([*args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--out: {out} exists" in err and "never overwritten" in err
    base = [a if a != 'job="router"' else 'job="nosuch"' for a in args]
    assert prom_trace.main([*base, "--out", str(tmp_path / "x.jsonl")]) == 1
    err = capsys.readouterr().err
    assert 'no series router_requests_received_total{job="nosuch"}' in err
    assert "'router'" in err  # the hint names the job that has the counter
    quiet = ["--url", prom.url, "--selector", 'job="router"', "--start", str(empty_from),
             "--end", str(start), "--prompt-tokens", "5", "--max-tokens", "5"]  # fmt: skip
    assert prom_trace.main([*quiet, "--out", str(tmp_path / "q.jsonl")]) == 1
    assert "no request arrived" in capsys.readouterr().err
    no_fallback = [*elsewhere, "--prompt-tokens", "5"]
    assert prom_trace.main([*no_fallback, "--out", str(tmp_path / "n.jsonl")]) == 1
    assert "give --max-tokens" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in ("x.jsonl", "q.jsonl", "n.jsonl"))


def test_an_unreachable_prometheus_is_a_clear_error(
    refused_port, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{refused_port()}"
    code = prom_trace.main(
        ["--url", url, "--start", "1000", "--end", "2000", "--max-tokens", "5",
         "--prompt-tokens", "5", "--out", str(tmp_path / "t.jsonl")]
    )  # fmt: skip
    assert code == 1
    assert f"cannot reach Prometheus at {url}" in capsys.readouterr().err
    assert not (tmp_path / "t.jsonl").exists()
