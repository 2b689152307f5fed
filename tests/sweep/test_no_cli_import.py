"""The sweep and tune layers sit below the command line: no module under ``mr2.sweep`` or ``mr2.tune``
imports ``mr2.cli`` (at module level, inside a function, or by name like the fork server's preload
list), read from the sources with ``ast``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import mr2

SRC = Path(mr2.__file__).resolve().parent
#: A string that is a module name of mr2 (``"mr2.cli.main"``).
_MODULE = re.compile(r"mr2(\.\w+)+")


def _imported(source: str, path: Path) -> set[str]:
    """The absolute names of the modules that ``source`` (the text of ``path``) imports."""
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _MODULE.fullmatch(node.value):
            names.add(node.value)  # imported by name (importlib, the fork server's preload list)
    return names


def test_the_reader_sees_lazy_and_relative_imports_of_the_cli() -> None:
    source = "def f():\n    from ..cli.main import main\n    import mr2.cli.train\n_PRELOAD = ('mr2.cli.eval',)\n"
    names = _imported(source, SRC / "sweep" / "processes.py")
    assert {"mr2.cli.main", "mr2.cli.main.main", "mr2.cli.train", "mr2.cli.eval"} <= names


def test_sweep_and_tune_never_import_the_command_line() -> None:
    offenders = sorted(
        f"{path.relative_to(SRC)} imports {name}"
        for layer in ("sweep", "tune")
        for path in sorted((SRC / layer).rglob("*.py"))
        for name in _imported(path.read_text(), path)
        if name == "mr2.cli" or name.startswith("mr2.cli.")
    )
    assert offenders == []
