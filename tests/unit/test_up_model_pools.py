"""``inflight up --model``'s settings: what the stack runs for each model, and refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from inflight.config import ConfigError
from inflight.up.cli import UpSettings
from inflight.up.model_pools import endpoints_file, metric_name, router_source


def settings(*flags: str) -> UpSettings:
    from inflight.cli import build_parser
    from inflight.up.cli import settings_from_args

    return settings_from_args(build_parser().parse_args(["up", *flags]))


def test_a_replica_command_and_a_router_pool_a_model() -> None:
    cfg = settings("--model", "a", "--model", "b")
    assert cfg.models == ("a", "b")
    for model in cfg.models:
        command = cfg.replica_command_for(model)
        assert command[command.index("--served-model-name") + 1] == model
    base = Path("/s/endpoints.json")
    assert router_source(cfg.models, base) == [
        "--model-endpoints-file", "a=/s/endpoints.0.json",
        "--model-endpoints-file", "b=/s/endpoints.1.json",
    ]  # fmt: skip
    assert cfg.router_source(base) == router_source(cfg.models, base)
    assert settings().router_source(base) == ["--endpoints-file", str(base)]
    assert endpoints_file(base, 1) == Path("/s/endpoints.1.json")
    assert "models a, b" in cfg.replicas_about


def test_metric_names_are_valid_and_distinct() -> None:
    from external_scaler.metadata import parse_metadata

    names = {metric_name(m, i) for i, m in enumerate(["meta-llama/Llama-3.1-8B", "q" * 90])}
    assert len(names) == 2
    for name in names:
        assert parse_metadata({"metricName": name}).metric_name == name


@pytest.mark.parametrize(
    ("flags", "problem"),
    [
        (("--model", "a"), "two or more"),
        (("--model", "a", "--model", "a"), "two or more"),
        (("--model", "a", "--model", "b", "--no-prometheus"), "--no-prometheus"),
        (("--model", "a", "--model", "b", "--served-model-name", "x"), "--served-model-name"),
        (("--model", "a", "--model", "b", "--policy", "kpa"), "kpa"),
    ],
)
def test_refused(flags: tuple[str, ...], problem: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises((ConfigError, SystemExit)) as info:
        settings(*flags)
    text = str(info.value) + capsys.readouterr().err
    assert problem in text


def test_each_models_replicas_have_their_own_log_and_ready_files(tmp_path: Path) -> None:
    # Each Supervisor numbers its replicas from 1: in one folder, model a's replica 1 and
    # model b's wrote the same replica-1.ready.json and read each other's port (a live run
    # saw "port taken: it answered /health on P but its group listens on [Q]").
    from inflight.up.model_pools import ModelsStack

    stack = ModelsStack(settings("--model", "a", "--model", "b", "--state-dir", str(tmp_path)))
    dirs = [s.log_dir for s in stack.supervisor.each.values()]  # type: ignore[attr-defined]
    assert len(set(dirs)) == 2 and all(d.parent == stack.state.logs for d in dirs)
