"""One configuration model per binary (``inflight.config``): flag > environment > default,
one error style naming the flag and its variable, ``--print-config`` with provenance.

Every case runs through the real ``inflight`` parser and each binary's own settings model;
the environment is the process's (``monkeypatch.setenv``), as pydantic-settings reads it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from inflight import config
from inflight.cli import build_parser, main


def _emulator(args: Any) -> Any:
    from inflight.emulator.cli import settings_from_args

    return settings_from_args(args)


def _scaler(args: Any) -> Any:
    from external_scaler.cli import settings_from_args

    return settings_from_args(args)


def _up(args: Any) -> Any:
    from inflight.up.cli import settings_from_args

    return settings_from_args(args)


def _router(args: Any) -> Any:
    from router.config import settings_from_args

    return settings_from_args(args)


Loader = Callable[[Any], Any]

#: (subcommand, loader, args every run needs, field, flag value, env value, default)
BINARIES: list[tuple[str, Loader, list[str], str, str, str, Any]] = [
    ("emulator", _emulator, [], "max_num_seqs", "8", "6", 4),
    ("scaler", _scaler, ["--prometheus-url", "http://p:9090"], "call_budget_s", "1.5", "2", 2.5),
    ("up", _up, [], "max_replicas", "5", "3", 2),
    ("router", _router, ["--endpoints", ""], "slots_per_endpoint", "8", "6", 4),
]
IDS = [b[0] for b in BINARIES]


@pytest.fixture(autouse=True)
def _no_inflight_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in list(os.environ):
        if var.upper().startswith("INFLIGHT_"):
            monkeypatch.delenv(var)
    yield


def parse(subcommand: str, *argv: str) -> Any:
    return build_parser().parse_args([subcommand, *argv])


def var(subcommand: str, field: str) -> str:
    return f"INFLIGHT_{subcommand.upper()}_{field.upper()}"


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


@pytest.mark.parametrize(
    ("sub", "load", "base", "field", "flag_value", "env_value", "default"), BINARIES, ids=IDS
)
def test_flag_beats_env_beats_default(
    monkeypatch: pytest.MonkeyPatch,
    sub: str,
    load: Loader,
    base: list[str],
    field: str,
    flag_value: str,
    env_value: str,
    default: Any,
) -> None:
    kind = type(default)
    settings = load(parse(sub, *base))
    assert getattr(settings, field) == default
    assert settings.sources[field] == "default"
    monkeypatch.setenv(var(sub, field), env_value)
    settings = load(parse(sub, *base))
    assert getattr(settings, field) == kind(env_value)
    assert settings.sources[field] == f"env {var(sub, field)}"
    settings = load(parse(sub, *base, flag(field), flag_value))
    assert getattr(settings, field) == kind(flag_value)
    assert settings.sources[field] == f"flag {flag(field)}"


@pytest.mark.parametrize(
    ("sub", "load", "base", "field", "flag_value", "env_value", "default"), BINARIES, ids=IDS
)
def test_a_flag_given_at_its_default_still_beats_the_env(
    monkeypatch: pytest.MonkeyPatch,
    sub: str,
    load: Loader,
    base: list[str],
    field: str,
    flag_value: str,
    env_value: str,
    default: Any,
) -> None:
    monkeypatch.setenv(var(sub, field), env_value)
    settings = load(parse(sub, *base, flag(field), str(default)))
    assert getattr(settings, field) == default


@pytest.mark.parametrize(
    ("sub", "load", "base", "field", "flag_value", "env_value", "default"), BINARIES, ids=IDS
)
def test_a_bad_env_value_names_the_variable_and_the_flag(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sub: str,
    load: Loader,
    base: list[str],
    field: str,
    flag_value: str,
    env_value: str,
    default: Any,
) -> None:
    monkeypatch.setenv(var(sub, field), "x")
    assert main([sub, *base]) == 2
    err = capsys.readouterr().err
    kind = "an integer" if isinstance(default, int) else "a number"
    assert f"inflight {sub}: error: {var(sub, field)} (or {flag(field)}): must be {kind}" in err
    assert 'got "x"' in err


@pytest.mark.parametrize(
    ("sub", "load", "base", "field", "flag_value", "env_value", "default"), BINARIES, ids=IDS
)
def test_a_bad_flag_value_names_the_flag_and_the_variable(
    capsys: pytest.CaptureFixture[str],
    sub: str,
    load: Loader,
    base: list[str],
    field: str,
    flag_value: str,
    env_value: str,
    default: Any,
) -> None:
    with pytest.raises(SystemExit) as info:  # argparse converts with the field's own type
        main([sub, *base, flag(field), "x"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"inflight {sub}: error: {flag(field)} (or {var(sub, field)}): must be " in err
    assert 'got "x"' in err


@pytest.mark.parametrize(
    ("sub", "base", "setting", "problem"),
    [
        ("emulator", [], ("max_num_seqs", "0"), "must be ≥ 1, got 0"),
        (
            "scaler",
            ["--prometheus-url", "http://p"],
            ("max_streams", "0"),
            "must be an integer ≥ 1",
        ),
        ("up", [], ("time_scale", "0"), "must be a number > 0"),
        ("router", ["--endpoints", ""], ("slots_per_endpoint", "0"), "must be an integer ≥ 1"),
    ],
)
@pytest.mark.parametrize("where", ["flag", "env"])
def test_an_out_of_range_value_is_named_where_it_came_from(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sub: str,
    base: list[str],
    setting: tuple[str, str],
    problem: str,
    where: str,
) -> None:
    field, value = setting
    argv = [sub, *base]
    if where == "flag":
        argv += [flag(field), value]
        named = f"{flag(field)} (or {var(sub, field)})"
    else:
        monkeypatch.setenv(var(sub, field), value)
        named = f"{var(sub, field)} (or {flag(field)})"
    assert main(argv) == 2
    assert f"inflight {sub}: error: {named}: {problem}" in capsys.readouterr().err


@pytest.mark.parametrize(("sub", "base", "field"), [(b[0], b[2], b[3]) for b in BINARIES], ids=IDS)
def test_an_unknown_variable_with_the_prefix_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    sub: str,
    base: list[str],
    field: str,
) -> None:
    """A misspelt ConfigMap key must not leave the default silently in force."""
    misspelt = var(sub, field)[:-1]
    monkeypatch.setenv(misspelt, "3")
    assert main([sub, *base]) == 2
    err = capsys.readouterr().err
    assert f"inflight {sub}: error: {misspelt}: no such setting" in err
    assert f"did you mean {var(sub, field)}?" in err


def test_a_kubernetes_service_link_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Service inflight-scaler makes the kubelet set INFLIGHT_SCALER_SERVICE_HOST (and
    INFLIGHT_SCALER_PORT=tcp://…) unless the pod turns service links off."""
    monkeypatch.setenv("INFLIGHT_SCALER_SERVICE_HOST", "10.0.0.7")
    assert main(["scaler", "--prometheus-url", "http://p"]) == 2
    assert "enableServiceLinks: false" in capsys.readouterr().err


