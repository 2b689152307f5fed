"""Sweep presets shipped with mr2 (``src/mr2/presets/*.yaml``): ``mr2 sweep --preset NAME``.

Example:
    >>> "demo" in preset_names() and "fashion-mnist" in preset_names()
    True
    >>> load_preset("demo").reference
    'erm'
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from mr2.config import load_yaml
from mr2.sweep.spec import SweepSpec, SweepSpecError, spec_from_dict

__all__ = ["load_preset", "preset_descriptions", "preset_names", "preset_path"]

_UNKNOWN_PRESET = "unknown preset {name!r}; available presets: {names} (see `mr2 presets`)."


def _directory() -> Path:
    return Path(str(resources.files("mr2") / "presets"))


def preset_names() -> list[str]:
    """Names of the shipped presets, sorted."""
    return sorted(p.stem for p in _directory().glob("*.yaml"))


def preset_path(name: str) -> Path:
    """The YAML file of preset ``name``.

    Raises:
        SweepSpecError: no such preset (the message lists them).
    """
    path = _directory() / f"{name}.yaml"
    if not path.is_file():
        raise SweepSpecError(_UNKNOWN_PRESET.format(name=name, names=", ".join(preset_names())))
    return path


def load_preset(name: str) -> SweepSpec:
    """The validated sweep of preset ``name``."""
    path = preset_path(name)
    return spec_from_dict(load_yaml(path), source=path, default_name=name)


def preset_descriptions() -> dict[str, str]:
    """Preset name -> its one-line description (without validating the whole file)."""
    result = {}
    for name in preset_names():
        data = load_yaml(preset_path(name))
        result[name] = str(data.get("description", "")).strip()
    return result
