"""``inflight sim tune --kv-blocks/--block-size/--max-model-len`` and ``--no-token-admission``:
the search's worker processes simulate the cache and the router's admission that
``inflight sim run|compare`` would, the output says which, and bad values are named."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from inflight.cli import build_parser
from inflight.emulator.profile import Profile
from inflight.planes.policy_catalogue import parse_policies
from inflight.sim.cli import _plan, main
from inflight.sim.tune_cli import (
    TUNE_KEYS,
    WORKLOAD_KEYS,
    _config,
    _figures,
    _seed_plan,
    workload_flags,
)

# 600 + 100 tokens a request: 6 blocks of 128. 12 blocks (11 usable) hold one such request
# while the default cache holds every one of the 4 slots' longest sequence.
LONG = ["--arrivals", "poisson:0:1,100:3,200:1", "--prompt-tokens", "600",
        "--max-tokens", "100", "--min-replicas", "1", "--max-replicas", "3",
        "--startup-s", "30"]  # fmt: skip
KV = ["--kv-blocks", "12"]
SPACE = ["--targets", "1,0.75", "--down-windows-s", "60", "--growth-horizons-s", "0",
         "--attainment", "0.3", "--seeds", "1"]  # fmt: skip


def _args(*extra: str) -> argparse.Namespace:
    return build_parser().parse_args(["sim", "tune", *LONG, *extra])


def _tune(args: list[str], out: Path) -> tuple[int, str, str, dict[str, Any]]:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["sim", "tune", *args, "--out", str(out)])
    body = json.loads(out.read_text()) if out.exists() else {}
    return code, stdout.getvalue(), stderr.getvalue(), body


def test_every_flag_of_tune_reaches_the_workers_or_is_tunes_own() -> None:
    # A workload flag left out of WORKLOAD_KEYS is one the workers silently ignore (the
    # main process's plan has it, theirs do not): every parsed flag is in one list.
    given = set(vars(_args()))
    assert given - set(TUNE_KEYS) == set(WORKLOAD_KEYS)


def test_the_workers_config_has_the_cache_and_token_admission() -> None:
    [saturation] = parse_policies("saturation", start_replicas=1)
    for extra, blocks, admits in (
        ([], None, True),  # the default cache; token admission on, as run|compare's
        ([*KV, "--block-size", "64"], 12, True),
        ([*KV, "--no-token-admission"], 12, False),
    ):
        a = _args(*extra)
        # the flags travel to the workers pickled, and rebuild their plan and config there
        flags = pickle.loads(pickle.dumps(workload_flags(a)))
        config = _config(flags, _plan(argparse.Namespace(**dict(flags)), 1), saturation, 1)
        assert config.token_admission is admits
        if blocks is None:
            assert config.profile == Profile()
        else:
            assert config.profile.kv_blocks == blocks
            assert config.profile.block_size == (64 if "--block-size" in extra else 128)


def test_a_bound_cache_changes_what_the_workers_measure() -> None:
    [fixed] = parse_policies("fixed:1", start_replicas=1)
    free = _figures(workload_flags(_args()), fixed, 1)
    bound = _figures(workload_flags(_args(*KV)), fixed, 1)
    slots_only = _figures(workload_flags(_args(*KV, "--no-token-admission")), fixed, 1)
    # one request at a time instead of four: fewer within the TTFT
    assert bound[0] < free[0]
    assert slots_only != bound  # the router's admission reaches the runs too


def test_tune_on_a_bound_cache_says_so_and_differs(tmp_path: Path) -> None:
    # In this process (--jobs 1); with worker processes: tests/component/test_sim_tune_kv_workers.py
    assert_tune_on_a_bound_cache_says_so_and_differs(tmp_path, jobs="1")


def assert_tune_on_a_bound_cache_says_so_and_differs(tmp_path: Path, jobs: str) -> None:
    code, out, err, body = _tune([*LONG, *SPACE, *KV, "--jobs", jobs], tmp_path / "kv.json")
    assert code == 0, err
    code0, out0, err0, body0 = _tune([*LONG, *SPACE, "--jobs", jobs], tmp_path / "free.json")
    assert code0 == 0, err0
    w, w0 = body["workload"], body0["workload"]
    assert (w["kv_blocks"], w["block_size"], w["kv_cache_size_tokens"]) == (12, 128, 1536)
    assert w["max_model_len"] == 11 * 128 and w["router_token_admission"] is True
    assert "kv_blocks" not in w0 and w0["router_token_admission"] is True
    assert "KV cache 12 blocks of 128 tokens" in out and "tokens and slots" in out
    assert "KV cache 12 blocks of 128 tokens" in err
    assert "never binds" in out0
    # the search's own runs (the workers'), not only the header, saw the cache
    per = {json.dumps(j["metadata"]): j["slo_attainment"] for j in body["judged"]}
    per0 = {json.dumps(j["metadata"]): j["slo_attainment"] for j in body0["judged"]}
    shared = set(per) & set(per0)
    assert shared and all(per[k] < per0[k] for k in shared)


def test_no_token_admission_is_recorded(tmp_path: Path) -> None:
    args = [*LONG, *SPACE, *KV, "--no-token-admission", "--jobs", "1"]
    code, out, err, body = _tune(args, tmp_path / "t.json")
    assert code == 0, err
    assert body["workload"]["router_token_admission"] is False
    assert "slots only" in out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--kv-blocks", "1"], "--kv-blocks"),
        (["--kv-blocks", "0"], "--kv-blocks"),
        (["--block-size", "0"], "--block-size"),
        (["--max-model-len", "-5"], "--max-model-len"),
        (["--kv-blocks", "4", "--max-model-len", "4000"], "--max-model-len 4000"),
    ],
)
def test_bad_cache_values_are_named_before_any_run(
    tmp_path: Path, extra: list[str], needle: str
) -> None:
    code, _, err, body = _tune([*LONG, *SPACE, *extra], tmp_path / "t.json")
    assert code == 2 and needle in err and "error" in err
    assert "simulations" not in err and not body  # nothing ran, nothing written


def test_the_priority_flags_reach_the_workers_too() -> None:
    # --priority-class is a list (repeatable): the workers' flags must hash (their plan
    # cache) and keep it, or the workers would run without the classes the header names.
    a = _args("--priority-mix", "0:0.5,10:0.5", "--priority-class", "hi:0:1.5",
              "--priority-class", "lo:100:fifo", "--max-late-s", "60")  # fmt: skip
    flags = workload_flags(a)
    hash(flags)
    [saturation] = parse_policies("saturation", start_replicas=1)
    plan = _seed_plan(flags, 1)
    config = _config(flags, plan, saturation, 1)
    assert config.priority_classes == ("hi:0:1.5", "lo:100:fifo") and config.max_late_s == 60
    assert {r.priority for r in plan.requests} == {0, 10}
