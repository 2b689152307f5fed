"""The package's imports run one way: no module of src/mr2 takes part in an import cycle.

Every ``import`` / ``from ... import`` of an ``mr2`` module counts, at module level or inside a
function (a lazy import hides a cycle; it does not remove it). Importing ``mr2.a.b`` also runs
``mr2/a/__init__.py``, so it depends on the package too, except from inside that package (a
package's own submodules are imported while it initialises; that is not a cycle).
"""

from __future__ import annotations

import ast
from pathlib import Path

import mr2

SRC = Path(mr2.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            for target in targets:
                if not target.startswith("mr2"):
                    continue
                resolved = _resolve(target, modules)
                if resolved is None or resolved == module:
                    continue
                chain = resolved.split(".")
                for depth in range(1, len(chain) + 1):  # the packages on the way are imported too
                    step = ".".join(chain[:depth])
                    if step in modules and not (module == step or module.startswith(step + ".")):
                        graph[module].add(step)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                component.append(item)
                if item == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_the_cycle_finder_sees_a_planted_cycle():
    graph = {"mr2.a": {"mr2.b"}, "mr2.b": {"mr2.c"}, "mr2.c": {"mr2.a"}, "mr2.d": {"mr2.a"}}
    assert find_cycles(graph) == [["mr2.a", "mr2.b", "mr2.c"]]


def test_the_graph_sees_lazy_imports_and_packages():
    graph = import_graph()
    assert "mr2.engine.builders" in graph["mr2.engine.run"]
    assert "mr2.models.registry" in graph["mr2.engine.builders"]  # imported inside functions
    assert "mr2.models" in graph["mr2.engine.builders"]  # its package runs first


def test_no_module_of_mr2_is_part_of_an_import_cycle():
    assert find_cycles(import_graph()) == []
