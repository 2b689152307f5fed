"""Read a YAML config file and apply ``--set key=value`` overrides.

User YAML (run configurations, sweep files, ``--set`` values) is parsed by :func:`parse_yaml`, which
is ``yaml.safe_load`` with stated limits, each refused with a one-line :class:`ConfigError` naming
the file and the line:

- no anchors or aliases (``&name`` / ``*name``): an alias shares a value, and a few lines of them
  expand to gigabytes wherever the value is copied, serialised or formatted ("billion laughs");
- no key given twice in one mapping (YAML would silently keep the last);
- at most :data:`MAX_NESTING` levels of nested mappings and lists;
- at most :data:`MAX_CONFIG_BYTES` bytes of UTF-8 text;
- no integer of more than :data:`MAX_INTEGER_DIGITS` digits (Python's ``int()`` refuses them);
- the top level of a file is a mapping (an empty file is an empty mapping).
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from mr2.config.errors import ConfigError
from mr2.config.paths import DottedPathError, set_dotted
from mr2.config.schema import RunConfig, config_from_dict

__all__ = [
    "MAX_CONFIG_BYTES", "MAX_NESTING", "OPTIONS_DROPPED", "apply_overrides", "load_config", "load_yaml",
    "parse_yaml",
]

#: Largest run configuration or sweep file read (bytes).
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of mappings and lists in user YAML.
MAX_NESTING = 50
#: Most digits of an integer in user YAML: Python's limit on converting text to int
#: (``sys.get_int_max_str_digits()``); no setting needs one near it.
MAX_INTEGER_DIGITS = 4300

_MISSING_FILE = "config file {path} does not exist."
_NOT_A_FILE = "config file {path} is not a file; give a YAML file."
_UNREADABLE = "config file {path} cannot be read: {error}"
_TOO_LARGE = (
    "config file {path} is larger than {limit} bytes; a run configuration or sweep file is much smaller."
)
_NOT_UTF8 = "config file {path} is not UTF-8 text (byte {position}); save it as UTF-8."
_BAD_YAML = "config file {path} is not valid YAML: {error}"
_NOT_A_MAPPING = "the top level must be a mapping of keys; got {kind}"
_BAD_OVERRIDE = "override {item!r} must look like key.subkey=value (e.g. optim.lr=0.1)."
OPTIONS_DROPPED = (
    "--set {section}.name={new} replaces {old!r} of the configuration file, so its {section}.options "
    "({keys}) are dropped: they were {old!r}'s (set {new}'s with --set {section}.options.KEY=VALUE)"
)
#: Sections whose ``options`` belong to the section's ``name`` (a method's, a model's).
NAMED_SECTIONS = ("method", "model")
_AT_LINE = "config file {path}, line {line}: {problem}"
_ALIAS = "YAML anchors and aliases ({token}) are not supported; write the value out in full"
_DUPLICATE_KEY = "key {key!r} is given twice in the same mapping (the first value would be ignored); keep one"
_TOO_DEEP = "nested deeper than {limit} levels"
INTEGER_TOO_LONG = (
    "an integer of {digits} digits, more than the {limit} Python converts; no setting needs one this large"
)
_INTEGER_TEXT = re.compile(r"[-+]?[0-9][0-9_]*")
_UNHASHABLE_KEY = "a mapping key must be a scalar (text or number); got a {kind}"


class _Refused(yaml.YAMLError):
    """A limit of :func:`parse_yaml` (its problem and the line it is on)."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = None if mark is None else mark.line + 1


#: libyaml's parser where PyYAML has it (faster than the pure-Python one).
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BASE_LOADER):
    """``SafeLoader`` (libyaml's where available) that refuses a key given twice in a mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise _Refused(_UNHASHABLE_KEY.format(kind=type(key).__name__), key_node.start_mark) from None
            if duplicate:
                raise _Refused(_DUPLICATE_KEY.format(key=key), key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _check_events(text: str) -> None:
    """Refuse anchors, aliases and deep nesting from the event stream, before anything is built
    (an alias is never resolved, a deep document never composed)."""
    loader = _BASE_LOADER(text)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, yaml.AliasEvent):
                raise _Refused(_ALIAS.format(token=f"*{event.anchor}"), event.start_mark)
            anchor = getattr(event, "anchor", None)
            if anchor is not None:
                raise _Refused(_ALIAS.format(token=f"&{anchor}"), event.start_mark)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_NESTING:
                    raise _Refused(_TOO_DEEP.format(limit=MAX_NESTING), event.start_mark)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.ScalarEvent) and not event.style:  # plain ("" in libyaml): an int?
                digits = len(event.value) - event.value.count("_") - (event.value[:1] in "+-")
                if digits > MAX_INTEGER_DIGITS and _INTEGER_TEXT.fullmatch(event.value):
                    raise _Refused(
                        INTEGER_TOO_LONG.format(digits=digits, limit=MAX_INTEGER_DIGITS), event.start_mark
                    )
    finally:
        loader.dispose()


def _one_line(error: yaml.YAMLError) -> str:
    """PyYAML's (multi-line) message as one line, with the line number its mark gives."""
    if isinstance(error, yaml.MarkedYAMLError):
        parts = [part for part in (error.context, error.problem) if part]
        text = " ".join(" ".join(str(part).split()) for part in parts) or "invalid YAML"
        if error.problem_mark is not None:
            text += f" (line {error.problem_mark.line + 1}, column {error.problem_mark.column + 1})"
        return text
    return " ".join(str(error).split())


