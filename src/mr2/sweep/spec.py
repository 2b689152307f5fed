"""The typed sweep specification: a base run configuration, methods with hyperparameter grids, seeds.

A sweep file (YAML) looks like::

    name: cifar100-resnet32          # the sweep directory is <output_dir>/<name>
    description: ERM vs MR2 ...      # one line, shown by `mr2 presets`
    output_dir: runs
    base:                            # a RunConfig mapping (or `base_config: path/to/run.yaml`)
      data: {name: cifar100, root: /data/cifar100}
      model: {name: resnet32}
      optim: {epochs: 200, lr: 0.1}
    methods:                         # one row of the comparison table per entry
      erm: {}
      mr2:
        method.options.c_bar: [0.5, 1, 2]      # a list is a grid axis (selected on validation)
        method.options.lambda_rep: 0.1         # a scalar is a fixed setting
      mr2_centered:                            # an entry label that is not a method name ...
        method.name: mr2                       # ... names its method
        method.options.center_features: true
    grid: {}                         # axes shared by every method (e.g. optim.lr: [0.05, 0.1])
    seeds: [0, 1, 2]                 # or a count: 3 -> [0, 1, 2]
    reference: erm                   # ranks the tiers, compared against
    select_by: val_accuracy          # or val_worst_class; validation split only, never test
    workers: 2                       # parallel local runs
    threads_per_run: null            # torch threads per run (default: CPU cores // workers)
    nproc_per_node: null             # launch each run with torchrun on this many processes
    devices: null                    # GPU ids shared out among the workers (CUDA_VISIBLE_DEVICES)
    required: [data.root]            # base keys the user must set (--set data.root=DIR)
    report: {tiers: 3, tier_source: test, bootstrap: 1000, plots: true}

Keys of a method entry (and of ``grid``) are dotted paths into the run configuration
(``method.options.c_bar``, ``optim.lr``, ``model.name``). A list value is a grid axis; to fix a key
whose value is itself a list, give a one-element axis: ``model.options.hidden: [[64, 32]]``.
Every problem raises :class:`SweepSpecError` naming the key. Stated maxima, checked before
anything is expanded: :data:`MAX_SEEDS` seeds (each at most :data:`MAX_SEED`), :data:`MAX_RUNS`
planned runs (settings x seeds, counted from the axes' lengths), :data:`MAX_WORKERS` workers,
threads and processes per run, :data:`MAX_BOOTSTRAP` bootstrap resamples. A file is read with the
rules of :func:`mr2.config.loading.parse_yaml` (no anchors or aliases, no duplicate keys).
"""

from __future__ import annotations

import collections
import copy
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mr2.config import ConfigError, config_from_dict, load_yaml
from mr2.config.names import check_name
from mr2.config.paths import get_dotted
from mr2.config.schema import MAX_SEED, build_dataclass
from mr2.config.shown import Shown, shown
from mr2.errors import MR2Error
from mr2.report.settings import ReportSettings
from mr2.sweep.launcher import LauncherOptions, launcher_from_dict
from mr2.value_types import is_int

__all__ = [
    "MAX_RUNS",
    "MAX_SEEDS",
    "MAX_WORKERS",
    "RESERVED_KEYS",
    "SELECT_BY",
    "MethodEntry",
    "ReportOptions",
    "SweepSpec",
    "SweepSpecError",
    "entry_base",
    "load_spec",
    "spec_from_dict",
]

