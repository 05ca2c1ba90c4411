"""Declared dependencies match the code, in both directions.

* Every import of a third-party module is declared: the packages' imports in the runtime
  dependencies or a non-dev extra (``inflight[bench]``, …), the tests' imports anywhere
  (runtime or any extra, ``dev`` included).
* Every declared dependency is imported: a runtime dependency or a non-dev extra's by the
  packages, a ``dev`` one by the tests — except the tools in :data:`DEV_TOOLS`, which are
  run, not imported (pytest plugins, linters, stubs), each with the reason it is there.

Imports are read with :mod:`ast` from every module (top level, inside functions, under
``TYPE_CHECKING``, in ``try/except ImportError``); relative imports are the project's own.
Import names map to distributions with :func:`importlib.metadata.packages_distributions`
(so this needs the project's environment, e.g. ``scripts/setup.sh``'s ``.venv``);
``sys.stdlib_module_names`` is the standard library. ``scripts/`` is not read: it holds
one-off tools (the benchmarks there are moving into ``bench``, where they will be read).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("inflight", "router", "external_scaler", "dashboards")
TESTS = ("tests",)
# The studies (experiments/, not installed): checked with the tests, against every extra.
EXPERIMENTS = ("experiments",)
LOCAL = {*PACKAGES, *TESTS, *EXPERIMENTS}

# dev dependencies that are run rather than imported, and why each is declared.
DEV_TOOLS = {
    "pytest-asyncio": "pytest plugin (asyncio_mode = auto in pyproject.toml)",
    "pytest-xdist": "pytest plugin (scripts/test.sh runs the parallel stage with -n)",
    "ruff": "linter and formatter (make lint)",
    "mypy": "type checker (make lint)",
    "types-pyyaml": "type stubs for mypy",
    "grpcio-tools": "generates external_scaler/proto (scripts/gen_proto.py; a test compares)",
}
# Declared for work that lands in another branch; each entry must go once it is imported
# (test_pending_dependencies_are_still_pending says so).
PENDING: dict[str, str] = {}


def normalize(name: str) -> str:
    """PEP 503: ``Google_RE2`` → ``google-re2``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(spec: str) -> str:
    """The distribution of a PEP 508 requirement: ``uvicorn[standard]>=0.29`` → uvicorn."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", spec)
    if match is None:
        raise ValueError(f"pyproject.toml: cannot read the requirement {spec!r}")
    return normalize(match.group(1))


@cache
def declared() -> dict[str, frozenset[str]]:
    """``{"": runtime, extra: its dependencies}`` as normalized distribution names."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    out = {"": frozenset(requirement_name(r) for r in project.get("dependencies", []))}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        # An extra may name the project itself (inflight[bench,dashboards]); not a dependency.
        names = {requirement_name(r) for r in reqs} - {normalize(project["name"])}
        out[extra] = frozenset(names)
    return out