def parse_yaml(text: str, source: str) -> Any:
    """Parse user YAML with the limits of the module docstring.

    Args:
        text: the YAML text.
        source: where it came from, for messages (``config file <path>``, or ``override 'k=v'``).

    Raises:
        ConfigError: a limit or a syntax error, naming ``source`` and the line.

    Example:
        >>> parse_yaml("optim: {lr: 0.1}", "example")
        {'optim': {'lr': 0.1}}
        >>> try:
        ...     parse_yaml("a: &x 1\\nb: *x", "config file c.yaml")
        ... except ConfigError as error:
        ...     print(str(error)[:61])
        config file c.yaml, line 1: YAML anchors and aliases (&x) are
    """
    loader = None
    try:
        _check_events(text)
        loader = _StrictLoader(text)
        return loader.get_single_data()
    except _Refused as refused:
        if source.startswith("config file "):
            path = source.removeprefix("config file ")
            message = _AT_LINE.format(path=path, line=refused.line, problem=refused.problem)
            raise ConfigError(message) from None
        raise ConfigError(f"{source}: {refused.problem}") from None
    except yaml.YAMLError as error:
        if source.startswith("config file "):
            raise ConfigError(_BAD_YAML.format(path=source.removeprefix("config file "),
                                              error=_one_line(error))) from None
        raise ConfigError(f"{source}: not valid YAML: {_one_line(error)}") from None
    except RecursionError:  # pragma: no cover - the nesting limit comes first
        raise ConfigError(f"{source}: {_TOO_DEEP.format(limit=MAX_NESTING)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML mapping from ``path`` (limits: module docstring) with clear errors."""
    file = Path(path)
    if not file.exists():
        raise ConfigError(_MISSING_FILE.format(path=file))
    if not file.is_file():
        raise ConfigError(_NOT_A_FILE.format(path=file))
    try:
        with open(file, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        raise ConfigError(_UNREADABLE.format(path=file, error=error.strerror or error)) from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(_TOO_LARGE.format(path=file, limit=MAX_CONFIG_BYTES))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError(_NOT_UTF8.format(path=file, position=error.start)) from None
    data = parse_yaml(text, f"config file {file}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(_BAD_YAML.format(path=file, error=_NOT_A_MAPPING.format(kind=type(data).__name__)))
    return data


def apply_overrides(
    data: dict[str, Any], overrides: Sequence[str], notes: list[str] | None = None
) -> dict[str, Any]:
    """Return a copy of ``data`` with ``key.sub=value`` items set (values parsed as YAML, with the
    limits of :func:`parse_yaml`).

    When the overrides change ``method.name`` (or ``model.name``) from the name ``data`` gives, the
    ``options`` of ``data`` were the other method's (model's): they are dropped, except those the
    overrides set themselves, and a one-line note (:data:`OPTIONS_DROPPED`) is appended to ``notes``.

    Example:
        >>> apply_overrides({"optim": {"lr": 0.1}}, ["optim.lr=0.5", "method.options.c_bar=2"])
        {'optim': {'lr': 0.5}, 'method': {'options': {'c_bar': 2}}}
    """
    result = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(_BAD_OVERRIDE.format(item=item))
        shown = item if len(item) <= 80 else item[:60] + f"... ({len(item)} characters)"
        value = parse_yaml(raw, f"override {shown!r}") if raw.strip() else None
        try:
            set_dotted(result, key.strip(), value)
        except DottedPathError as error:
            raise ConfigError(_BAD_OVERRIDE.format(item=item)) from error
    _drop_options_of_another_name(data, result, [item.partition("=")[0].strip() for item in overrides], notes)
    return result


def _drop_options_of_another_name(
    before: dict[str, Any], after: dict[str, Any], keys: list[str], notes: list[str] | None
) -> None:
    for section in NAMED_SECTIONS:
        old, new = before.get(section), after.get(section)
        if not (isinstance(old, dict) and isinstance(new, dict) and "name" in old
                and new.get("name") != old["name"]
                and isinstance(old.get("options"), dict) and isinstance(new.get("options"), dict)):
            continue
        prefix = f"{section}.options"
        if prefix in keys:
            continue
        set_here = {key[len(prefix) + 1:].split(".")[0] for key in keys if key.startswith(prefix + ".")}
        dropped = [key for key in old["options"] if key not in set_here]
        for key in dropped:
            new["options"].pop(key, None)
        if dropped and notes is not None:
            notes.append(OPTIONS_DROPPED.format(section=section, new=new.get("name"), old=old["name"],
                                                keys=", ".join(map(str, dropped))))


def load_config(
    path: str | os.PathLike[str] | None, overrides: Sequence[str] = (), notes: list[str] | None = None
) -> RunConfig:
    """Load, override and validate a run configuration (``notes``: see :func:`apply_overrides`)."""
    data = load_yaml(path) if path is not None else {}
    return config_from_dict(apply_overrides(data, overrides, notes))
