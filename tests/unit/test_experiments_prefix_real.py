"""experiments.prefix_real's pure parts: the client's command (vLLM's own `vllm bench serve`,
the workloads issue 38 names) and the summary table."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments import prefix_real
from inflight.engines import vllm_cpu


def test_the_client_is_vllms_own_with_each_workload(monkeypatch: pytest.MonkeyPatch) -> None:
    class Install:
        vllm_bin = Path("/v/bin/vllm")

        def model_dir(self, name: str) -> Path:
            return Path("/models") / name

    monkeypatch.setattr(vllm_cpu, "load_install", lambda home: Install())
    args = prefix_real.parse_args(["--out-dir", "/tmp/x"])
    out = Path("/tmp/x/run.json")
    shared = prefix_real.client_argv(args, "shared", "http://127.0.0.1:1", out)
    assert shared[:3] == ["/v/bin/vllm", "bench", "serve"]
    at = shared.index
    assert shared[at("--dataset-name") + 1] == "prefix_repetition"
    assert shared[at("--prefix-repetition-num-prefixes") + 1] == "8"
    assert shared[at("--prefix-repetition-prefix-len") + 1] == "1500"
    assert shared[at("--tokenizer") + 1] == "/models/llama-8m"
    assert shared[at("--result-filename") + 1] == "run.json"
    hot = prefix_real.client_argv(args, "hot", "http://127.0.0.1:1", out)
    assert hot[hot.index("--prefix-repetition-num-prefixes") + 1] == "1"
    none = prefix_real.client_argv(args, "none", "http://127.0.0.1:1", out)
    assert none[none.index("--dataset-name") + 1] == "random"
    assert none[none.index("--random-input-len") + 1] == "1600"
    assert shared[at("--request-rate") + 1] == "3.0" and "--max-concurrency" not in shared
    closed = prefix_real.parse_args(["--out-dir", "/tmp/x", "--max-concurrency", "8"])
    loop = prefix_real.client_argv(closed, "shared", "http://127.0.0.1:1", out)
    assert loop[loop.index("--request-rate") + 1] == "inf"
    assert loop[loop.index("--max-concurrency") + 1] == "8"


def test_the_summary_gives_each_pair_its_medians() -> None:
    row = {"ttft_p50_ms": 100.0, "ttft_p90_ms": 300.0, "request_throughput": 2.5, "hit_rate": 0.5}
    rows = [
        {"workload": "shared", "dispatch": "prefix", **row},
        {"workload": "shared", "dispatch": "prefix", **row, "ttft_p50_ms": 120.0},
        {"workload": "shared", "dispatch": "least-outstanding", **row, "hit_rate": 0.25},
    ]
    table = prefix_real.summarize(rows)
    assert "| shared | prefix | 2 | 110 | 300 | 2.50 | 0.500 |" in table
    assert "| shared | least-outstanding | 1 | 100 | 300 | 2.50 | 0.250 |" in table