def test_variables_of_other_subcommands_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLIGHT_ROUTER_PORT", "tcp://10.0.0.1:8000")  # a router link
    assert _emulator(parse("emulator")).port == 8000


def test_print_config_shows_each_value_and_its_source(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFLIGHT_EMULATOR_MAX_NUM_SEQS", "6")
    monkeypatch.setenv("INFLIGHT_EMULATOR_PORT", "9001")
    assert main(["emulator", "--print-config", "--port", "9002"]) == 0
    lines = {ln.split()[0]: ln for ln in capsys.readouterr().out.splitlines() if ln[:2] == "--"}
    assert lines["--max-num-seqs"].split("#")[0].split() == ["--max-num-seqs", "6"]
    assert lines["--max-num-seqs"].endswith("# env INFLIGHT_EMULATOR_MAX_NUM_SEQS")
    assert lines["--port"].split()[:2] == ["--port", "9002"]
    assert lines["--port"].endswith("# flag --port")
    assert lines["--time-scale"].endswith("# default")


@pytest.mark.parametrize(("sub", "base"), [(b[0], b[2]) for b in BINARIES], ids=IDS)
def test_print_config_starts_nothing_and_lists_every_flag(
    capsys: pytest.CaptureFixture[str], sub: str, base: list[str]
) -> None:
    """It returns at once (no port bound, no child started) and names every field."""
    assert main([sub, *base, "--print-config"]) == 0
    out = capsys.readouterr().out
    subparsers = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    sub_parser = subparsers[0].choices[sub]
    flags = {o for a in sub_parser._actions for o in a.option_strings if o.startswith("--")} - {
        "--help",
        "--print-config",
    }
    shown = {ln.split()[0] for ln in out.splitlines() if ln.startswith("--")}
    assert shown == flags


@pytest.mark.parametrize(
    ("value", "expected"),
    [("a,b", ("a", "b")), (' ["a", "b"] ', ("a", "b")), ("solo", ("solo",))],
)
def test_a_multi_value_flag_takes_commas_or_json_from_the_env(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple[str, ...]
) -> None:
    monkeypatch.setenv("INFLIGHT_EMULATOR_SERVED_MODEL_NAME", value)
    assert _emulator(parse("emulator")).served_names == expected
    flagged = _emulator(parse("emulator", "--served-model-name", "c", "d"))
    assert flagged.served_names == ("c", "d")


def test_a_bad_json_list_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFLIGHT_EMULATOR_SERVED_MODEL_NAME", '["a", ')
    assert main(["emulator"]) == 2
    err = capsys.readouterr().err
    assert "INFLIGHT_EMULATOR_SERVED_MODEL_NAME (or --served-model-name): not a JSON array" in err


@pytest.mark.parametrize(
    ("value", "expected"), [("true", True), ("1", True), ("false", False), ("0", False)]
)
def test_booleans_from_the_env(monkeypatch: pytest.MonkeyPatch, value: str, expected: bool) -> None:
    monkeypatch.setenv("INFLIGHT_UP_NO_PROMETHEUS", value)
    assert _up(parse("up")).no_prometheus is expected


def test_a_bad_boolean_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFLIGHT_UP_NO_AUTOSCALE", "maybe")
    assert main(["up"]) == 2
    assert (
        'INFLIGHT_UP_NO_AUTOSCALE (or --no-autoscale): must be true/false/1/0, got "maybe"'
        in capsys.readouterr().err
    )


def test_a_combination_error_names_the_variables_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFLIGHT_UP_NO_AUTOSCALE", "1")
    assert main(["up"]) == 2
    err = capsys.readouterr().err
    assert "--no-autoscale needs --replicas" in err
    assert "INFLIGHT_UP_NO_AUTOSCALE needs INFLIGHT_UP_REPLICAS" in err
    monkeypatch.setenv("INFLIGHT_UP_REPLICAS", "2")
    assert _up(parse("up")).initial_replicas == 2


def test_the_scaler_can_be_configured_by_env_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLIGHT_SCALER_SOURCE", "direct")
    monkeypatch.setenv("INFLIGHT_SCALER_ROUTER_URL", "http://a:1,http://b:2")
    settings = _scaler(parse("scaler"))
    assert settings.source_name == "direct"
    assert settings.router_urls == ["http://a:1", "http://b:2"]


def test_describe_says_what_a_field_takes() -> None:
    from external_scaler.cli import ScalerSettings
    from inflight.up.cli import UpSettings

    assert config.describe(ScalerSettings.model_fields["grpc_port"]) == "an integer ≥ 0 and ≤ 65535"
    assert config.describe(UpSettings.model_fields["policy"]) == (
        "one of saturation|qps|kpa|ray|vllm-waiting|epp-queue|hpa-rps"
    )


def test_the_router_source_may_come_from_the_env(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse requires one source flag only while no source variable is set."""
    with pytest.raises(SystemExit):
        parse("router")
    assert "give one of --endpoints (or INFLIGHT_ROUTER_ENDPOINTS)" in capsys.readouterr().err
    monkeypatch.setenv("INFLIGHT_ROUTER_K8S_NAMESPACE", "llm")
    monkeypatch.setenv("INFLIGHT_ROUTER_K8S_SERVICE", "vllm")
    cfg = _router(parse("router"))
    assert cfg.k8s is not None and (cfg.k8s.namespace, cfg.k8s.service) == ("llm", "vllm")
    monkeypatch.setenv("INFLIGHT_ROUTER_HOLD_WHEN_FULL", "true")
    assert _router(parse("router")).hold_when_full


def test_an_empty_endpoints_variable_is_zero_endpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLIGHT_ROUTER_ENDPOINTS", "")
    assert _router(parse("router")).endpoint_urls == ()


def test_two_router_sources_from_flag_and_env_are_both_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFLIGHT_ROUTER_K8S_NAMESPACE", "llm")
    assert main(["router", "--endpoints", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "give one endpoint source, not --endpoints" in err
    assert "INFLIGHT_ROUTER_K8S_NAMESPACE" in err


def test_a_bad_router_url_from_the_env_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFLIGHT_ROUTER_ENDPOINTS", "ftp://x:1")
    assert main(["router"]) == 2
    assert "INFLIGHT_ROUTER_ENDPOINTS (or --endpoints): " in capsys.readouterr().err


def test_a_service_link_value_in_a_known_variable_is_named_as_such(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFLIGHT_ROUTER_PORT", "tcp://10.96.0.12:8000")
    assert main(["router", "--endpoints="]) == 2
    err = capsys.readouterr().err
    assert (
        'INFLIGHT_ROUTER_PORT (or --port): must be an integer ≥ 0 and ≤ 65535, got "tcp://' in err
    )
    assert "enableServiceLinks: false" in err


@pytest.mark.parametrize(
    "value",
    ["post:/v1/load_lora_adapter,POST:/v1/x", '["post:/v1/load_lora_adapter", "POST:/v1/x"]'],
)
def test_a_repeatable_flag_takes_commas_or_json_from_the_env(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("INFLIGHT_ROUTER_ALLOW_ROUTE", value)
    cfg = _router(parse("router", "--endpoints="))
    assert [str(r) for r in cfg.allow_routes] == ["POST:/v1/load_lora_adapter", "POST:/v1/x"]
    cfg = _router(parse("router", "--endpoints=", "--allow-route", "GET:/v1/y"))
    assert [str(r) for r in cfg.allow_routes] == ["GET:/v1/y"]  # the flag replaces the list


def test_url_lists_take_commas_or_json_from_the_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFLIGHT_ROUTER_ENDPOINTS", '["http://127.0.0.1:1/", "http://127.0.0.1:2"]')
    cfg = _router(parse("router"))
    assert cfg.endpoint_urls == ("http://127.0.0.1:1", "http://127.0.0.1:2")
    monkeypatch.setenv("INFLIGHT_SCALER_SOURCE", "direct")
    monkeypatch.setenv("INFLIGHT_SCALER_ROUTER_URL", '["http://a:1", "http://b:2"]')
    assert _scaler(parse("scaler")).router_urls == ["http://a:1", "http://b:2"]
