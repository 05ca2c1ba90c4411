"""``trace-from-prometheus`` against a real Prometheus that scraped a real router under a
known open load: the rebuilt trace has the requests that were sent and their rate profile.

A real router (in front of a real emulator) is scraped every 0.5 s. The test sends two
phases of evenly spaced requests — 3 req/s for 16 s, then 10 req/s for 8 s — without
waiting for answers (open loop), and records when each was sent. vLLM itself cannot run
here, so its token histogram comes from a stand-in exporter: a prometheus_client registry
with vLLM's name, type and labels (``vllm:request_prompt_tokens{model_name, engine}``,
vLLM's 1-2-5 token buckets) in which the test observes known lengths; the output lengths
have no histogram, so ``--max-tokens`` is used.

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
* prompt lengths reproduce the histogram's buckets exactly: 128 requests over 10 + 30
  observations make whole shares (32 and 96).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import aiohttp
import pytest
from prometheus_api_client import PrometheusConnect
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest

from bench.trace import read_trace
from inflight import names
from sim import prom_trace
from tests.conftest import PrometheusFactory
from tests.support import ProcessTracker, Server, wait_for

SCRAPE_S = 0.5
MODEL = "trace-test-model"
PHASES = ((3.0, 16.0), (10.0, 8.0))  # (req/s, seconds): 48 + 80 requests
SLACK_S = 0.2
# vLLM's request_tokens buckets for max_model_len 2048 (build_1_2_5_buckets)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000)
PROMPTS = {15: 10, 70: 30}  # observed prompt length -> how many (buckets (10,20], (50,100])
LEAD_S = 1.5  # from the window's start to the first send: over 2 scrape intervals


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class VllmStandIn:
    """A loopback exporter of vLLM's prompt-token histogram (vLLM cannot run here)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.prompt = Histogram(
            "vllm:request_prompt_tokens",
            "Number of prefill tokens processed.",
            labelnames=(names.VLLM_MODEL_LABEL, names.VLLM_ENGINE_LABEL),
            buckets=TOKEN_BUCKETS,
            registry=self.registry,
        ).labels(MODEL, "0")
        self.httpd = make_server("127.0.0.1", 0, self.app, handler_class=_Quiet)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def app(self, environ: dict, start_response) -> list[bytes]:
        """The text format only, as vLLM's and the emulator's /metrics serve it (asked for
        OpenMetrics, prometheus_client would escape the colon in vLLM's names)."""
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST)])
        return [generate_latest(self.registry)]

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.httpd.server_port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def vllm() -> Iterator[VllmStandIn]:
    stand_in = VllmStandIn()
    yield stand_in
    stand_in.close()


def start_stack(procs: ProcessTracker) -> Server:
    emulator = procs.start_inflight(
        ["emulator", "--host", "127.0.0.1", "--port", "{port}", "--served-model-name", MODEL,
         "--max-num-seqs", "4", "--time-scale", "0.05", "--startup-s", "0"],
        name="emulator",
    )  # fmt: skip
    return procs.start_inflight(
        ["router", "--host", "127.0.0.1", "--port", "{port}", "--slots-per-endpoint", "4",
         "--endpoints", emulator.url],
        name="router",
    )  # fmt: skip


def send_open_loop(url: str, start_wall: float) -> list[float]:
    """Send PHASES' requests at their times from ``start_wall`` without waiting for answers;
    return the wall time each was sent (all answered 200, or the test fails)."""

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        offset = start_wall - time.time()  # wall → loop time
        base = loop.time() + offset
        sent: list[float] = []
        codes: list[int] = []
        body = {"model": MODEL, "prompt": "hello " * 20, "max_tokens": 4}
        async with aiohttp.ClientSession() as session:

            async def one() -> None:
                sent.append(time.time())
                async with session.post(url + "/v1/completions", json=body) as resp:
                    await resp.read()
                    codes.append(resp.status)

            tasks = []
            t = 0.0
            for rate, seconds in PHASES:
                n = round(rate * seconds)
                for i in range(n):
                    delay = base + t + i / rate - loop.time()
                    if delay > 0:
                        await asyncio.sleep(delay)  # open loop: the schedule, not a condition
                    tasks.append(asyncio.create_task(one()))
                t += seconds
            await asyncio.gather(*tasks)
        assert codes == [200] * len(codes), sorted(set(codes))
        return sent

    return asyncio.run(run())


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
    vllm: VllmStandIn,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    router = start_stack(procs)
    prom = prometheus_factory(
        jobs={"router": [router.url.removeprefix("http://")], "vllm": [vllm.target]},
        scrape_interval_s=SCRAPE_S,
    )
    client = PrometheusConnect(url=prom.url)
    counter = f'{names.ROUTER_REQUESTS_RECEIVED}{{job="router"}}'
    histogram = 'vllm:request_prompt_tokens_count{job="vllm"}'
    wait_for(lambda: latest(client, counter) == 0, 30, 0.1, "the router's first scrape")
    wait_for(lambda: latest(client, histogram) == 0, 30, 0.1, "the stand-in's first scrape")
    empty_from = time.time()
    # one more scrape, so the quiet window before the load has two samples
    wait_for(lambda: len(scrape_times(client, empty_from, time.time())) >= 1, 30, 0.1, "a scrape")
    start = time.time()
    sent = send_open_loop(router.url, start + LEAD_S)
    for length, count in PROMPTS.items():  # inside the window, at least one scrape from its ends
        for _ in range(count):
            vllm.prompt.observe(length)
    total = len(sent)
    assert total == sum(round(r * s) for r, s in PHASES)
    observed = sum(PROMPTS.values())
    wait_for(lambda: latest(client, counter) == total, 30, 0.1, "the last request's scrape")
    wait_for(lambda: latest(client, histogram) == observed, 30, 0.1, "the histogram's scrape")
    end = time.time()

    out = tmp_path / "trace.jsonl"
    args = ["--url", prom.url, "--selector", 'job="router"', "--vllm-selector", 'job="vllm"',
            "--start", str(start), "--end", str(end), "--max-tokens", "7",
            "--seed", "1"]  # fmt: skip
    assert prom_trace.main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    report = capsys.readouterr().out
    assert f"wrote {total} requests" in report
    assert f"prompt_tokens from vllm:request_prompt_tokens ({observed} observations)" in report
    assert "max_tokens from --max-tokens" in report

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
    # lengths: the histogram's buckets exactly; the fallback for max_tokens
    prompts = [r.prompt_tokens for r in trace]
    share = PROMPTS[15] / observed
    assert total * share == int(total * share)  # whole shares: 32 and 96
    assert sum(11 <= p <= 20 for p in prompts) == int(total * share)
    assert sum(51 <= p <= 100 for p in prompts) == total - int(total * share)
    assert {r.max_tokens for r in trace} == {7}

    # the same flags and seed give the same trace
    again = tmp_path / "again.jsonl"
    assert prom_trace.main([*args, "--out", str(again)]) == 0
    assert again.read_text() == out.read_text()

    # errors: an existing --out, a selector that matches nothing, a quiet window, no
    # histogram for max_tokens and no fallback
    capsys.readouterr()
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
    no_fallback = [a for a in args if a not in ("--max-tokens", "7")]
    assert prom_trace.main([*no_fallback, "--out", str(tmp_path / "n.jsonl")]) == 1
    assert "give --max-tokens" in capsys.readouterr().err
    assert not any((tmp_path / n).exists() for n in ("x.jsonl", "q.jsonl", "n.jsonl"))
    assert json.loads(out.read_text().splitlines()[0])["max_tokens"] == 7


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