_MISSING_KEY = "the sweep specification needs {path!r} ({what})."
_WRONG_TYPE = "sweep key {path!r} must be {expected}; got {value!r}."
_BASE_BOTH = "give either 'base' (a run configuration mapping) or 'base_config' (a file), not both."
_BASE_INVALID = "the base run configuration is invalid: {error}"
_NO_METHODS = "sweep key 'methods' must map at least one entry label to its settings."
_BAD_LABEL = "method entry label {label!r} must be a non-empty name of letters, digits, '_', '-' or '.'."
_EMPTY_AXIS = "grid axis {path!r} has no values; give at least one."
_RESERVED_KEY = "sweep key {path!r} sets {key!r}, which the sweep itself sets per run (remove it)."
_UNKNOWN_REFERENCE = "reference {reference!r} is not a method entry of the sweep; entries: {labels}."
_DUPLICATE_SEEDS = "sweep key 'seeds' lists a seed twice: {seeds}."
_TOO_MANY_SEEDS = (
    "sweep key 'seeds' asks for {count} seeds; a sweep has at most {limit} (list fewer seeds, or split "
    "the sweep)"
)
_TOO_MANY_RUNS = (
    "the sweep would plan {count} runs ({settings} settings x {seeds} seed(s)); at most {limit} runs "
    "are allowed: use fewer grid values, seeds or method entries, or split it into several sweeps"
)
_REQUIRED_UNSET = (
    "this sweep needs {keys} set in its base configuration; pass {flags} (e.g. to `mr2 sweep "
    "--preset NAME`)"
)
_TOO_FEW_DEVICES = (
    "sweep key 'devices' lists {count} device(s) but {workers} worker(s) x {per_run} device(s) per "
    "run need {needed}; list more devices or lower 'workers'"
)
_UNKNOWN_METHOD = "method entry {label!r}: {error}"

#: Most seeds a sweep lists (or counts).
MAX_SEEDS = 10_000
#: Most runs a sweep plans (settings x seeds), checked before the grid is expanded.
MAX_RUNS = 100_000
#: Most parallel workers, torch threads per run and processes per run.
MAX_WORKERS = 1024
#: Most bootstrap resamples of the report.
MAX_BOOTSTRAP = 100_000

#: Validation metrics hyperparameters can be selected by (never a test metric).
SELECT_BY = ("val_accuracy", "val_worst_class")

#: Run-config keys the sweep sets for every point; a spec must not set them.
#: Run-configuration keys the sweep sets per run (a run's name, seed and output directory).
RESERVED_KEYS = ("name", "seed", "output_dir")
_LABEL_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")


class SweepSpecError(MR2Error, ValueError):
    """A sweep specification that cannot run; the message names the key and what is expected."""


@dataclass
class ReportOptions:
    """Options of the report written at the end (those of :func:`mr2.report.write_report`)."""

    tiers: int | None = None
    tier_source: Literal["test", "validation"] = "test"
    bootstrap: int = 1000
    bottom_fraction: float = 0.1
    alpha: float = 0.05
    plots: bool = True
    #: Fixed tiers, one index per class (0 = easiest, -1 = unranked), instead of ranking the reference
    #: runs (``tiers`` and ``tier_source`` then unused); checked against K when the report is written.
    tier_assignment: list[int] | None = None

    def settings(self, *, reference: str, plots: bool | None = None) -> ReportSettings:
        """The report's settings (:class:`mr2.report.settings.ReportSettings`) this section describes,
        for ``reference``; ``plots`` overrides the section's."""
        return ReportSettings(
            reference=reference,
            num_tiers=self.tiers,
            tier_source=self.tier_source,
            bottom_fraction=self.bottom_fraction,
            alpha=self.alpha,
            bootstrap_resamples=self.bootstrap,
            plots=self.plots if plots is None else plots,
            tier_assignment=None if self.tier_assignment is None else tuple(self.tier_assignment),
            tiers_ranked_by=None if self.tier_assignment is None else "the sweep's report.tier_assignment",
        )


@dataclass
class MethodEntry:
    """One row of the comparison: a label, its fixed settings and its grid axes.

    Attributes:
        label: the row's name (also the start of its run names).
        method: the training method's registry name (``label`` unless ``method.name`` is set).
        fixed: dotted config key -> value, applied to every point of the entry.
        axes: dotted config key -> values; the entry's points are their Cartesian product.
    """

    label: str
    method: str
    fixed: dict[str, Any] = field(default_factory=dict)
    axes: dict[str, list[Any]] = field(default_factory=dict)


