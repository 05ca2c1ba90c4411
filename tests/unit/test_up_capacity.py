"""``inflight up --capacity`` and the emulator's ``--engine-arg``: what the scaler's trigger
and each replica are given, and the refusals (docs/capacity.md)."""

from __future__ import annotations

import pytest

from external_scaler.metadata import parse_metadata
from external_scaler.sources.promql import kv_selector
from inflight import names
from inflight.cli import build_parser
from inflight.config import ConfigError
from inflight.up.cli import UpSettings, settings_from_args
from inflight.up.models import ModelsStack
from inflight.up.stack import REPLICAS_JOB


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
