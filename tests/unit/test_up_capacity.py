"""``inflight up --capacity``, ``--token-admission`` and the emulator's ``--engine-arg``:
what the scaler's trigger, the router and each replica are given, and the refusals
(docs/capacity.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from external_scaler.metadata import parse_metadata
from external_scaler.sources.promql import kv_selector
from inflight import names
from inflight.cli import build_parser
from inflight.config import ConfigError, load
from inflight.emulator.cli import EmulatorSettings
from inflight.engines import vllm_cpu
from inflight.up.cli import UpSettings, _vllm_max_model_len, settings_from_args
from inflight.up.model_pools import ModelsStack
from inflight.up.stack import REPLICAS_JOB, router_args
from tests.fake_replica import COMMAND as FAKE_REPLICA


def settings(*flags: str) -> UpSettings:
    return settings_from_args(build_parser().parse_args(["up", *flags]))


KV_BOUND = ("--engine-arg=--num-gpu-blocks=40", "--engine-arg=--max-model-len=2048")


@pytest.mark.parametrize("mode", ["auto", "requests"])
def test_capacity_goes_to_the_trigger_with_the_replicas_job_as_capacity_selector(mode) -> None:
    meta = settings("--capacity", mode).trigger_metadata
    assert meta[names.META_CAPACITY] == mode
    spec = parse_metadata(meta)  # the scaler's own reading
    assert spec.capacity == mode
    # vLLM's KV series are found under the job the local Prometheus scrapes the replicas in.
    assert kv_selector(spec) == f'job="{REPLICAS_JOB}"'


def test_capacity_defaults_to_auto() -> None:
    assert settings().trigger_metadata[names.META_CAPACITY] == "auto"


def test_each_model_reads_its_own_replicas_kv_series() -> None:
    stack = ModelsStack(settings("--model", "a", "--model", "b", "--capacity", "requests"))
    for model in ("a", "b"):
        spec = parse_metadata(stack.model_metadata(model))
        assert spec.capacity == "requests"
        assert kv_selector(spec) == f'job="{REPLICAS_JOB}",model_name="{model}"'


def test_capacity_from_scaler_metadata_as_bench_compare_variants_give_it() -> None:
    # saturation[capacity=requests] reaches inflight up as --scaler-metadata.
    meta = settings("--scaler-metadata", "capacity=requests").trigger_metadata
    assert meta[names.META_CAPACITY] == "requests"


def test_a_capacity_selector_override_wins() -> None:
    meta = settings("--scaler-metadata", 'capacitySelector=job="vllm"').trigger_metadata
    assert meta[names.META_CAPACITY_SELECTOR] == 'job="vllm"'


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--capacity", "auto", "--scaler-metadata", "capacity=requests"],
            r"--scaler-metadata.*'capacity' is also given by --capacity",
        ),
        (["--scaler-metadata", "capacity=tokens"], r"--scaler-metadata.*capacity"),
        (["--engine-arg=--num-gpu-blocks=x"], r"--engine-arg.*--num-gpu-blocks: must be an int"),
        (["--engine-arg=--no-such-flag=1"], r"--engine-arg.*unrecognized arguments: --no-such"),
        # 40 blocks cannot hold one sequence of the emulator's default --max-model-len.
        (["--engine-arg=--num-gpu-blocks=40"], r"--engine-arg.*fewer than one sequence"),
        (["--engine-arg=--max-num-seqs=3"], r"--engine-arg.*use inflight up's --slots-per-replica"),
        (["--engine-arg=--time-scale=2"], r"--engine-arg.*use inflight up's --time-scale"),
        (["--engine-arg=--port=8000"], r"--engine-arg.*inflight up sets it for each replica"),
    ],
)  # fmt: skip
def test_refusals_name_the_flag(flags, message) -> None:
    with pytest.raises(ConfigError, match=message):
        settings(*flags)


def test_a_capacity_that_is_no_mode_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        settings("--capacity", "tokens")
    assert "--capacity" in capsys.readouterr().err


def test_the_emulator_takes_engine_args_after_inflights_own() -> None:
    command = list(settings(*KV_BOUND).replica_command)
    assert command[-2:] == ["--num-gpu-blocks=40", "--max-model-len=2048"]
    assert command.index("--max-num-seqs") < command.index("--num-gpu-blocks=40")
    # Each model's replicas too (--model).
    two = settings("--model", "a", "--model", "b", *KV_BOUND)
    assert two.replica_command_for("b")[-2:] == ("--num-gpu-blocks=40", "--max-model-len=2048")


# --- --token-admission: the router admits on KV tokens too (docs/capacity.md) -------------


def router_config(config: UpSettings) -> Any:
    """The router's own reading of the arguments inflight up gives it."""
    from router.config import RouterSettings

    argv = router_args(config, Path("/state/endpoints.json"))
    return load(RouterSettings, build_parser().parse_args(argv))


