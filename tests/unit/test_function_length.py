"""Issue 40: no function in the control plane (``inflight/control/``, ``external_scaler/``)
is longer than about 80 lines, so each stage of a decision can be read on one screen."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("inflight/control", "external_scaler")
MAX_LINES = 80


def _long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    tree = ast.parse(source)
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def test_the_measure_counts_a_function_from_its_def_to_its_last_line() -> None:
    def body(lines: int) -> str:
        return "".join(f"    x{i} = {i}\n" for i in range(lines))

    assert _long_functions(f"def f():\n{body(80)}", MAX_LINES) == [("f", 81)]
    assert _long_functions(f"async def g():\n{body(79)}", MAX_LINES) == []


def test_no_control_plane_function_is_longer_than_80_lines() -> None:
    found = {
        f"{path.relative_to(ROOT)}:{name}": lines
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "proto" not in path.parts
        for name, lines in _long_functions(path.read_text(), MAX_LINES)
    }
    assert found == {}, f"functions over {MAX_LINES} lines: {found}"