@dataclass
class SweepSpec:
    """A validated sweep; see the module docstring for the file format.

    Attributes:
        name: the sweep's name; its directory is ``<output_dir>/<name>``.
        base: the base run configuration as a nested mapping (validated).
        methods: the method entries, in file order.
        seeds: the seeds every setting is run with.
        reference: label of the reference entry (ranks the tiers).
        output_dir: where the sweep directory goes.
        workers: runs executed in parallel (local processes).
        select_by: validation metric for hyperparameter selection.
        threads_per_run: torch threads per run (None: CPU cores // workers, at least 1).
        nproc_per_node: launch every run with ``torchrun --nproc_per_node`` (None: plain python).
        devices: GPU ids; each worker gets its own ``nproc_per_node`` (or 1) of them through
            ``CUDA_VISIBLE_DEVICES`` (None: the environment's devices, shared by every run).
        description: one line describing the sweep.
        report: options of the final report.
        source: the file it was read from, if any.
        launcher: where the runs execute (:mod:`mr2.sweep.launcher`).
        data: the validated mapping it was built from (``base_config`` resolved; kept in
            ``sweep.json`` so that ``mr2 sweep status|report DIR`` can rebuild the sweep).
    """

    name: str
    base: dict[str, Any]
    methods: list[MethodEntry]
    seeds: list[int]
    reference: str
    output_dir: str = "runs"
    workers: int = 1
    select_by: Literal["val_accuracy", "val_worst_class"] = "val_accuracy"
    threads_per_run: int | None = None
    nproc_per_node: int | None = None
    devices: list[int] | None = None
    description: str = ""
    report: ReportOptions = field(default_factory=ReportOptions)
    source: Path | None = None
    launcher: LauncherOptions = field(default_factory=LauncherOptions)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def sweep_dir(self) -> Path:
        """``<output_dir>/<name>``: holds one directory per run, ``configs/`` and ``report/``."""
        return Path(self.output_dir) / self.name

    def entry(self, label: str) -> MethodEntry:
        """The method entry named ``label``."""
        for entry in self.methods:
            if entry.label == label:
                return entry
        raise KeyError(label)


@dataclass
class _SweepFile:
    """The keys of a sweep file and their types, checked by the run configuration's validator
    (:func:`mr2.config.schema.build_dataclass`); ranges and cross-field rules are checked after."""

    name: str | None = None
    description: str = ""
    output_dir: str = "runs"
    base: dict[str, Any] | None = None
    base_config: str | None = None
    methods: dict[str, Any] | None = None
    grid: dict[str, Any] | None = None
    seeds: int | list[Any] = field(default_factory=lambda: [0])
    reference: str | None = None
    select_by: Literal["val_accuracy", "val_worst_class"] = "val_accuracy"
    workers: int = 1
    threads_per_run: int | None = None
    nproc_per_node: int | None = None
    devices: list[Any] | None = None
    required: Any = field(default_factory=list)  # a list of dotted keys: checked by _load_base
    report: ReportOptions = field(default_factory=ReportOptions)
    launcher: dict[str, Any] | None = None


def _wrong(path: str, expected: str, value: Any) -> SweepSpecError:
    return SweepSpecError(_WRONG_TYPE.format(path=path, expected=expected, value=Shown(value)))


def _as_sweep_error(error: ConfigError) -> SweepSpecError:
    """The validator's message with the sweep's vocabulary ("sweep key", not "config key")."""
    text = str(error)
    for old, new in (("unknown config key", "unknown sweep key"), ("config key", "sweep key"),
                     ("config section", "sweep section")):
        if text.startswith(old):
            text = new + text[len(old):]
            break
    return SweepSpecError(text)


