"""Typed configuration of a training run, validated before any work starts."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from mr2.config.annotations import describe, matches
from mr2.config.errors import ConfigError
from mr2.config.names import check_name
from mr2.config.shown import Shown
from mr2.value_types import is_number

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_EPOCHS",
    "MAX_NUM_WORKERS",
    "MAX_SEED",
    "DataSection",
    "MethodSection",
    "ModelSection",
    "OptimSection",
    "RunConfig",
    "SAMSection",
    "build_dataclass",
    "config_from_dict",
    "config_to_dict",
]

_UNKNOWN_KEY = "unknown config key {path!r}; valid keys here: {valid}."
_WRONG_TYPE = "config key {path!r} must be {expected}; got {value!r} ({type})."
_NOT_A_MAPPING = "config section {path!r} must be a mapping of keys to values; got {value!r}."
_BAD_VALUE = "config key {path!r}: {problem}"
OUT_OF_RANGE = "config key {path!r} must be {expected}; got {value!r}."

#: Largest seed (``seed``, ``data.split_seed``): numpy's generators take seeds below 2**32.
MAX_SEED = 2**32 - 1
#: Most epochs of a run.
MAX_EPOCHS = 100_000
#: Largest training or evaluation batch per process.
MAX_BATCH_SIZE = 2**20
#: Most DataLoader worker processes.
MAX_NUM_WORKERS = 1024


@dataclass
class DataSection:
    """Which data set, how to load and split it, and how to batch it (the ``data:`` section).

    The same object goes to :func:`mr2.data.build_datasets` (the loading fields) and to the
    engine's loaders (``batch_size``, ``eval_batch_size``, ``num_workers``).

    Attributes:
        name: ``fashion_mnist``, ``cifar10``, ``cifar100``, ``imagenet``, ``image_folder``,
            ``oxford_pets``, ``stanford_cars``, ``flowers102``, ``food101``, ``fgvc_aircraft``,
            ``arrays``, ``synthetic`` (or a name added with :func:`mr2.data.register_dataset`).
        root: where the files are (a directory; for ``arrays`` the ``.npz`` / ``.pt`` file).
            None: the data set's default (Fashion-MNIST: the Debian location).
        val_fraction: share of every training class held out for validation, in ``[0, 1)``.
        split_seed: seeds the validation split and the subsampling (``train_per_class``,
            ``imbalance_factor``).
        imbalance_factor: ``n_max / n_min`` of an exponentially long-tailed training split
            (1: keep the training split as it is).
        train_per_class: keep at most this many training images per class (a seeded choice, made
            before the validation split is held out, so validation comes out of them); None: all.
            A small-data regime of a real data set; at least 2; not combined with
            ``imbalance_factor``.
        augment: augment the training split with the regime's standard augmentation (never for a
            linear probe, whose features are computed once).
        image_size: side of the model's input images (default: native size; 224 for ImageNet-like).
        download: allow torchvision to download missing files (only where internet is allowed).
        batch_size: training batch size per process.
        eval_batch_size: evaluation batch size per process.
        num_workers: DataLoader worker processes.
        options: per-data-set options, validated per data set: ``regime`` (``arrays`` /
            ``image_folder``: ``mnist``, ``cifar``, ``imagenet`` or ``none``), ``mean`` / ``std``
            (normalisation), ``mnist_crop`` (Fashion-MNIST: RandomCrop(28, padding=2)),
            ``annotation_level`` (FGVC-Aircraft), and for ``synthetic``: ``num_classes``, ``dim``,
            ``train_per_class``, ``test_per_class``, ``spreads``, ``separation``, ``data_seed``
            (default 0, independent of ``split_seed``).
    """

    name: str = "fashion_mnist"
    root: str | None = None
    val_fraction: float = 0.1
    split_seed: int = 0
    imbalance_factor: float = 1.0
    train_per_class: int | None = None
    augment: bool = False
    image_size: int | None = None
    download: bool = False
    batch_size: int = 128
    eval_batch_size: int = 512
    num_workers: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _raise_failed([
            ("data.val_fraction", 0.0 <= self.val_fraction < 1.0, "must be in [0, 1)"),
            ("data.imbalance_factor", self.imbalance_factor >= 1.0, "must be >= 1"),
            ("data.train_per_class", self.train_per_class is None or self.train_per_class >= 2,
             "must be null or an integer >= 2 (a class needs two images to be split and learned)"),
            ("data.train_per_class", self.train_per_class is None or self.imbalance_factor == 1.0,
             "cannot be combined with data.imbalance_factor (both subsample the training split; "
             "set one)"),
        ])
        _check_ranges([
            ("data.split_seed", self.split_seed, 0, MAX_SEED),
            ("data.batch_size", self.batch_size, 1, MAX_BATCH_SIZE),
            ("data.eval_batch_size", self.eval_batch_size, 1, MAX_BATCH_SIZE),
            ("data.num_workers", self.num_workers, 0, MAX_NUM_WORKERS),
        ])


@dataclass
class ModelSection:
    """Which model and where its weights come from (the ``model:`` section).

    The same object goes to :func:`mr2.models.build_model`.

    Attributes:
        name: ``small_cnn``, ``mlp``, ``resnet32``, ``wrn28_10``, ``resnet50``, ``vit_b_16``,
            ``linear`` (a head on cached features), ``timm:<name>`` or ``torchvision:<name>``.
        weights: local weights file (state_dict or checkpoint; read with ``weights_only=True``).
        pretrained: download the library's weights from the hub (timm / torchvision models only;
            never implicit).
        weights_key_prefix: use only the keys of ``weights`` under this prefix, prefix removed
            (``"encoder_q."`` for a MoCo v2 checkpoint, ``"backbone."``, ...).
        load_head: also load the classifier from ``weights`` (its shape must match); by default
            the head is freshly initialised for the task's classes.
        freeze_backbone: train only the head on the full model (the backbone frozen, in eval mode,
            run without autograd); ``regime: linear_probe`` instead caches the features once.
        sync_batchnorm: under torchrun, convert batch norms to synchronised batch norms.
        options: keyword arguments of the model's constructor (``{"shortcut": "B"}`` for
            resnet32, ``{"dropout": 0.3}`` for wrn28_10, ``{"img_size": 224}`` for timm ViTs, ...).
    """

    name: str = "small_cnn"
    weights: str | None = None
    pretrained: bool = False
    weights_key_prefix: str | None = None
    load_head: bool = False
    freeze_backbone: bool = False
    sync_batchnorm: bool = False
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class MethodSection:
    """Training method (``erm``, ``mr2``, ``lff``, ``jtt``, ...) and its options."""

    name: str = "erm"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SAMSection:
    """Sharpness-aware minimisation around the optimiser (``optim.sam``; docs/methods/sam.md)."""

    rho: float = 0.05
    adaptive: bool = False


@dataclass
class OptimSection:
    """Optimiser, schedule and numerics; ``sam`` (null: off) makes every step a SAM / ASAM step."""

    name: Literal["sgd", "adamw"] = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 5e-4
    epochs: int = 10
    warmup_epochs: float = 0.0
    scheduler: Literal["cosine", "constant"] = "cosine"
    grad_clip: float | None = None
    amp: Literal["none", "bf16", "fp16"] = "none"
    sam: SAMSection | None = None


@dataclass
class RunConfig:
    """A whole training run."""

    name: str = "run"
    output_dir: str = "runs"
    seed: int = 0
    deterministic: bool = False
    device: str = "auto"
    regime: Literal["scratch", "finetune", "linear_probe"] = "scratch"
    select: Literal["last", "best_val"] = "last"
    checkpoint_every: int = 1
    log_every: int = 50
    cache_dir: str | None = None
    data: DataSection = field(default_factory=DataSection)
    model: ModelSection = field(default_factory=ModelSection)
    method: MethodSection = field(default_factory=MethodSection)
    optim: OptimSection = field(default_factory=OptimSection)

    def __post_init__(self) -> None:
        _check_values(self)


def _check_values(config: RunConfig) -> None:
    _check_ranges([("seed", config.seed, 0, MAX_SEED), ("optim.epochs", config.optim.epochs, 1, MAX_EPOCHS)])
    checks = [
        ("optim.lr", config.optim.lr > 0, "must be > 0"),
        ("optim.warmup_epochs", 0 <= config.optim.warmup_epochs <= config.optim.epochs,
         "must be in [0, optim.epochs]"),
        ("optim.weight_decay", config.optim.weight_decay >= 0, "must be >= 0"),
        ("optim.grad_clip", config.optim.grad_clip is None or config.optim.grad_clip > 0,
         "must be null or > 0"),
        ("optim.sam.rho", config.optim.sam is None or config.optim.sam.rho >= 0, "must be >= 0"),
        ("checkpoint_every", config.checkpoint_every >= 1, "must be >= 1"),
        ("log_every", config.log_every >= 1, "must be >= 1"),
        ("regime", config.regime != "finetune" or config.model.weights is not None or config.model.pretrained,
         "'finetune' starts from pre-trained weights: set model.weights (a local file) or "
         "model.pretrained: true"),
    ]
    _raise_failed(checks)
    check_name(config.name, "config key 'name'")


def _check_ranges(checks: list[tuple[str, int, int, int]]) -> None:
    """Integers within their stated range: ``(path, value, lowest, highest)``."""
    for path, value, low, high in checks:
        if not low <= value <= high:
            raise ConfigError(OUT_OF_RANGE.format(path=path, expected=f"an integer in [{low}, {high}]",
                                                  value=Shown(value)))


def _raise_failed(checks: list[tuple[str, bool, str]]) -> None:
    for path, ok, problem in checks:
        if not ok:
            raise ConfigError(_BAD_VALUE.format(path=path, problem=problem))


def _takes_float(annotation: Any) -> bool:
    """``float`` or a union with ``float`` (``float | None``)."""
    return annotation is float or (get_origin(annotation) in (Union, types.UnionType)
                                   and float in get_args(annotation))


def _finite_float(value: int | float, path: str, described: str) -> float:
    """``value`` as a finite float (an int is converted), else a :class:`ConfigError`."""
    expected = "a finite number" + (" or null" if "null" in described else "")
    try:
        result = float(value)
    except OverflowError:  # an int beyond float's range (a 400-digit number)
        result = math.inf
    if not math.isfinite(result):
        raise ConfigError(OUT_OF_RANGE.format(path=path, expected=expected, value=Shown(value)))
    return result


def _optional_section(annotation: Any, value: Any) -> Any:
    """``Section | None`` with a mapping value: the section (e.g. ``optim.sam``); else as is."""
    if get_origin(annotation) in (Union, types.UnionType) and isinstance(value, dict):
        sections = [a for a in get_args(annotation) if dataclasses.is_dataclass(a)]
        if len(sections) == 1:
            return sections[0]
    return annotation


def _build(cls: type, data: Any, path: str) -> Any:
    if not isinstance(data, dict):
        raise ConfigError(_NOT_A_MAPPING.format(path=path or "<root>", value=Shown(data)))
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise ConfigError(_UNKNOWN_KEY.format(path=key_path, valid=", ".join(names)))
        annotation = _optional_section(hints[key], value)
        if dataclasses.is_dataclass(annotation):
            kwargs[key] = _build(annotation, value, key_path)  # type: ignore[arg-type]
            continue
        if not matches(value, annotation):
            raise ConfigError(
                _WRONG_TYPE.format(path=key_path, expected=describe(annotation), value=Shown(value),
                                  type=type(value).__name__)
            )
        if _takes_float(annotation) and is_number(value):
            value = _finite_float(value, key_path, describe(annotation))
        kwargs[key] = value
    return cls(**kwargs)


_T = typing.TypeVar("_T")


def build_dataclass(cls: type[_T], data: Any, path: str = "") -> _T:
    """Build dataclass ``cls`` from a mapping with the run configuration's rules: unknown keys and
    wrong types are :class:`ConfigError` naming the dotted key (``path`` prefixes it), nested
    dataclass fields are built recursively, ints are accepted for floats.

    Example:
        >>> @dataclass
        ... class Options:
        ...     partition: str | None = None
        ...     timeout_min: int = 60
        >>> build_dataclass(Options, {"timeout_min": 5}, "launcher")
        Options(partition=None, timeout_min=5)
        >>> try:
        ...     build_dataclass(Options, {"partitio": "gpu"}, "launcher")
        ... except ConfigError as error:
        ...     print(error)
        unknown config key 'launcher.partitio'; valid keys here: partition, timeout_min.
    """
    result: _T = _build(cls, data, path)
    return result


BAD_DEVICE = "device must be auto, cpu, cuda, cuda:N (a GPU index) or mps; got {value!r}"
BEST_VAL_WITHOUT_VALIDATION = (
    "select: best_val picks the checkpoint with the best validation accuracy, but data.val_fraction is 0 "
    "(no validation split); set data.val_fraction above 0 or select: last"
)


def config_from_dict(data: dict[str, Any]) -> RunConfig:
    """Build and validate a :class:`RunConfig` from a nested mapping (e.g. parsed YAML).

    Example:
        >>> config_from_dict({"method": {"name": "mr2"}, "optim": {"epochs": 2}}).optim.epochs
        2
    """
    result: RunConfig = _build(RunConfig, data, "")
    if not re.fullmatch(r"auto|cpu|mps|cuda(:[0-9]{1,3})?", result.device):
        raise ConfigError(BAD_DEVICE.format(value=result.device[:60]))
    if result.select == "best_val" and result.data.val_fraction <= 0:
        raise ConfigError(BEST_VAL_WITHOUT_VALIDATION)
    return result


def config_to_dict(config: RunConfig) -> dict[str, Any]:
    """The resolved configuration as a plain nested dict (for YAML/JSON and checkpoints)."""
    return dataclasses.asdict(config)
