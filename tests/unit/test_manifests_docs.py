"""docs/kubernetes.md agrees with the repository: its commands and paths are real.

Every ``inflight …`` command in its code blocks parses with the real parser, every
``manifests/…`` path it names exists, and every Secret, Service and port it tells the
reader about is one the manifests use.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest
import yaml

from inflight import cli

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "kubernetes.md"


def code_lines() -> list[str]:
    """Shell lines of the fenced code blocks, continuations joined."""
    lines: list[str] = []
    for block in re.findall(r"```(?:sh|bash)?\n(.*?)```", DOC.read_text(), flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [ln.split("  #")[0].strip() for ln in joined.splitlines() if ln.strip()]
    return lines


def manifest_sources() -> str:
    return "\n".join(p.read_text() for p in sorted((REPO / "manifests").rglob("*.yaml")))


def test_every_inflight_command_parses() -> None:
    commands = [ln for ln in code_lines() if ln.startswith("inflight ")]
    assert commands, "the doc shows no inflight command"
    for line in commands:
        argv = shlex.split(line)[1:]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                cli.build_parser().parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"docs/kubernetes.md: `{line}` is rejected ({exc.code}): {err.getvalue()}")


def test_every_manifests_path_exists() -> None:
    paths = set(re.findall(r"\bmanifests/[A-Za-z0-9_./-]*[A-Za-z0-9_-]", DOC.read_text()))
    assert paths
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"docs/kubernetes.md names paths that do not exist: {missing}"


def test_secrets_the_doc_creates_are_the_ones_the_manifests_read() -> None:
    created = set(re.findall(r"create secret generic ([a-z0-9-]+)", DOC.read_text()))
    assert created, "the doc creates no Secret"
    sources = manifest_sources()
    read = set(re.findall(r"(?:secretName|name): ([a-z0-9-]+)", sources))
    assert created <= read, f"Secrets no manifest reads: {sorted(created - read)}"


def test_port_forwards_name_real_services_and_ports() -> None:
    services: dict[str, set[int]] = {}
    for path in sorted((REPO / "manifests" / "base").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "Service":
                services[doc["metadata"]["name"]] = {p["port"] for p in doc["spec"]["ports"]}
    forwards = [ln for ln in code_lines() if "port-forward" in ln and "-n inflight" in ln]
    assert forwards
    for line in forwards:
        match = re.search(r"svc/([a-z0-9-]+) (\d+):(\d+)", line)
        assert match, line
        assert int(match.group(3)) in services.get(match.group(1), set()), line
