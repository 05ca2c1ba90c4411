"""``inflight up``'s flags for the peers and the open-loop bench: --policy <peer>,
--startup-s, --scaler-metadata (validation only; nothing is started)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from inflight.cli import build_parser
from inflight.config import ConfigError
from inflight.up.cli import UpSettings, settings_from_args


def settings(*argv: str) -> UpSettings:
    return settings_from_args(build_parser().parse_args(["up", *argv]))


def test_startup_s_reaches_the_default_emulator() -> None:
    cmd = settings("--startup-s", "100").replica_command
    assert cmd[cmd.index("--startup-s") + 1] == "100"
    assert "--startup-s" not in settings().replica_command


def test_startup_s_with_a_replica_command_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"--startup-s.*--replica-cmd"):
        settings("--startup-s", "5", "--replica-cmd", "vllm serve m --port {port}")


def test_scaler_metadata_overrides_reach_the_trigger() -> None:
    meta = settings(
        "--scaler-metadata", "targetSaturation=0.8, scaleDownWindowSeconds=120"
    ).trigger_metadata
    assert meta["targetSaturation"] == "0.8" and meta["scaleDownWindowSeconds"] == "120"
    assert meta["timeScale"] == "1.0"
    assert settings("--scaler-metadata=").scaler_overrides == ()


def test_the_trigger_carries_the_replica_bounds() -> None:
    """KEDA's bounds reach the scaler's policy: at --min-replicas a lower answer lowers
    nothing, so partial data need not be refused there."""
    meta = settings("--min-replicas", "1", "--max-replicas", "3").trigger_metadata
    assert (meta["minReplicaCount"], meta["maxReplicaCount"]) == ("1", "3")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("bogus=1", "unknown key 'bogus'; valid keys: metricName"),
        ("timeScale=2", "set by inflight up from --time-scale"),
        ("minReplicaCount=0", "set by inflight up from --min-replicas"),
        ("maxReplicaCount=9", "set by inflight up from --max-replicas"),
        ("targetSaturation", "is not KEY=VALUE"),
        ("targetSaturation=1,targetSaturation=2", "given twice"),
        ("targetSaturation=lots", "targetSaturation"),
    ],
)
def test_bad_scaler_metadata_is_named(value: str, message: str) -> None:
    with pytest.raises(ConfigError, match="--scaler-metadata") as info:
        settings("--scaler-metadata", value)
    assert message in str(info.value)


@pytest.mark.parametrize(
    "key", ["minReplicaCount", "maxReplicaCount", "timeScale", "slotsPerReplica", "policy", "x"]
)
def test_scaler_metadata_refuses_what_a_policies_variant_refuses(key: str) -> None:
    """``inflight up --scaler-metadata`` and ``inflight bench compare``'s
    ``saturation[KEY=VALUE]`` (each variant an ``inflight up``) refuse a key alike."""
    from inflight.planes.policy_catalogue import parse_policies

    with pytest.raises(ConfigError) as up:
        settings("--scaler-metadata", f"{key}=1")
    with pytest.raises(ValueError) as variant:
        parse_policies(f"saturation[{key}=1]")
    why = str(variant.value).split(": ", 2)[2]  # less "--policies: 'saturation[…]': "
    assert why.startswith((f"key {key!r} is set by", f"unknown key {key!r}")), why
    assert why in str(up.value)


def test_a_peer_refuses_no_prometheus() -> None:
    with pytest.raises(ConfigError, match=r"--policy.*'kpa'.*--no-prometheus"):
        settings("--policy", "kpa", "--no-prometheus")


def test_a_peer_is_a_policy_and_the_scaler_stays_on_saturation() -> None:
    config = settings("--policy", "vllm-waiting")
    assert config.policy == "vllm-waiting"
    assert config.trigger_metadata["policy"] == "saturation"
    assert not config.router_holds
    assert settings("--policy", "kpa").router_holds


def router_args_of(*argv: str) -> list[str]:
    from pathlib import Path

    from inflight.up.stack import router_args

    return router_args(settings(*argv), Path("ep.json"))


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def test_our_policies_order_held_requests_by_the_deadline_scaled_to_real_time() -> None:
    # 1.5 seed s by default (inflight.control.hold_order); real seconds = seed s × time-scale.
    assert flag(router_args_of(), "--hold-deadline-s") == "1.5"
    args = router_args_of("--time-scale", "0.1", "--hold-deadline-s", "1.8")
    assert "--hold-when-full" in args and flag(args, "--hold-deadline-s") == "0.18"
    assert flag(router_args_of("--policy", "qps"), "--hold-deadline-s") == "1.5"


@pytest.mark.parametrize(
    "argv",
    [("--hold-deadline-s", "0"), ("--policy", "kpa"), ("--policy", "epp-queue")],
)
def test_fifo_with_a_zero_deadline_and_under_every_peer(argv: tuple[str, ...]) -> None:
    args = router_args_of(*argv)
    assert "--hold-when-full" in args and "--hold-deadline-s" not in args


def test_peers_that_do_not_hold_get_neither_flag() -> None:
    args = router_args_of("--policy", "vllm-waiting")
    assert "--hold-when-full" not in args and "--hold-deadline-s" not in args


def test_a_negative_deadline_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="--hold-deadline-s"):
        settings("--hold-deadline-s", "-1")


def test_the_settings_are_the_stacks_configuration() -> None:
    """One type: the flags as given (seed seconds), and what the stack reads derived."""
    s = settings("--time-scale", "0.1", "--hpa-sync-s", "20", "--no-prometheus")
    assert (s.hpa_sync_s, s.polling_interval_s, s.cooldown_s) == (20.0, 30.0, 300.0)
    assert s.hpa_sync_real_s == pytest.approx(2.0)
    assert s.polling_interval_real_s == pytest.approx(3.0)
    assert s.cooldown_real_s == pytest.approx(30.0)
    assert s.state_path.is_absolute() and s.state_path.name == "up"
    assert not s.use_prometheus and s.autoscale
    assert s.trigger_metadata["timeScale"] == "0.1"
    with pytest.raises(ValidationError):
        s.time_scale = 1.0
