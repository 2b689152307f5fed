"""Public names of a package imported on first use (PEP 562), so that importing the package is cheap.

``mr2``, ``mr2.report`` and ``mr2.sweep`` export names whose modules import torch, numpy or scipy;
the command line's fast paths (``mr2 --help``, ``--version``, ``presets``, ``sweep status``) import
these packages for a constant or an exception class only. Each package lists its exports as
``EXPORTS = {name: module}``, imports the same names under ``if TYPE_CHECKING:`` (what type checkers
read) and, under ``if not TYPE_CHECKING:``, sets ``__getattr__ = lazy_exports(__name__, EXPORTS)``
(so that a type checker still flags a misspelt name).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]

_NO_ATTRIBUTE = "module {package!r} has no attribute {name!r}"


def lazy_exports(package: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package`` that imports ``exports[name]`` on first access.

    The value is the attribute ``name`` of that module, or the module itself when ``exports[name]``
    is ``f"{package}.{name}"`` (a submodule); it is stored in the package's namespace, so the import
    happens once. Unknown names raise :class:`AttributeError` (``from package import submodule`` then
    imports the submodule as usual).
    """

    def __getattr__(name: str) -> Any:
        module_name = exports.get(name)
        if module_name is None:
            raise AttributeError(_NO_ATTRIBUTE.format(package=package, name=name))
        module = importlib.import_module(module_name)
        value = module if module_name == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
