"""The report layer's imports run one way: no module of mr2.report / mr2.metrics imports, directly or
through others, a module that imports it back (read from the source with ast, lazy imports included)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).parents[2] / "src"
PACKAGES = ("mr2.report", "mr2.metrics")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, known: set[str]) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        found |= {name for name in names if name in known}
    return found


def test_no_import_cycle_in_the_report_layer() -> None:
    files = {
        module_name(p): p
        for package in PACKAGES
        for p in (SRC / Path(*package.split("."))).rglob("*.py")
    }
    known = set(files)
    # A package's __init__ re-exports its modules; edges into a package are edges to its __init__.
    graph = {name: imports_of(path, known) - {name} for name, path in files.items()}
    for name in graph:
        graph[name] = {m for m in graph[name] if not (name.startswith(m + ".") and m in PACKAGES)}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(nxt):], nxt]))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert "mr2.report.disparity" in graph["mr2.report.comparison"]  # the walk sees real edges