def _at_least(value: int | None, path: str, minimum: int, *, optional: bool = False,
              maximum: int | None = None) -> None:
    if value is None and optional:
        return
    if value is None or value < minimum or (maximum is not None and value > maximum):
        expected = f"an integer >= {minimum}" if maximum is None else f"an integer in [{minimum}, {maximum}]"
        raise _wrong(path, expected + (" or null" if optional else ""), value)


def _check_report(report: ReportOptions) -> None:
    _at_least(report.tiers, "report.tiers", 1, optional=True)
    _at_least(report.bootstrap, "report.bootstrap", 0, maximum=MAX_BOOTSTRAP)
    for key in ("bottom_fraction", "alpha"):
        value = getattr(report, key)
        if not 0 < value < 1:
            raise _wrong(f"report.{key}", "a number in (0, 1)", value)
    assignment = report.tier_assignment
    if assignment is not None and (not assignment or not all(is_int(v) and v >= -1 for v in assignment)):
        raise _wrong("report.tier_assignment", "a list of tier indices (0 = easiest, -1 = unranked)",
                     assignment)


def _seeds(raw: int | list[Any]) -> list[int]:
    """The seeds (a count n: 0 .. n - 1), at most :data:`MAX_SEEDS`, checked before expanding."""
    if not is_int(raw) and not isinstance(raw, list):
        raise _wrong("seeds", "a non-empty list of integers or a count", raw)
    if isinstance(raw, int):
        _at_least(raw, "seeds", 1)
        if raw > MAX_SEEDS:
            raise SweepSpecError(_TOO_MANY_SEEDS.format(count=raw, limit=MAX_SEEDS))
        return list(range(raw))
    if not raw:
        raise _wrong("seeds", "a non-empty list of integers or a count", raw)
    if len(raw) > MAX_SEEDS:
        raise SweepSpecError(_TOO_MANY_SEEDS.format(count=len(raw), limit=MAX_SEEDS))
    for i, seed in enumerate(raw):
        if not is_int(seed) or not 0 <= seed <= MAX_SEED:
            raise _wrong(f"seeds[{i}]", f"an integer in [0, {MAX_SEED}]", seed)
    if len(set(raw)) != len(raw):
        twice = sorted(seed for seed, count in collections.Counter(raw).items() if count > 1)
        raise SweepSpecError(_DUPLICATE_SEEDS.format(seeds=shown(twice)[1:-1]))
    return list(raw)


def _check_size(methods: list[MethodEntry], seeds: list[int]) -> None:
    """At most :data:`MAX_RUNS` planned runs, counted from the axes' lengths (nothing expanded)."""
    settings = sum(math.prod(len(values) for values in entry.axes.values()) for entry in methods)
    if settings * len(seeds) > MAX_RUNS:
        raise SweepSpecError(_TOO_MANY_RUNS.format(count=settings * len(seeds), settings=settings,
                                                  seeds=len(seeds), limit=MAX_RUNS))


