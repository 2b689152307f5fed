"""Expand a sweep into run points: one resolved :class:`~mr2.config.RunConfig` per (setting, seed).

A point's name says what it is and is safe as a directory name on every file system::

    erm__seed=0
    mr2__c_bar=2__seed=1
    mr2__c_bar=0.5__lambda_rep=0.3__seed=2

(label, then each grid axis with more than one value as ``key=value`` in the spec's order, then the
seed). The key is the last part of the dotted path unless two axes of the entry share it. Points are
ordered seed-major (every setting of seed 0 first), so an interrupted sweep already holds complete
comparisons for the first seeds.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mr2.config import ConfigError, RunConfig, config_from_dict
from mr2.config.paths import DottedPathError, set_dotted
from mr2.rundir import RunDirectory
from mr2.sweep.spec import MethodEntry, SweepSpec, SweepSpecError, entry_base

__all__ = ["RunPoint", "format_value", "plan_sweep"]

_POINT_INVALID = "run {name!r} of the sweep has an invalid configuration: {error}"
_NAME_COLLISION = (
    "runs {first!r} and {second!r} of the sweep get the same directory name {name!r}; give the grid "
    "values distinct spellings"
)

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
#: Longest run name kept verbatim (file systems allow 255 bytes per name).
_MAX_NAME = 150


@dataclass(frozen=True)
class RunPoint:
    """One run of a sweep.

    Attributes:
        name: the run's directory name (see the module docstring).
        label: its method entry (the table row).
        method: the training method's registry name.
        seed: the run's seed.
        setting: the grid axes with several values and this point's values, ``((key, value), ...)``.
        setting_name: ``key=value`` parts joined by ``__`` ("" without grid axes).
        config: the resolved run configuration (``output_dir`` is the sweep directory).
    """

    name: str
    label: str
    method: str
    seed: int
    setting: tuple[tuple[str, Any], ...]
    setting_name: str
    config: RunConfig

    @property
    def run_dir(self) -> Path:
        """``<sweep_dir>/<name>``."""
        return Path(self.config.output_dir) / self.config.name

    @property
    def directory(self) -> RunDirectory:
        """The run directory's files and rules (:class:`~mr2.rundir.RunDirectory`)."""
        return RunDirectory(self.run_dir)

    @property
    def group(self) -> tuple[str, str]:
        """``(label, setting_name)``: the points that differ only in their seed."""
        return self.label, self.setting_name


def format_value(value: Any) -> str:
    """A grid value as it appears in run names: short, unambiguous, file-system safe.

    Example:
        >>> [format_value(v) for v in (2, 2.0, 0.5, 1e-4, True, None, "p=5 norm", [64, 32])]
        ['2', '2', '0.5', '0.0001', 'true', 'none', 'p_5_norm', '64-32']
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return "-".join(format_value(v) for v in value) or "empty"
    if isinstance(value, dict):
        return "-".join(f"{k}_{format_value(v)}" for k, v in value.items()) or "empty"
    text = _UNSAFE.sub("_", str(value)).strip("_")
    return text or "empty"


def _short_keys(keys: list[str]) -> dict[str, str]:
    """The last dotted part of each key, or more parts where that is ambiguous."""
    short: dict[str, str] = {}
    for key in keys:
        parts = key.split(".")
        for length in range(1, len(parts) + 1):
            candidate = ".".join(parts[-length:])
            clash = any(
                other != key and ".".join(other.split(".")[-length:]) == candidate for other in keys
            )
            if not clash:
                short[key] = candidate
                break
        else:
            short[key] = key
    return short


def _safe_name(name: str) -> str:
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    return f"{name[: _MAX_NAME - 12]}~{digest}"


def _entry_settings(entry: MethodEntry) -> list[tuple[tuple[str, Any], ...]]:
    """Every combination of the entry's axes, as ``((key, value), ...)`` in axis order."""
    keys = list(entry.axes)
    return [tuple(zip(keys, values, strict=True)) for values in itertools.product(*entry.axes.values())]


def plan_sweep(spec: SweepSpec) -> list[RunPoint]:
    """Every run of the sweep, seed-major, each with its resolved and validated configuration.

    Raises:
        SweepSpecError: a point whose configuration is invalid (naming the point and the key), or
            two points with the same directory name.

    Example:
        >>> from mr2.sweep.spec import spec_from_dict
        >>> spec = spec_from_dict({
        ...     "base": {"data": {"name": "synthetic"}, "model": {"name": "mlp"}},
        ...     "methods": {"erm": {}, "mr2": {"method.options.c_bar": [0.5, 2]}},
        ...     "seeds": [0, 1], "output_dir": "/tmp/sweeps", "name": "toy"})
        >>> [p.name for p in plan_sweep(spec)]  # doctest: +NORMALIZE_WHITESPACE
        ['erm__seed=0', 'mr2__c_bar=0.5__seed=0', 'mr2__c_bar=2__seed=0',
         'erm__seed=1', 'mr2__c_bar=0.5__seed=1', 'mr2__c_bar=2__seed=1']
        >>> point = plan_sweep(spec)[2]
        >>> point.config.method.options, point.config.seed, str(point.run_dir)
        ({'c_bar': 2}, 0, '/tmp/sweeps/toy/mr2__c_bar=2__seed=0')
    """
    sweep_dir = str(spec.sweep_dir)
    points: list[RunPoint] = []
    names: dict[str, str] = {}
    per_entry: list[tuple[MethodEntry, list[tuple[tuple[str, Any], ...]], dict[str, str]]] = []
    for entry in spec.methods:
        varying = [key for key, values in entry.axes.items() if len(values) > 1]
        per_entry.append((entry, _entry_settings(entry), _short_keys(varying)))
    for seed in spec.seeds:
        for entry, settings, short in per_entry:
            for setting in settings:
                shown = tuple((key, value) for key, value in setting if key in short)
                setting_name = "__".join(f"{short[key]}={format_value(value)}" for key, value in shown)
                name = _safe_name("__".join(part for part in (entry.label, setting_name) if part)
                                  + f"__seed={seed}")
                data = entry_base(spec.base, entry.method)
                try:
                    for key, value in (*entry.fixed.items(), *setting):
                        set_dotted(data, key, value)
                    set_dotted(data, "method.name", entry.method)
                    data.update(name=name, seed=seed, output_dir=sweep_dir)
                    config = config_from_dict(data)
                except (ConfigError, DottedPathError) as error:
                    raise SweepSpecError(_POINT_INVALID.format(name=name, error=error)) from error
                described = f"{entry.label} {setting_name} seed {seed}"
                if name in names:
                    raise SweepSpecError(
                        _NAME_COLLISION.format(first=names[name], second=described, name=name)
                    )
                names[name] = described
                points.append(RunPoint(name, entry.label, entry.method, seed, shown, setting_name, config))
    return points
