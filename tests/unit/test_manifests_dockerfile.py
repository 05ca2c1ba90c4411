"""The Dockerfile, checked for structure against the repository and the manifests.

tests/integration/test_image.py builds and runs the image; this checks, without building,
what a build depends on and what running it cannot show: every file it copies exists and
is not excluded by ``.dockerignore``, every package ``pyproject.toml`` ships is copied, base
images are pinned to the Python the project requires, the runtime stage installs the plain
package (no extras) without keeping the wheels, the entrypoint is the ``inflight`` script,
and the user and ports agree with the manifests' ``securityContext`` and
``containerPort`` s.
"""

from __future__ import annotations

import fnmatch
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
MANIFEST_FILES = sorted((REPO / "manifests").glob("base/*.yaml")) + sorted(
    (REPO / "manifests").glob("overlays/*/*.yaml")
)
IMAGE = "inflight"


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with their continuation lines joined; comments and blanks dropped."""
    out: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        if not pending:
            start = number
        if line.endswith("\\"):
            pending.append(line[:-1].strip())
            continue
        pending.append(line)
        joined = " ".join(p for p in pending if p)
        keyword, _, args = joined.partition(" ")
        out.append(Instruction(start, keyword.upper(), args.strip()))
        pending = []
    assert not pending, "Dockerfile ends inside a continued line"
    return out


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for ins in instructions:
        if ins.keyword == "FROM":
            result.append([])
        assert result, f"line {ins.line}: {ins.keyword} before the first FROM"
        result[-1].append(ins)
    return result


def dockerignore_patterns() -> list[str]:
    lines = DOCKERIGNORE.read_text().splitlines()
    return [ln.strip().rstrip("/") for ln in lines if ln.strip() and not ln.startswith("#")]


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, simplified: a pattern excludes a path it matches or a path under it."""
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        parts = Path(path).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        hit = any(fnmatch.fnmatch(p, pat) for p in prefixes)
        if pat.startswith("**/"):
            hit = hit or any(fnmatch.fnmatch(part, pat[3:]) for part in parts)
        if hit:
            verdict = not negate
    return verdict


def inflight_containers() -> list[dict[str, Any]]:
    """Containers that run our image, in the manifest sources (base and overlay patches),
    each with its pod's ``securityContext`` folded under its own."""
    found: list[dict[str, Any]] = []

    def walk(node: Any, pod_ctx: dict[str, Any]) -> None:
        if isinstance(node, dict):
            if "containers" in node:
                pod_ctx = node.get("securityContext", {})
            image = node.get("image")
            if isinstance(image, str) and image.split(":")[0] == IMAGE and "name" in node:
                ctx = {**pod_ctx, **node.get("securityContext", {})}
                found.append({**node, "securityContext": ctx})
            for value in node.values():
                walk(value, pod_ctx)
        elif isinstance(node, list):
            for value in node:
                walk(value, pod_ctx)

    for path in MANIFEST_FILES:
        for doc in yaml.safe_load_all(path.read_text()):
            walk(doc, {})
    return found


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_parser_joins_continuations_and_drops_comments() -> None:
    text = "# c\nFROM a:1 AS b\nRUN x \\\n    # inner\n    && y\n\nUSER 1\n"
    assert parse_dockerfile(text) == [
        Instruction(2, "FROM", "a:1 AS b"),
        Instruction(3, "RUN", "x && y"),
        Instruction(7, "USER", "1"),
    ]


def test_base_images_are_pinned_to_the_required_python(
    instructions: list[Instruction], pyproject: dict[str, Any]
) -> None:
    minimum = re.fullmatch(r">=\s*(\d+\.\d+)", pyproject["project"]["requires-python"])
    assert minimum, "requires-python is not of the form >=X.Y"
    for stage in stages(instructions):
        image = stage[0].args.split()[0]
        name, _, tag = image.partition(":")
        assert tag and tag != "latest", f"line {stage[0].line}: {image} is not pinned to a tag"
        if name == "python":
            assert tag.startswith(minimum.group(1)), (
                f"line {stage[0].line}: {image} is not Python {minimum.group(1)}"
            )


def test_every_copied_path_exists_and_is_in_the_build_context(
    instructions: list[Instruction],
) -> None:
    patterns = dockerignore_patterns()
    copies = [i for i in instructions if i.keyword == "COPY" and "--from=" not in i.args]
    assert copies, "the Dockerfile copies nothing from the build context"
    for ins in copies:
        *sources, _dest = ins.args.split()
        for source in sources:
            assert (REPO / source).exists(), f"line {ins.line}: COPY {source}: no such path"
            assert not ignored(source.rstrip("/"), patterns), (
                f"line {ins.line}: COPY {source} is excluded by .dockerignore"
            )
    assert not [i for i in instructions if i.keyword == "ADD"], "use COPY, not ADD"


