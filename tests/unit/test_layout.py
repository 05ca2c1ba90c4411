"""The package layout and its dependency rules (docs/ARCHITECTURE.md, "Layout").

Reads every module's imports from its source (imports inside functions count; those under
``if TYPE_CHECKING:`` do not, as they never run) and checks:

* the installed top-level packages are only ``inflight`` and the three the design names;
* no import cycle between modules;
* every import between groups goes in an allowed direction (``ALLOWED`` below).
"""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TOP_LEVEL = ("inflight", "router", "external_scaler", "dashboards")

# Groups: a subpackage of inflight named here is its own group; inflight's other modules
# (names, ports, procs, ready, logs, prom, config, extras, statedir, vllm_contract, engines) are
# "core", and inflight.cli / inflight.__main__ are "entry" (they load the subcommands).
SUBPACKAGES = ("control", "planes", "workload", "measure", "emulator", "sim", "up", "bench")

# Which groups each group may import (besides itself): exactly the arrows the code has
# (test_every_allowed_arrow_is_one_the_code_has). The simulator depends on the pure
# deciders, the control planes, the workload and measure code and the services' own
# functions, never on the benchmark's command line or the process manager.
ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "inflight.control": {"core"},
    "inflight.emulator": {"core"},
    "inflight.measure": {"core"},
    "inflight.workload": {"inflight.measure"},
    "router": {"core", "inflight.control"},
    "external_scaler": {"core", "inflight.control"},
    "dashboards": {"core", "inflight.control"},
    "inflight.planes": {"core", "inflight.control", "inflight.emulator", "external_scaler"},
    "inflight.up": {
        "core",
        "inflight.control",
        "inflight.planes",
        "inflight.emulator",
        "external_scaler",
    },
    "inflight.sim": {
        "core",
        "inflight.control",
        "inflight.planes",
        "inflight.workload",
        "inflight.measure",
        "inflight.emulator",
        "router",
        "external_scaler",
    },
    "inflight.bench": {
        "core",
        "inflight.control",
        "inflight.planes",
        "inflight.workload",
        "inflight.measure",
        "inflight.emulator",
        "router",
        "external_scaler",
    },
    # The subcommands are loaded by name when chosen (inflight/cli.py), not imported.
    "entry": {"core"},
}


def group_of(module: str) -> str:
    parts = module.split(".")
    if parts[0] != "inflight":
        return parts[0]
    if len(parts) > 1 and parts[1] in SUBPACKAGES:
        return f"inflight.{parts[1]}"
    if len(parts) > 1 and parts[1] in ("cli", "__main__"):
        return "entry"
    return "core"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in TOP_LEVEL:
        for path in (ROOT / top).rglob("*.py"):
            if "_pb2" in path.name:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement, except those under ``if TYPE_CHECKING:``."""
    out: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                out.append(child)
            visit(child)

    visit(tree)
    return out


def import_graph() -> dict[str, set[str]]:
    """Module → the project modules it imports (resolved to the longest known module)."""
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    source = ".".join([*base, node.module] if node.module else base)
                else:
                    source = node.module or ""
                targets = [f"{source}.{alias.name}" for alias in node.names] + [source]
            for target in targets:
                parts = target.split(".")
                if parts[0] not in TOP_LEVEL:
                    continue
                while parts and ".".join(parts) not in modules:
                    parts.pop()
                resolved = ".".join(parts)
                if resolved and resolved != module:
                    graph[module].add(resolved)
                    break
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


def test_installed_top_level_packages_are_inflight_and_the_designs_three() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert sorted(name.rstrip("*") for name in include) == sorted(TOP_LEVEL)
    packages_at_root = sorted(
        path.parent.name for path in ROOT.glob("*/__init__.py") if path.parent.name != "tests"
    )
    assert packages_at_root == sorted(TOP_LEVEL)


def test_no_import_cycle_between_modules() -> None:
    assert cycles(import_graph()) == []


def test_imports_between_groups_go_in_allowed_directions() -> None:
    wrong = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if group_of(module) != group_of(target)
        and group_of(target) not in ALLOWED[group_of(module)]
    )
    assert wrong == []


def test_every_allowed_arrow_is_one_the_code_has() -> None:
    """The rules are the arrows the code really has: an allowed direction nobody uses is a
    door left open, so it is named here and closed (add it back with the import that needs
    it)."""
    used: dict[str, set[str]] = defaultdict(set)
    for module, targets in import_graph().items():
        for target in targets:
            if group_of(target) != group_of(module):
                used[group_of(module)].add(group_of(target))
    unused = {g: sorted(allowed - used[g]) for g, allowed in ALLOWED.items() if allowed - used[g]}
    assert unused == {}, f"allowed but never imported: {unused}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_imports_under_type_checking_do_not_count() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import router.app\n"
        "def f():\n    import inflight.names\n"
    )
    assert [ast.unparse(node) for node in _runtime_imports(tree)] == [
        "from typing import TYPE_CHECKING",
        "import inflight.names",
    ]
