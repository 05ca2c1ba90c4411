"""Flags, endpoint lists and files: every bad input names what is at fault."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from router.config import ConfigError, add_arguments, settings_from_args
from router.dispatch import Dispatcher
from router.endpoint_lists import (
    SourceError,
    apply,
    parse_endpoint_list,
    read_endpoints_file,
    watch_file,
)
from router.pool import Pool


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_defaults_and_static_list() -> None:
    cfg = settings_from_args(parse("--endpoints", "http://127.0.0.1:1/,http://127.0.0.1:2"))
    assert cfg.endpoint_urls == ("http://127.0.0.1:1", "http://127.0.0.1:2")
    assert cfg.endpoints_file is None and cfg.k8s is None
    assert cfg.slots_per_endpoint == 4
    assert cfg.dispatch == "least-outstanding"
    assert not cfg.hold_when_full
    assert cfg.upstream_timeout_s == 0.0 and cfg.upstream_total_timeout_s is None
    assert cfg.hold_deadline_s == 0.0 and cfg.dispatch_hold_deadline_s is None


def test_zero_means_none_for_the_wiring() -> None:
    """``--upstream-timeout-s 0`` (no limit) and ``--hold-deadline-s 0`` (FIFO) reach the
    upstream client and the dispatcher as None; other values as they are."""
    cfg = settings_from_args(
        parse("--endpoints", "", "--upstream-timeout-s", "30", "--hold-when-full",
              "--hold-deadline-s", "1.5")
    )  # fmt: skip
    assert (cfg.upstream_total_timeout_s, cfg.dispatch_hold_deadline_s) == (30.0, 1.5)


def test_the_settings_are_frozen() -> None:
    cfg = settings_from_args(parse("--endpoints", ""))
    with pytest.raises(ValidationError):
        cfg.port = 1


def test_allow_route_is_repeatable_and_off_by_default() -> None:
    assert settings_from_args(parse("--endpoints", "")).allow_routes == ()
    cfg = settings_from_args(
        parse("--endpoints", "", "--allow-route", "post:/v1/load_lora_adapter",
              "--allow-route", "POST:/v1/unload_lora_adapter")
    )  # fmt: skip
    assert [str(r) for r in cfg.allow_routes] == [
        "POST:/v1/load_lora_adapter",
        "POST:/v1/unload_lora_adapter",
    ]


def test_route_priority_is_repeatable_and_off_by_default() -> None:
    assert settings_from_args(parse("--endpoints", "")).route_priorities == {}
    cfg = settings_from_args(
        parse("--endpoints", "", "--route-priority", "/v1/embeddings=10",
              "--route-priority", "/v1/chat/completions=-1")
    )  # fmt: skip
    assert cfg.route_priorities == {"/v1/embeddings": 10, "/v1/chat/completions": -1}


def test_log_level_in_any_case() -> None:
    assert settings_from_args(parse("--endpoints", "", "--log-level", "INFO")).log_level == "info"


def test_empty_endpoints_is_zero_endpoints() -> None:
    assert settings_from_args(parse("--endpoints", "")).endpoint_urls == ()


def test_k8s_source() -> None:
    cfg = settings_from_args(
        parse("--k8s-namespace", "llm", "--k8s-service", "vllm", "--k8s-port-name", "http")
    )
    assert cfg.k8s is not None
    assert (cfg.k8s.namespace, cfg.k8s.service, cfg.k8s.port_name) == ("llm", "vllm", "http")


def test_exactly_one_source_is_required() -> None:
    with pytest.raises(SystemExit):
        parse("--port", "1")
    with pytest.raises(SystemExit):
        parse("--endpoints", "", "--endpoints-file", "x.json")


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (("--endpoints", "ftp://x:1"), "--endpoints"),
        (("--endpoints", "", "--slots-per-endpoint", "0"), "--slots-per-endpoint"),
        (("--endpoints", "", "--max-queue", "-1"), "--max-queue"),
        (("--endpoints", "", "--queue-timeout-s", "0"), "--queue-timeout-s"),
        (("--endpoints", "", "--max-body-bytes", "0"), "--max-body-bytes"),
        (("--endpoints", "", "--port", "70000"), "--port"),
        (("--endpoints", "", "--health-interval-s", "-1"), "--health-interval-s"),
        (("--endpoints", "", "--unhealthy-backoff-s", "-1"), "--unhealthy-backoff-s"),
        (("--endpoints", "", "--health-timeouts", "0"), "--health-timeouts"),
        (("--endpoints", "", "--upstream-timeout-s", "-1"), "--upstream-timeout-s"),
        (("--k8s-namespace", "llm"), "--k8s-service"),
        (("--endpoints", "", "--k8s-service", "vllm"), "--k8s-namespace"),
        (("--endpoints", "", "--deletion-cost"), "--deletion-cost"),
        (
            ("--k8s-namespace", "llm", "--k8s-service", "v", "--deletion-cost-interval-s", "0"),
            "--deletion-cost-interval-s",
        ),
        (("--endpoints", "", "--log-level", "verbose"), "--log-level"),
        (("--endpoints", "", "--allow-route", "/v1/load_lora_adapter"), "--allow-route"),
        (("--endpoints", "", "--allow-route", "POST:/admin"), "--allow-route"),
        (("--endpoints", "", "--allow-route", "POST:/v1/../admin"), "--allow-route"),
        (("--endpoints", "", "--route-priority", "/v1/embeddings"), "--route-priority"),
        (("--endpoints", "", "--route-priority", "v1/embeddings=1"), "--route-priority"),
        (("--endpoints", "", "--route-priority", "/v1/embeddings=low"), "--route-priority"),
        (("--endpoints", "", "--route-priority", "/v1/x?a=1=2"), "--route-priority"),
        (
            ("--endpoints", "", "--route-priority", "/v1/x=1", "--route-priority", "/v1/x=2"),
            "--route-priority",
        ),
        (("--endpoints", "", "--max-prompt-items", "0"), "--max-prompt-items"),
    ],
)
def test_bad_flags_are_named(argv: tuple[str, ...], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        settings_from_args(parse(*argv))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('["http://127.0.0.1:1", "http://127.0.0.1:2/"]', ["http://127.0.0.1:1", "http://127.0.0.1:2"]),
        ("- http://127.0.0.1:1\n- http://127.0.0.1:2\n", ["http://127.0.0.1:1", "http://127.0.0.1:2"]),
        ("[]", []),
        ("", []),
        ("   \n", []),
        ("# nothing yet\n", []),
    ],
)  # fmt: skip
def test_endpoint_list_json_or_yaml(text: str, expected: list[str]) -> None:
    assert parse_endpoint_list(text, "f") == expected


@pytest.mark.parametrize(
    "text", ['{"a": 1}', "[1, 2]", '["not a url"]', "key: [unclosed", '"http://h:1"']
)
def test_bad_endpoint_list_names_its_origin(text: str) -> None:
    with pytest.raises(SourceError, match=r"--endpoints-file eps\.json"):
        parse_endpoint_list(text, "--endpoints-file eps.json")


def test_missing_file_is_zero_endpoints(tmp_path: Path) -> None:
    assert read_endpoints_file(tmp_path / "absent.json") == []
    path = tmp_path / "eps.yaml"
    path.write_text("- http://10.0.0.1:8000\n")
    assert read_endpoints_file(path) == ["http://10.0.0.1:8000"]


async def test_file_changed_before_the_watcher_started_is_picked_up(tmp_path: Path) -> None:
    """``inflight router`` reads the file at startup and starts watching it once the server
    is up; a change written in between (the orchestrator writes the file while replicas
    come up) must not be missed until the next write.
    """
    path = tmp_path / "endpoints.json"
    path.write_text('["http://127.0.0.1:9001"]')
    dispatcher = Dispatcher(Pool(4))
    apply(dispatcher, read_endpoints_file(path))  # what the CLI does at startup
    tmp = tmp_path / "endpoints.tmp"
    tmp.write_text('["http://127.0.0.1:9001", "http://127.0.0.1:9002"]')
    os.replace(tmp, path)
    watcher = asyncio.create_task(watch_file(dispatcher, path, interval_s=0.01))
    try:
        for _ in range(500):
            await asyncio.sleep(0.01)  # polling the pool, with a deadline
            if len(dispatcher.pool.endpoints()) == 2:
                break
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert [ep.url for ep in dispatcher.pool.endpoints()] == [
        "http://127.0.0.1:9001",
        "http://127.0.0.1:9002",
    ]


async def test_file_watcher_survives_a_path_it_cannot_stat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An error reading the file's metadata (not just a missing file) is logged and the
    watcher keeps polling; it used to end the watch task, silently, for good.
    """
    folder = tmp_path / "state"
    folder.mkdir()
    path = folder / "endpoints.json"
    path.write_text('["http://127.0.0.1:9001"]')
    dispatcher = Dispatcher(Pool(4))
    watcher = asyncio.create_task(watch_file(dispatcher, path, interval_s=0.01))

    async def until(urls: list[str]) -> list[str]:
        for _ in range(300):
            await asyncio.sleep(0.01)  # polling the pool, with a deadline
            seen = [ep.url for ep in dispatcher.pool.endpoints()]
            if seen == urls or watcher.done():
                break
        return seen

    try:
        assert await until(["http://127.0.0.1:9001"]) == ["http://127.0.0.1:9001"]
        shutil.rmtree(folder)
        folder.write_text("not a folder")  # stat(path) now fails with NotADirectoryError
        caplog.set_level(logging.ERROR, logger="router.endpoint_lists")
        for _ in range(300):  # until the watcher has polled the broken path and said so
            await asyncio.sleep(0.01)
            if watcher.done() or any("Not a directory" in r.getMessage() for r in caplog.records):
                break
        assert not watcher.done(), "the watcher ended on a path it cannot stat"
        assert any("Not a directory" in r.getMessage() for r in caplog.records), caplog.text
        folder.unlink()
        folder.mkdir()
        path.write_text('["http://127.0.0.1:9002"]')
        assert await until(["http://127.0.0.1:9002"]) == ["http://127.0.0.1:9002"]
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
