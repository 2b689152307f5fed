"""Name -> training method, for ``method: <name>`` in a config.

A method class registers itself with :func:`register_method`; :func:`build_method` constructs it from
keyword options (its ``__init__(num_classes, *, ...)`` keywords, checked by name) and returns it
without data-dependent state, which :meth:`~mr2.methods.base.TrainingMethod.setup` allocates.

Example:
    >>> method = build_method("focal", num_classes=10, gamma=2.0)
    >>> method.name, method.gamma
    ('focal', 2.0)
    >>> try:
    ...     build_method("focal", num_classes=10, gama=2.0)
    ... except MethodConfigError as error:
    ...     print(error)
    unknown option(s) ['gama'] for method 'focal'; valid options: ['gamma'].
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from mr2.errors import MR2Error
from mr2.methods.base import TrainingMethod

__all__ = [
    "MethodConfigError",
    "available_methods",
    "build_method",
    "method_class",
    "method_options",
    "register_method",
]

UNKNOWN_METHOD = "unknown method {name!r}; valid methods: {choices}."
UNKNOWN_OPTIONS = "unknown option(s) {unknown} for method {name!r}; valid options: {valid}."
_DUPLICATE_METHOD = "method name {name!r} is already registered by {owner}."
_NOT_A_METHOD = "register_method({name!r}) must decorate a TrainingMethod subclass; got {obj!r}."

#: Modules of :mod:`mr2.methods` whose classes register themselves on import.
BUILTIN_METHOD_MODULES: tuple[str, ...] = (
    "erm",
    "lff",
    "jtt",
    "group_dro",
    "ldam",
    "logit_adjustment",
    "focal",
    "cdb",
    "mr2",
    "center_loss",
    "supcon",
    "hbr",
)

_REGISTRY: dict[str, type[TrainingMethod]] = {}
_BUILTINS_LOADED = False

M = TypeVar("M", bound=type[TrainingMethod])


class MethodConfigError(MR2Error, ValueError):
    """An unknown method name or option; the message lists the valid ones."""


def register_method(name: str) -> Callable[[M], M]:
    """Class decorator: make ``cls`` buildable as ``method: <name>`` and set ``cls.name``."""

    def decorate(cls: M) -> M:
        if not (isinstance(cls, type) and issubclass(cls, TrainingMethod)):
            raise TypeError(_NOT_A_METHOD.format(name=name, obj=cls))
        owner = _REGISTRY.get(name)
        if owner is not None and owner.__qualname__ != cls.__qualname__:
            raise MethodConfigError(_DUPLICATE_METHOD.format(name=name, owner=owner.__qualname__))
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        for module in BUILTIN_METHOD_MODULES:
            importlib.import_module(f"mr2.methods.{module}")
        _BUILTINS_LOADED = True


def available_methods() -> list[str]:
    """Sorted names of every registered method."""
    _load_builtins()
    return sorted(_REGISTRY)


def method_class(name: str) -> type[TrainingMethod]:
    """The class registered as ``name`` (what it is: :attr:`TrainingMethod.plain_loss`,
    :attr:`~TrainingMethod.reads_features`, ...).

    Raises:
        MethodConfigError: unknown ``name`` (the message lists the valid ones).
    """
    return _lookup(name)


def _lookup(name: str) -> type[TrainingMethod]:
    _load_builtins()
    if name not in _REGISTRY:
        raise MethodConfigError(UNKNOWN_METHOD.format(name=name, choices=sorted(_REGISTRY)))
    return _REGISTRY[name]


def method_options(name: str) -> dict[str, Any]:
    """The keyword options of method ``name`` and their defaults (``inspect.Parameter.empty``: required).

    A method that takes ``**options`` to pass them through (MR2 to its loss) lists them with a
    ``passed_options()`` classmethod.
    """
    cls = _lookup(name)
    parameters = inspect.signature(cls.__init__).parameters
    options = {
        key: p.default
        for key, p in parameters.items()
        if key not in ("self", "num_classes")
        and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    passed = getattr(cls, "passed_options", None)
    return {**options, **passed()} if passed is not None else options


def build_method(name: str, num_classes: int, **options: Any) -> TrainingMethod:
    """Construct the method registered as ``name`` with ``num_classes`` and keyword ``options``.

    Raises:
        MethodConfigError: unknown ``name`` or option (the message lists the valid ones).
    """
    cls = _lookup(name)
    valid = method_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise MethodConfigError(UNKNOWN_OPTIONS.format(unknown=unknown, name=name, valid=sorted(valid)))
    constructor: Callable[..., TrainingMethod] = cls  # subclasses take (num_classes, **options)
    return constructor(num_classes, **options)
