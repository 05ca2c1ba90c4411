"""``inflight up --model A --model B``: one router, two model pools, scaled apart.

Real processes (emulator replicas, router, Prometheus, scaler); the clients are the real
OpenAI SDK. Load goes to model A only: A's replicas scale, B's stay at one.
"""

from __future__ import annotations

import json
import threading
import urllib.request

import openai
import pytest

from inflight.statedir import read_timeline
from tests.integration.test_up import TS, start_up
from tests.support import wait_for

A, B = "model-a", "model-b"


def pools(info) -> dict[str, int]:
    """Ready endpoints by model, from the router's status."""
    with urllib.request.urlopen(info.router_url + "/router/status", timeout=5) as resp:
        doc = json.loads(resp.read())
    return {
        m["model"]: sum(1 for e in m["endpoints"] if e["state"] == "ready")
        for m in doc.get("models") or []
    }


def test_load_on_one_model_scales_only_its_replicas(procs, tmp_path) -> None:
    state = tmp_path / "state"
    flags = ("--time-scale", TS, "--max-replicas", "2", "--model", A, "--model", B)
    _, info = start_up(procs, state, *flags)
    wait_for(lambda: pools(info) == {A: 1, B: 1}, timeout_s=60, what="one replica a model")
    client = openai.OpenAI(base_url=info.router_url + "/v1", api_key="x", max_retries=0)
    assert sorted(m.id for m in client.models.list().data) == [A, B]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="model-c", prompt="hi", max_tokens=2)
    assert client.completions.create(model=B, prompt="hi", max_tokens=2).model == B

    stop = threading.Event()
    errors: list[BaseException] = []
    seen_b: list[int] = []

    def worker() -> None:
        while not stop.is_set():
            try:
                out = client.completions.create(model=A, prompt="hi", max_tokens=30)
                assert out.model == A
            except BaseException as exc:  # reported below
                errors.append(exc)
                return

    threads = [threading.Thread(target=worker) for _ in range(12)]  # 3x one replica's slots
    for t in threads:
        t.start()
    try:

        def a_scaled() -> bool:
            now = pools(info)
            seen_b.append(now.get(B, 0))
            return now.get(A) == 2

        wait_for(a_scaled, timeout_s=90, interval_s=0.2, what="model-a at 2 replicas")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors, errors[:3]
    assert set(seen_b) == {1}, "model-b's replicas changed under model-a's load"
    # The stack's timeline counts every model's replicas: model-a's 2 and model-b's 1, never
    # model-b's loop scaling on model-a's L (4).
    desired = [p.desired for p in read_timeline(state / "timeline.jsonl")]
    assert max(desired) == 3, desired
