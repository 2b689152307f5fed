"""Message constants of src/mr2 that no caller outside their module names (candidates for a ``_``).

A message constant is a module-level ``UPPER_CASE`` name bound to a string (a literal, an f-string, a
concatenation or a ``str.format`` template). A caller is any other Python file of the repository
(src, tests, benchmarks, examples, studies) that imports the name from its module or reads it as an
attribute of the module (``errors.NAME``, ``mr2.data.errors.NAME``, a module imported under another
name); a package ``__init__`` that re-exports it counts as a caller. A name also found as a word in a
Markdown file, or in another Python file without a resolved use, is listed as "unsure" and left alone.

Usage:
    python tools/private_constants.py                  # list the candidates, per module
    python tools/private_constants.py --apply FILE...  # rename them in these modules (and their __all__)
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
PYTHON_DIRS = ("src", "tests", "benchmarks", "examples", "studies", "tools")
CONSTANT = re.compile(r"^[A-Z][A-Z0-9_]*$")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_text(node: ast.expr) -> bool:
    """A string of words (a message), not a bare token such as a file name or a prefix."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and " " in node.value
    if isinstance(node, ast.JoinedStr):
        return any(_is_text(part) for part in node.values if isinstance(part, ast.Constant))
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _is_text(node.func.value)
    return False


def message_constants(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text()).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if value is None or not _is_text(value):
            continue
        names += [t.id for t in targets if isinstance(t, ast.Name) and CONSTANT.match(t.id)]
    return names


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def uses(path: Path, modules: set[str]) -> set[tuple[str, str]]:
    """``(module, name)`` pairs that ``path`` reads from another module."""
    tree = ast.parse(path.read_text())
    aliases: dict[str, str] = {}  # local name -> module
    found: set[tuple[str, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    aliases[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in modules:
                    aliases[alias.asname or alias.name] = submodule
                else:
                    found.add((node.module, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node.value)
            if dotted is None:
                continue
            head, _, rest = dotted.partition(".")
            if head in aliases:
                module = aliases[head] + (f".{rest}" if rest else "")
                found.add((module, node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            dotted = _dotted(node.args[0])
            if dotted is not None and dotted.partition(".")[0] in aliases:
                head, _, rest = dotted.partition(".")
                found.add((aliases[head] + (f".{rest}" if rest else ""), str(node.args[1].value)))
    return found


def candidates() -> tuple[dict[Path, list[str]], dict[Path, list[str]]]:
    """Per module of src/mr2: the constants no other file uses, and those it cannot be sure of."""
    files = sorted(SRC.rglob("*.py"))
    modules = {module_name(p) for p in files}
    python_files = [p for d in PYTHON_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    used: dict[Path, set[tuple[str, str]]] = {p: uses(p, modules) for p in python_files}
    texts = {p: p.read_text() for p in python_files}
    defined = {p: set(message_constants(p)) if p.is_relative_to(SRC) else set() for p in python_files}
    imported = {p: {name for _, name in found} for p, found in used.items()}
    markdown = " ".join(p.read_text() for p in [*ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")])
    private: dict[Path, list[str]] = {}
    unsure: dict[Path, list[str]] = {}
    for path in files:
        module = module_name(path)
        for name in message_constants(path):
            if any((module, name) in found for p, found in used.items() if p != path):
                continue
            word = re.compile(rf"\b{name}\b")
            # Another file that defines or imports a constant of this name speaks of its own.
            others = [t for p, t in texts.items() if p != path and name not in defined[p] | imported[p]]
            if word.search(markdown) or any(word.search(t) for t in others):
                unsure.setdefault(path, []).append(name)
            else:
                private.setdefault(path, []).append(name)
    return private, unsure


def apply(path: Path, names: list[str]) -> None:
    """``NAME`` -> ``_NAME`` in ``path`` (not after a dot: another module's constant), out of ``__all__``."""
    text = path.read_text()
    for name in names:
        text = re.sub(rf'^( *)"{name}",\n', "", text, flags=re.MULTILINE)  # an __all__ line of its own
        text = re.sub(rf'"{name}", ?', "", text)  # inside a one-line __all__
        text = re.sub(rf"(?<![\w.]){name}\b", f"_{name}", text)
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apply", nargs="+", metavar="FILE", help="rename the candidates of these modules")
    args = parser.parse_args()
    private, unsure = candidates()
    if args.apply:
        for file in args.apply:
            path = Path(file).resolve()
            if private.get(path):
                apply(path, private[path])
                print(f"{path.relative_to(ROOT)}: {len(private[path])} made private")
        return 0
    for path in sorted(set(private) | set(unsure)):
        print(f"{path.relative_to(ROOT)}")
        if private.get(path):
            print(f"  private: {' '.join(private[path])}")
        if unsure.get(path):
            print(f"  unsure:  {' '.join(unsure[path])}")
    total = sum(len(message_constants(p)) for p in SRC.rglob("*.py"))
    print(f"{total} message constants; {sum(map(len, private.values()))} used by no other file, "
          f"{sum(map(len, unsure.values()))} unsure")
    return 0


if __name__ == "__main__":
    sys.exit(main())