def imported_modules(source: str, filename: str = "<string>") -> set[str]:
    """Top-level names of the absolute imports anywhere in ``source``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def third_party_imports(roots: Iterable[str]) -> dict[str, set[Path]]:
    """Third-party top-level modules imported under ``roots`` → the files importing them."""
    found: dict[str, set[Path]] = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            for name in imported_modules(path.read_text(), str(path)):
                if name in sys.stdlib_module_names or name in LOCAL or name == "__future__":
                    continue
                found.setdefault(name, set()).add(path.relative_to(REPO))
    return found


def distributions_of(module: str, index: Mapping[str, list[str]]) -> set[str]:
    return {normalize(d) for d in index.get(module, [])}


def undeclared(
    imports: Mapping[str, set[Path]], allowed: frozenset[str], index: Mapping[str, list[str]]
) -> list[str]:
    """``module (files): why`` for each import no allowed distribution provides."""
    problems = []
    for module, files in sorted(imports.items()):
        dists = distributions_of(module, index)
        where = ", ".join(str(f) for f in sorted(files))
        if not dists:
            problems.append(f"{module} ({where}): no installed distribution provides it")
        elif not dists & allowed:
            problems.append(f"{module} ({where}): from {sorted(dists)}, which is not declared")
    return problems


def unused(
    dists: frozenset[str], imports: Mapping[str, set[Path]], index: Mapping[str, list[str]]
) -> list[str]:
    provided = set().union(*(distributions_of(m, index) for m in imports))
    return sorted(dists - provided)


@pytest.fixture(scope="module")
def index() -> Mapping[str, list[str]]:
    return packages_distributions()


def runtime_and_shipped_extras() -> frozenset[str]:
    return frozenset().union(*(names for extra, names in declared().items() if extra != "dev"))


def test_every_import_of_the_packages_is_a_runtime_dependency_or_an_extra(
    index: Mapping[str, list[str]],
) -> None:
    problems = undeclared(third_party_imports(PACKAGES), runtime_and_shipped_extras(), index)
    assert not problems, "undeclared imports (add them to pyproject.toml):\n" + "\n".join(problems)


def test_every_import_of_the_tests_is_declared(index: Mapping[str, list[str]]) -> None:
    everything = frozenset().union(*declared().values())
    problems = undeclared(third_party_imports(TESTS), everything, index)
    assert not problems, "undeclared imports (add them to the dev extra):\n" + "\n".join(problems)


def test_every_import_of_the_experiments_is_declared(index: Mapping[str, list[str]]) -> None:
    everything = frozenset().union(*declared().values())
    problems = undeclared(third_party_imports(EXPERIMENTS), everything, index)
    assert not problems, "undeclared imports (add them to an extra):\n" + "\n".join(problems)


def test_every_runtime_dependency_and_extra_is_imported_by_the_packages(
    index: Mapping[str, list[str]],
) -> None:
    never = unused(runtime_and_shipped_extras(), third_party_imports(PACKAGES), index)
    never = [d for d in never if d not in PENDING]
    assert not never, f"declared but imported by no package (drop them, or use them): {never}"


def test_every_dev_dependency_is_imported_by_the_tests_or_is_a_tool(
    index: Mapping[str, list[str]],
) -> None:
    never = unused(declared()["dev"], third_party_imports(TESTS), index)
    not_tools = sorted(set(never) - set(DEV_TOOLS))
    assert not not_tools, f"dev dependencies imported by no test and not in DEV_TOOLS: {not_tools}"
    stale = sorted(set(DEV_TOOLS) - declared()["dev"])
    assert not stale, f"DEV_TOOLS names dependencies that are not declared: {stale}"


def test_pending_dependencies_are_still_pending(index: Mapping[str, list[str]]) -> None:
    used = set().union(*(distributions_of(m, index) for m in third_party_imports(PACKAGES)))
    landed = sorted(set(PENDING) & used)
    assert not landed, f"now imported by a package: remove them from PENDING: {landed}"
    gone = sorted(set(PENDING) - runtime_and_shipped_extras())
    assert not gone, f"PENDING names dependencies that are not declared: {gone}"


# --- the checker itself -----------------------------------------------------------------
def test_imports_are_found_at_every_level() -> None:
    source = """
import a.b, c
from d.e import f
from . import local
from .g import h
def fn():
    import i
    from j import k
if TYPE_CHECKING:
    import l
try:
    import m
except ImportError:
    pass
class C:
    def method(self):
        from n.o import p
"""
    assert imported_modules(source) == {"a", "c", "d", "i", "j", "l", "m", "n"}


def test_an_undeclared_import_and_an_unused_dependency_are_reported() -> None:
    index = {"yaml": ["PyYAML"], "httpx": ["httpx"], "google": ["protobuf"]}
    imports = {"yaml": {Path("router/x.py")}, "httpx": {Path("router/y.py")}}
    problems = undeclared(imports, frozenset({"pyyaml", "protobuf"}), index)
    assert problems == ["httpx (router/y.py): from ['httpx'], which is not declared"]
    assert undeclared({"nosuch": {Path("a.py")}}, frozenset(), index) == [
        "nosuch (a.py): no installed distribution provides it"
    ]
    assert unused(frozenset({"pyyaml", "protobuf"}), imports, index) == ["protobuf"]


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("uvicorn[standard]>=0.29,<1", "uvicorn"),
        ("grafana-foundation-sdk==1769699379!11.6.0", "grafana-foundation-sdk"),
        ("types-PyYAML", "types-pyyaml"),
        ("google_re2 >=1.1", "google-re2"),
        ("inflight[bench]", "inflight"),
    ],
)
def test_requirement_names(spec: str, name: str) -> None:
    assert requirement_name(spec) == name
