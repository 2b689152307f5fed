"""The single entry point of the data layer: ``build_datasets(DataSection) -> DataBundle``.

:class:`~mr2.config.DataSection` is the run configuration's ``data:`` section itself (one type from
the YAML file to the loaders); the data layer reads its loading fields and ignores the loader ones
(``batch_size``, ``num_workers``, ...).

Steps, for every data set:

1. read the train and test splits from disk (nothing is downloaded unless ``download`` is set);
2. optionally subsample the training split to a long tail (``imbalance_factor > 1``; the test split
   stays as it is);
3. hold a seeded, stratified validation split out of the training split, for model selection (the
   test split is only for the final report);
4. wrap each split in an :class:`~mr2.data.indexed.IndexedDataset` whose items are
   ``(input, target, index)``; the training split is augmented, validation and test are not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mr2.config.schema import DataSection
from mr2.data import errors
from mr2.data.arrays import load_arrays
from mr2.data.cifar import load_cifar, long_tailed_indices
from mr2.data.errors import DatasetError
from mr2.data.fashion_mnist import load_fashion_mnist
from mr2.data.fine_grained import FINE_GRAINED, load_fine_grained
from mr2.data.image_folder import load_image_folder
from mr2.data.indexed import IndexedDataset
from mr2.data.sources import InMemoryDataset, SourceSplits
from mr2.data.splits import first_per_class, stratified_split
from mr2.data.synthetic import make_synthetic
from mr2.data.transforms import NORMALIZATION, REGIMES, build_transform
from mr2.data.validation import check_no_empty_classes

__all__ = [
    "DATASETS",
    "DataBundle",
    "DatasetEntry",
    "build_datasets",
    "register_dataset",
    "valid_options",
]

@dataclass
class DataBundle:
    """The three splits and what the engine needs to know about them.

    Every item of ``train``, ``val`` and ``test`` is ``(input, target, index)`` with ``index`` the
    item's position in its own split (``0..len(train) - 1`` for training).

    Attributes:
        train: the training split (augmented).
        val: validation split held out of the training data (not augmented; may be empty when
            ``val_fraction`` is 0).
        test: the test split (not augmented), for the final report only.
        num_classes: K.
        class_names: one name per class id.
        train_class_counts: int64 [K], training samples per class.
        input_shape: shape of one transformed input (e.g. ``(1, 28, 28)``, ``(3, 32, 32)``,
            ``(3, 224, 224)`` or ``(d,)``).
        regime: the transform regime used (``mnist``, ``cifar``, ``imagenet`` or ``none``).
        source: where the data came from.
    """

    train: IndexedDataset
    val: IndexedDataset
    test: IndexedDataset
    num_classes: int
    class_names: list[str]
    train_class_counts: torch.Tensor
    input_shape: tuple[int, ...]
    regime: str
    source: str


@dataclass(frozen=True)
class DatasetEntry:
    """How to read one named data set.

    Attributes:
        load: ``load(config) -> SourceSplits``.
        regime: default transform regime.
        normalization: key of :data:`~mr2.data.transforms.NORMALIZATION` (None: the regime's).
        regime_configurable: whether ``extra["regime"]`` may override ``regime``.
        options: the ``extra`` keys its loader reads; the transform's keys (``regime``, ``mean``,
            ``std``, ``mnist_crop``) are added by :func:`valid_options` where they apply.
    """

    load: Callable[[DataSection], SourceSplits]
    regime: str
    normalization: str | None = None
    regime_configurable: bool = False
    options: frozenset[str] = frozenset()


def _require_root(config: DataSection, what: str) -> str:
    if config.root is None:
        raise DatasetError(errors.ROOT_REQUIRED.format(name=config.name, what=what))
    return config.root


def _fashion_mnist(config: DataSection) -> SourceSplits:
    return load_fashion_mnist(config.root, download=config.download).to_sources()


def _cifar(num_classes: int) -> Callable[[DataSection], SourceSplits]:
    def load(config: DataSection) -> SourceSplits:
        folder = "cifar-10-batches-py" if num_classes == 10 else "cifar-100-python"
        root = _require_root(config, f"the directory holding {folder}/")
        return load_cifar(root, num_classes, download=config.download).to_sources()

    return load


def _image_folder(config: DataSection) -> SourceSplits:
    return load_image_folder(_require_root(config, "the directory holding train/ and val/"))


def _fine_grained(name: str) -> Callable[[DataSection], SourceSplits]:
    def load(config: DataSection) -> SourceSplits:
        root = _require_root(config, f"the directory holding {FINE_GRAINED[name].folder}/")
        return load_fine_grained(name, root, download=config.download, options=config.options)

    return load


def _arrays(config: DataSection) -> SourceSplits:
    data = load_arrays(_require_root(config, "the .npz or .pt file"))
    if config.options.get("regime", "none") == "none":
        data.x_train = data.x_train.to(torch.float32)
        data.x_test = data.x_test.to(torch.float32)
    return data.to_sources()


_SYNTHETIC_OPTIONS = (
    "num_classes",
    "dim",
    "train_per_class",
    "test_per_class",
    "spreads",
    "separation",
)


def _synthetic(config: DataSection) -> SourceSplits:
    options = {key: config.options[key] for key in _SYNTHETIC_OPTIONS if key in config.options}
    try:
        data = make_synthetic(**options, seed=int(config.options.get("data_seed", 0)))
    except ValueError as error:  # a size below 1 or a wrong number of spreads
        raise DatasetError(errors.BAD_DATA_OPTION.format(name=config.name, error=error)) from error
    return data.to_sources()


#: Name -> how to read it. Add your own with :func:`register_dataset`.
DATASETS: dict[str, DatasetEntry] = {
    "fashion_mnist": DatasetEntry(_fashion_mnist, "mnist", "fashion_mnist"),
    "cifar10": DatasetEntry(_cifar(10), "cifar", "cifar10"),
    "cifar100": DatasetEntry(_cifar(100), "cifar", "cifar100"),
    "imagenet": DatasetEntry(_image_folder, "imagenet", "imagenet"),
    "image_folder": DatasetEntry(_image_folder, "imagenet", None, regime_configurable=True),
    **{
        name: DatasetEntry(
            _fine_grained(name), "imagenet", "imagenet",
            options=frozenset({"annotation_level"} if name == "fgvc_aircraft" else ()),
        )
        for name in FINE_GRAINED
    },
    "arrays": DatasetEntry(_arrays, "none", None, regime_configurable=True),
    "synthetic": DatasetEntry(_synthetic, "none", options=frozenset({*_SYNTHETIC_OPTIONS, "data_seed"})),
}


def valid_options(entry: DatasetEntry) -> frozenset[str]:
    """The ``extra`` keys a data set takes: its loader's, plus the transform's that apply to it.

    ``regime`` where the regime is configurable; ``mean`` / ``std`` where the regime can normalise
    (not a fixed ``none``); ``mnist_crop`` where the regime can be ``mnist``.

    Example:
        >>> sorted(valid_options(DATASETS["fashion_mnist"]))
        ['mean', 'mnist_crop', 'std']
        >>> sorted(valid_options(DATASETS["synthetic"]))
        ['data_seed', 'dim', 'num_classes', 'separation', 'spreads', 'test_per_class', 'train_per_class']
    """
    names = set(entry.options)
    if entry.regime_configurable:
        names.add("regime")
    if entry.regime_configurable or entry.regime != "none":
        names |= {"mean", "std"}
    if entry.regime_configurable or entry.regime == "mnist":
        names.add("mnist_crop")
    return frozenset(names)


def _check_options(name: str, entry: DatasetEntry, extra: dict[str, Any]) -> None:
    valid = valid_options(entry)
    unknown = [key for key in extra if key not in valid]
    if unknown:
        raise DatasetError(
            errors.UNKNOWN_DATA_OPTIONS.format(
                name=name, keys=", ".join(map(repr, unknown)), valid=", ".join(sorted(valid)) or "none"
            )
        )


def register_dataset(name: str, entry: DatasetEntry) -> None:
    """Make ``build_datasets`` know a new data set name (replacing any entry of that name)."""
    DATASETS[name] = entry


def _input_shape(
    splits: SourceSplits, regime: str, image_size: int | None, transform: Callable[[Any], Any] | None
) -> tuple[int, ...]:
    if regime == "imagenet":
        size = 224 if image_size is None else image_size
        return (3, size, size)
    if isinstance(splits.train, InMemoryDataset):
        shape = tuple(splits.train.inputs.shape[1:])
        if regime != "none" and image_size is not None:
            shape = (*shape[:-2], image_size, image_size)
        return shape
    # A source of unknown shape: transform one sample (decodes a single image).
    sample = splits.train[0][0]
    if transform is not None:
        sample = transform(sample)
    return tuple(sample.shape)


def build_datasets(config: DataSection) -> DataBundle:
    """Read a data set and return its train / validation / test splits.

    Args:
        config: what to load (see :class:`DataSection`).

    Returns:
        The splits and their metadata.

    Raises:
        DatasetError: unknown name, an option (``extra`` key) the data set does not take (naming
            it and the valid ones), an unknown regime, missing root, or missing / corrupt /
            inconsistent files (the message names the file and the fix).
        ValueError: ``val_fraction`` outside ``[0, 1)`` or ``imbalance_factor < 1``.

    Example:
        >>> bundle = build_datasets(DataSection(
        ...     "synthetic", options={"num_classes": 3, "dim": 4, "train_per_class": 10}))
        >>> len(bundle.train), len(bundle.val), bundle.train_class_counts.tolist()
        (27, 3, [9, 9, 9])
        >>> inputs, target, index = bundle.train[5]
        >>> inputs.shape, target, index
        (torch.Size([4]), 0, 5)
    """
    entry = DATASETS.get(config.name)
    if entry is None:
        raise DatasetError(
            errors.UNKNOWN_DATASET.format(name=config.name, choices=", ".join(sorted(DATASETS)))
        )
    if not 0.0 <= config.val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in [0, 1), got {config.val_fraction}")
    _check_options(config.name, entry, config.options)
    regime = config.options.get("regime", entry.regime) if entry.regime_configurable else entry.regime
    if regime not in REGIMES:
        raise DatasetError(
            errors.UNKNOWN_REGIME.format(regime=regime, name=config.name, choices=", ".join(REGIMES))
        )
    splits = entry.load(config)
    num_classes = splits.num_classes

    pool = torch.arange(splits.train_targets.numel())
    if config.train_per_class is not None:
        counts = torch.bincount(splits.train_targets, minlength=num_classes)
        keep = counts.clamp(max=config.train_per_class)
        pool = first_per_class(splits.train_targets, keep, config.split_seed)[0]
    if config.imbalance_factor != 1.0:
        pool = long_tailed_indices(
            splits.train_targets, config.imbalance_factor, config.split_seed, num_classes
        )
        check_no_empty_classes(
            Path(splits.source), splits.train_targets[pool], num_classes, splits.class_names
        )
    train_pos, val_pos = stratified_split(
        splits.train_targets[pool], config.val_fraction, config.split_seed, num_classes
    )
    train_indices, val_indices = pool[train_pos], pool[val_pos]

    mean, std = NORMALIZATION.get(entry.normalization or "", (None, None))
    transform_options: dict[str, Any] = {
        "augment": config.augment,
        "image_size": config.image_size,
        "mean": config.options.get("mean", mean),
        "std": config.options.get("std", std),
        "mnist_crop": bool(config.options.get("mnist_crop", False)),
    }
    train_transform = build_transform(regime, train=True, **transform_options)
    eval_transform = build_transform(regime, train=False, **transform_options)
    # In-memory tensors with a deterministic transform are transformed once, not per item.
    in_memory = regime in ("mnist", "cifar", "none")
    train = IndexedDataset(
        splits.train, splits.train_targets, train_indices, train_transform,
        precompute=in_memory and not config.augment,
    )
    val = IndexedDataset(
        splits.train, splits.train_targets, val_indices, eval_transform, precompute=in_memory
    )
    test = IndexedDataset(
        splits.test, splits.test_targets, None, eval_transform, precompute=in_memory
    )
    return DataBundle(
        train=train,
        val=val,
        test=test,
        num_classes=num_classes,
        class_names=list(splits.class_names),
        train_class_counts=train.class_counts(num_classes),
        input_shape=_input_shape(splits, regime, config.image_size, eval_transform),
        regime=regime,
        source=splits.source,
    )
