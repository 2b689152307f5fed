"""Read a YAML config file and apply ``--set key=value`` overrides."""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from mr2.config.paths import DottedPathError, set_dotted
from mr2.config.schema import ConfigError, RunConfig, config_from_dict

__all__ = ["apply_overrides", "load_config", "load_yaml"]

MISSING_FILE = "config file {path} does not exist."
BAD_YAML = "config file {path} is not valid YAML: {error}"
BAD_OVERRIDE = "override {item!r} must look like key.subkey=value (e.g. optim.lr=0.1)."


def load_yaml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Parse a YAML mapping from ``path`` with clear errors."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(MISSING_FILE.format(path=file))
    try:
        data = yaml.safe_load(file.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(BAD_YAML.format(path=file, error=error)) from error
    if not isinstance(data, dict):
        raise ConfigError(BAD_YAML.format(path=file, error="the top level must be a mapping"))
    return data


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with ``key.sub=value`` items set (values parsed as YAML).

    Example:
        >>> apply_overrides({"optim": {"lr": 0.1}}, ["optim.lr=0.5", "method.options.c_bar=2"])
        {'optim': {'lr': 0.5}, 'method': {'options': {'c_bar': 2}}}
    """
    result = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(BAD_OVERRIDE.format(item=item))
        try:
            set_dotted(result, key.strip(), yaml.safe_load(raw) if raw.strip() else None)
        except DottedPathError as error:
            raise ConfigError(BAD_OVERRIDE.format(item=item)) from error
    return result


def load_config(path: str | os.PathLike[str] | None, overrides: Sequence[str] = ()) -> RunConfig:
    """Load, override and validate a run configuration."""
    data = load_yaml(path) if path is not None else {}
    return config_from_dict(apply_overrides(data, overrides))