def _split_settings(settings: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """Dotted key -> value into fixed values and grid axes (list values)."""
    fixed: dict[str, Any] = {}
    axes: dict[str, list[Any]] = {}
    for key, value in settings.items():
        key_path = f"{path}.{key}"
        if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
            raise _wrong(key_path, "a dotted config key like optim.lr", key)
        if key in RESERVED_KEYS:
            raise SweepSpecError(_RESERVED_KEY.format(path=key_path, key=key))
        if isinstance(value, list):
            if not value:
                raise SweepSpecError(_EMPTY_AXIS.format(path=key_path))
            axes[key] = list(value)
        else:
            fixed[key] = value
    return fixed, axes


def _check_method(label: str, method: Any, fixed: dict[str, Any]) -> None:
    """Fail early on an unknown method name or option name (values are checked when a run starts)."""
    from mr2.methods.registry import available_methods, method_options

    if not isinstance(method, str) or method not in available_methods():
        raise SweepSpecError(
            _UNKNOWN_METHOD.format(
                label=label,
                error=f"unknown method {shown(method)}; valid methods: "
                f"{', '.join(sorted(available_methods()))} "
                "(an entry whose label is not a method name needs 'method.name')",
            )
        )
    valid = method_options(method)
    for key in fixed:
        if key.startswith("method.options."):
            option = key.removeprefix("method.options.").split(".")[0]
            if option not in valid:
                raise SweepSpecError(
                    _UNKNOWN_METHOD.format(
                        label=label,
                        error=f"unknown option {option!r} for method {method!r}; valid options: "
                        f"{sorted(valid)}.",
                    )
                )


def _mapping(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _wrong(path, "a mapping", value)
    return value


def _load_base(raw: _SweepFile, source: Path | None) -> dict[str, Any]:
    if raw.base is not None and raw.base_config is not None:
        raise SweepSpecError(_BASE_BOTH)
    if raw.base_config is not None:
        base_file = Path(raw.base_config).expanduser()
        if not base_file.is_absolute() and source is not None:
            base_file = source.parent / base_file
        try:
            base = load_yaml(base_file)
        except ConfigError as error:
            raise SweepSpecError(str(error)) from error
    else:
        base = copy.deepcopy(raw.base or {})
    try:
        config_from_dict(base)  # with its own name, seed and output_dir, checked like any run config
    except ConfigError as error:
        raise SweepSpecError(_BASE_INVALID.format(error=error)) from error
    for key in RESERVED_KEYS:  # a run configuration names its run, seed and output: the sweep sets them
        base.pop(key, None)
    if not isinstance(raw.required, list) or not all(isinstance(k, str) for k in raw.required):
        raise _wrong("required", "a list of dotted keys", raw.required)
    unset = [key for key in raw.required if get_dotted(base, key, None) is None]
    if unset:
        raise SweepSpecError(
            _REQUIRED_UNSET.format(keys=", ".join(unset), flags=" ".join(f"--set {key}=..." for key in unset))
        )
    return base


def _method_entries(raw: _SweepFile, base: dict[str, Any]) -> list[MethodEntry]:
    shared_fixed, shared_axes = _split_settings(raw.grid or {}, "grid")
    if shared_fixed:
        key = next(iter(shared_fixed))
        raise _wrong(f"grid.{key}", "a list of values (a grid axis)", shared_fixed[key])
    if raw.methods is None:
        raise SweepSpecError(_MISSING_KEY.format(path="methods", what="entry label -> settings"))
    if not raw.methods:
        raise SweepSpecError(_NO_METHODS)
    methods: list[MethodEntry] = []
    for label, settings in raw.methods.items():
        if not isinstance(label, str) or not label or set(label) - _LABEL_CHARS:
            raise SweepSpecError(_BAD_LABEL.format(label=Shown(label)))
        fixed, axes = _split_settings(_mapping(settings, f"methods.{label}"), f"methods.{label}")
        if "method.name" in axes:
            raise _wrong(f"methods.{label}.method.name", "one method name", axes["method.name"])
        method = fixed.pop("method.name", label)
        base_options = get_dotted(entry_base(base, method), "method.options", None) or {}
        _check_method(label, method, {
            **{f"method.options.{k}": None for k in base_options}, **shared_axes, **fixed, **axes,
        })
        methods.append(MethodEntry(label, method, fixed, {**shared_axes, **axes}))
    return methods


def entry_base(base: dict[str, Any], method: str) -> dict[str, Any]:
    """A copy of the base run configuration for an entry of ``method``. The base's ``method.options``
    are the options of the method the base names (``method.name``): an entry of another method
    starts without them (README's MR2 run configuration is then a base for an ERM entry too). A base
    that names no method gives its options to every entry.
    """
    data = copy.deepcopy(base)
    section = data.get("method")
    if isinstance(section, dict) and "name" in section and section["name"] != method:
        section.pop("options", None)
    return data


def _check_devices(raw: _SweepFile) -> None:
    if raw.devices is None:
        return
    valid = all(is_int(d) and d >= 0 for d in raw.devices)
    if not raw.devices or not valid:
        raise _wrong("devices", "a list of GPU ids (integers >= 0) or null", raw.devices)
    per_run = raw.nproc_per_node or 1
    if len(raw.devices) < raw.workers * per_run:
        needed = raw.workers * per_run
        raise SweepSpecError(_TOO_FEW_DEVICES.format(count=len(raw.devices), workers=raw.workers,
                                                    per_run=per_run, needed=needed))


def spec_from_dict(
    data: dict[str, Any], *, source: str | os.PathLike[str] | None = None, default_name: str = "sweep"
) -> SweepSpec:
    """Validate a parsed sweep file and return the :class:`SweepSpec`.

    Types and unknown keys are checked by the run configuration's validator
    (:func:`mr2.config.schema.build_dataclass` on the file's schema), then ranges and the rules that
    relate keys (the base configuration, the method entries, the reference, the devices).
    ``source`` is the file the mapping came from: ``base_config`` is resolved relative to it.

    Example:
        >>> spec = spec_from_dict({
        ...     "base": {"data": {"name": "synthetic"}, "model": {"name": "mlp"}},
        ...     "methods": {"erm": {}, "mr2": {"method.options.c_bar": [0.5, 2]}},
        ...     "seeds": 2, "reference": "erm"})
        >>> [(e.label, e.axes) for e in spec.methods], spec.seeds
        ([('erm', {}), ('mr2', {'method.options.c_bar': [0.5, 2]})], [0, 1])
        >>> try:
        ...     spec_from_dict({"methods": {"erm": {}}, "seed": [0]})
        ... except SweepSpecError as error:
        ...     print(str(error)[:60])
        unknown sweep key 'seed'; valid keys here: name, description
    """
    try:
        raw = build_dataclass(_SweepFile, data)
        launcher = launcher_from_dict(raw.launcher)
    except ConfigError as error:
        raise _as_sweep_error(error) from error
    source_path = Path(source) if source is not None else None
    base = _load_base(raw, source_path)

    name = check_name(default_name if raw.name is None else raw.name, "sweep key 'name'", SweepSpecError)
    methods = _method_entries(raw, base)
    seeds = _seeds(raw.seeds)
    _check_size(methods, seeds)
    labels = [m.label for m in methods]
    reference = labels[0] if raw.reference is None else raw.reference
    if reference not in labels:
        raise SweepSpecError(_UNKNOWN_REFERENCE.format(reference=reference, labels=", ".join(labels)))
    if not raw.output_dir:
        raise _wrong("output_dir", "a directory", raw.output_dir)
    _check_report(raw.report)
    _at_least(raw.workers, "workers", 1, maximum=MAX_WORKERS)
    _at_least(raw.threads_per_run, "threads_per_run", 1, optional=True, maximum=MAX_WORKERS)
    _at_least(raw.nproc_per_node, "nproc_per_node", 1, optional=True, maximum=MAX_WORKERS)
    _check_devices(raw)

    saved = {key: value for key, value in data.items() if key != "base_config"}
    saved["base"] = copy.deepcopy(base)
    return SweepSpec(
        name=name,
        base=base,
        methods=methods,
        seeds=seeds,
        reference=reference,
        output_dir=raw.output_dir,
        workers=raw.workers,
        select_by=raw.select_by,
        threads_per_run=raw.threads_per_run,
        nproc_per_node=raw.nproc_per_node,
        devices=raw.devices,
        description=raw.description,
        report=raw.report,
        source=source_path,
        launcher=launcher,
        data=saved,
    )


def load_spec(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and validate a sweep file; its name defaults to the file name without extension."""
    file = Path(path)
    try:
        data = load_yaml(file)
    except ConfigError as error:
        raise SweepSpecError(str(error)) from error
    return spec_from_dict(data, source=file, default_name=file.stem)