def test_every_shipped_package_and_the_readme_are_copied(
    instructions: list[Instruction], pyproject: dict[str, Any]
) -> None:
    copied = {
        src.rstrip("/")
        for ins in instructions
        if ins.keyword == "COPY" and "--from=" not in ins.args
        for src in ins.args.split()[:-1]
    }
    packages = {
        p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages - copied == set(), (
        f"packages pyproject ships but the image lacks: {packages - copied}"
    )
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied


def test_runtime_installs_the_plain_package_without_keeping_the_wheels(
    instructions: list[Instruction],
) -> None:
    build, final = stages(instructions)[0], stages(instructions)[-1]
    assert "AS build" in build[0].args, "the first stage is not named build"
    # A COPY of the wheels would stay in the image as a layer, whatever a later RUN removes.
    assert not [i for i in final if i.keyword == "COPY" and "--from=" in i.args], (
        "the runtime stage copies from the build stage; mount the wheels instead"
    )
    installs = [i.args for i in final if i.keyword == "RUN" and "pip install" in i.args]
    assert len(installs) == 1, installs
    assert "--mount=type=bind,from=build,source=/wheels,target=/wheels" in installs[0]
    assert "--no-index" in installs[0]
    # The plain package: the bench and dashboards extras stay out of the image.
    wheel = re.search(r"(/wheels/inflight-\S*)", installs[0])
    assert wheel and "[" not in wheel.group(1), installs[0]


def test_entrypoint_is_the_inflight_script(
    instructions: list[Instruction], pyproject: dict[str, Any]
) -> None:
    final = stages(instructions)[-1]
    entry = [i for i in final if i.keyword == "ENTRYPOINT"]
    assert entry, "the final stage has no ENTRYPOINT"
    # Exec form, so signals reach inflight (and its process groups) directly, not a shell.
    assert json.loads(entry[-1].args) == ["inflight"]
    assert "inflight" in pyproject["project"]["scripts"]


def test_runs_as_the_user_the_manifests_name(instructions: list[Instruction]) -> None:
    final = stages(instructions)[-1]
    users = [i.args for i in final if i.keyword == "USER"]
    assert users, "the final stage runs as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root uid (runAsNonRoot)"
    containers = inflight_containers()
    assert containers, f"no container in manifests/ runs the {IMAGE} image"
    for container in containers:
        ctx = container["securityContext"]
        assert ctx.get("runAsNonRoot") is True, f"{container['name']}: runAsNonRoot unset"
        assert ctx.get("runAsUser") == int(uid), container["name"]
        assert ctx.get("runAsGroup") == int(gid or uid), container["name"]


def test_exposes_every_port_the_manifests_use(instructions: list[Instruction]) -> None:
    exposed = {
        int(p.split("/")[0]) for i in instructions if i.keyword == "EXPOSE" for p in i.args.split()
    }
    used = {p["containerPort"] for c in inflight_containers() for p in c.get("ports", [])}
    assert used and used <= exposed, f"containerPorts not EXPOSEd: {sorted(used - exposed)}"


def test_dockerignore_keeps_local_state_out() -> None:
    patterns = dockerignore_patterns()
    for path in (".git", ".venv", "state", "inflight.egg-info", "router/__pycache__"):
        assert ignored(path, patterns), f".dockerignore lets {path} into the build context"
    assert not ignored("pyproject.toml", patterns)


@pytest.mark.parametrize(
    ("dockerfile", "problem"),
    [
        ('FROM python:latest\nENTRYPOINT ["inflight"]\n', "not pinned"),
        ("FROM python:3.11-slim\nCOPY nosuchdir/ x/\n", "no such path"),
        ("FROM python:3.11-slim\nCOPY .venv/ x/\n", "excluded by .dockerignore"),
    ],
)
def test_the_checks_can_fail(dockerfile: str, problem: str) -> None:
    ins = parse_dockerfile(dockerfile)
    with pytest.raises(AssertionError, match=problem):
        test_base_images_are_pinned_to_the_required_python(
            ins, {"project": {"requires-python": ">=3.11"}}
        )
        test_every_copied_path_exists_and_is_in_the_build_context(ins)