def test_token_admission_is_on_by_default_and_off_by_name(monkeypatch) -> None:
    argv = router_args(settings(), Path("/state/endpoints.json"))
    assert "--hold-when-full" in argv and "--discover-kv-tokens" in argv
    assert router_config(settings()).token_admission
    for off in (settings("--no-token-admission"), _env_off(monkeypatch)):
        argv = router_args(off, Path("/state/endpoints.json"))
        assert "--discover-kv-tokens" not in argv and "--max-model-len" not in argv
        assert not router_config(off).token_admission and not off.router_admits_tokens


def _env_off(monkeypatch) -> UpSettings:
    monkeypatch.setenv("INFLIGHT_UP_TOKEN_ADMISSION", "false")
    try:
        return settings()
    finally:
        monkeypatch.delenv("INFLIGHT_UP_TOKEN_ADMISSION")


def test_the_start_waits_for_kv_capacity_where_the_replicas_state_it() -> None:
    fake = f"{FAKE_REPLICA} --port {{port}}"
    assert settings().waits_for_kv_capacity  # the emulator states it
    assert not settings("--replica-cmd", fake).waits_for_kv_capacity  # may not: no wait
    assert settings("--replica-cmd", fake, "--token-admission").waits_for_kv_capacity
    assert not settings("--no-token-admission").waits_for_kv_capacity


def test_token_admission_and_no_token_admission_contradict() -> None:
    with pytest.raises(ConfigError, match=r"--no-token-admission.*--token-admission"):
        settings("--token-admission", "--no-token-admission")


@pytest.mark.parametrize("policy", ["vllm-waiting", "hpa-rps"])
def test_token_admission_by_default_stays_off_where_the_router_holds_nothing(policy: str) -> None:
    config = settings("--policy", policy)  # not refused: the default is where the router holds
    assert not config.router_admits_tokens
    assert "--discover-kv-tokens" not in router_args(config, Path("/e.json"))


@pytest.mark.parametrize(
    ("flags", "max_model_len"),
    [
        ((), EmulatorSettings().max_model_len),  # the emulator's own default
        (KV_BOUND, 2048),  # as the emulator reads its --engine-arg
        (("--model", "a", "--model", "b", *KV_BOUND), 2048),  # every pool's dispatcher
    ],
)
def test_token_admission_discovers_each_replicas_kv_with_the_known_max_model_len(
    flags: tuple[str, ...], max_model_len: int
) -> None:
    config = settings("--token-admission", *flags)
    router = router_config(config)
    assert router.hold_when_full and router.discover_kv_tokens and router.token_admission
    assert router.max_model_len == max_model_len
    assert router.kv_tokens == 0  # discovered, never assumed
    # The hold order is kept: the deadline (or classes) still reach the router.
    assert router.hold_deadline_s > 0
    if config.models:
        assert router.model_pools  # one router: each pool's dispatcher is made alike


def test_token_admission_with_a_replica_command_of_ones_own_discovers_max_model_len() -> None:
    config = settings("--token-admission", "--replica-cmd", "vllm serve m --port {port}")
    argv = router_args(config, Path("/state/endpoints.json"))
    assert "--discover-kv-tokens" in argv and "--max-model-len" not in argv
    assert router_config(config).max_model_len == 0  # read from /v1/models


@pytest.mark.parametrize(
    ("engine_args", "expected"),
    [
        ([], vllm_cpu.DEFAULT_MAX_MODEL_LEN),
        (["--num-gpu-blocks-override=40"], vllm_cpu.DEFAULT_MAX_MODEL_LEN),
        (["--max-model-len=2048"], 2048),
        (["--max-model-len", "1024", "--dtype", "float32"], 1024),
        (["--max-model-len=2048", "--max_model_len=512"], 512),  # vLLM takes the last
        (["--max-model-len=4k"], None),  # a form vLLM reads and we do not: discovered
        (["--max-model-len"], None),
    ],
)
def test_vllm_cpus_max_model_len_is_its_last_engine_arg(engine_args, expected) -> None:
    assert _vllm_max_model_len(engine_args) == expected


@pytest.mark.parametrize("policy", ["vllm-waiting", "hpa-rps"])
def test_token_admission_is_refused_where_the_router_holds_nothing(policy: str) -> None:
    with pytest.raises(ConfigError, match=r"--token-admission.*router holds none"):
        settings("--token-admission", "--policy", policy)


@pytest.mark.parametrize("policy", ["qps", "kpa", "epp-queue"])
def test_token_admission_goes_with_every_policy_whose_router_holds(policy: str) -> None:
    argv = router_args(settings("--token-admission", "--policy", policy), Path("/e.json"))
    assert "--hold-when-full" in argv and "--discover-kv-tokens" in argv


def test_token_admission_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("INFLIGHT_UP_TOKEN_ADMISSION", "true")
    assert settings().token_admission
