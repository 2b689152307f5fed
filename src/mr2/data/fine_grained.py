"""Fine-grained classification sets through torchvision's data set classes (local files only).

Oxford-IIIT Pets, Stanford Cars, Flowers102, Food-101 and FGVC-Aircraft are read by torchvision
with ``download=False`` unless the configuration allows downloading. The official test split is the
test split here; the official training split (Flowers102: train + val, Pets and Aircraft:
trainval) is the training set a validation split is held out of. torchvision's terse "Dataset not
found" errors become a :class:`~mr2.data.errors.DatasetError` that lists the files expected.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset

from mr2.data import errors
from mr2.data.errors import DatasetError
from mr2.data.sources import SourceSplits
from mr2.data.validation import check_labels, check_no_empty_classes

__all__ = ["FINE_GRAINED", "FineGrainedSpec", "load_fine_grained"]


@dataclass(frozen=True)
class FineGrainedSpec:
    """How to read one fine-grained set with torchvision.

    Attributes:
        title: the data set's name in messages.
        folder: the directory torchvision expects under ``root``.
        layout: the files expected (for the error message).
        how_to_get: where the files come from.
        train_splits: torchvision split names that make up the training set.
        test_split: torchvision split name of the test set.
        build: ``build(root, split, download, options) -> torchvision data set``.
        targets: ``targets(dataset) -> list of class ids`` without decoding images.
    """

    title: str
    folder: str
    layout: str
    how_to_get: str
    train_splits: tuple[str, ...]
    test_split: str
    build: Callable[[str, str, bool, dict[str, Any]], Any]
    targets: Callable[[Any], list[int]]


def _pets(root: str, split: str, download: bool, options: dict[str, Any]) -> Any:
    from torchvision.datasets import OxfordIIITPet

    return OxfordIIITPet(root, split=split, target_types="category", download=download)


def _cars(root: str, split: str, download: bool, options: dict[str, Any]) -> Any:
    from torchvision.datasets import StanfordCars

    return StanfordCars(root, split=split, download=download)


def _flowers(root: str, split: str, download: bool, options: dict[str, Any]) -> Any:
    from torchvision.datasets import Flowers102

    return Flowers102(root, split=split, download=download)


def _food(root: str, split: str, download: bool, options: dict[str, Any]) -> Any:
    from torchvision.datasets import Food101

    return Food101(root, split=split, download=download)


def _aircraft(root: str, split: str, download: bool, options: dict[str, Any]) -> Any:
    from torchvision.datasets import FGVCAircraft

    level = options.get("annotation_level", "variant")
    return FGVCAircraft(root, split=split, annotation_level=level, download=download)


def _labels(dataset: Any) -> list[int]:
    # torchvision keeps the class ids of these sets in a private list; reading it avoids decoding
    # every image just to count classes.
    return list(dataset._labels)


def _sample_labels(dataset: Any) -> list[int]:
    return [int(target) for _, target in dataset._samples]


#: Registry name -> how to read it.
FINE_GRAINED: dict[str, FineGrainedSpec] = {
    "oxford_pets": FineGrainedSpec(
        title="Oxford-IIIT Pets",
        folder="oxford-iiit-pet",
        layout=(
            "root/oxford-iiit-pet/images/<Breed_name>_<n>.jpg and "
            "root/oxford-iiit-pet/annotations/{trainval,test}.txt "
            "(lines: <image id> <class id 1..37> <species> <breed id>)"
        ),
        how_to_get=(
            "Extract images.tar.gz and annotations.tar.gz from "
            "https://www.robots.ox.ac.uk/~vgg/data/pets/ into root/oxford-iiit-pet, or set "
            "`download: true` where internet is available."
        ),
        train_splits=("trainval",),
        test_split="test",
        build=_pets,
        targets=_labels,
    ),
    "stanford_cars": FineGrainedSpec(
        title="Stanford Cars",
        folder="stanford_cars",
        layout=(
            "root/stanford_cars/devkit/{cars_meta.mat,cars_train_annos.mat}, "
            "root/stanford_cars/cars_train/, root/stanford_cars/cars_test/ and "
            "root/stanford_cars/cars_test_annos_withlabels.mat (reading .mat files needs scipy)"
        ),
        how_to_get=(
            "torchvision can no longer download it (the original URL is gone); place a copy of "
            "the original files in that layout."
        ),
        train_splits=("train",),
        test_split="test",
        build=_cars,
        targets=_sample_labels,
    ),
    "flowers102": FineGrainedSpec(
        title="Flowers102",
        folder="flowers-102",
        layout=(
            "root/flowers-102/jpg/image_<00001..08189>.jpg, root/flowers-102/imagelabels.mat and "
            "root/flowers-102/setid.mat (the .mat files are md5-checked by torchvision; reading "
            "them needs scipy)"
        ),
        how_to_get=(
            "Extract 102flowers.tgz and copy imagelabels.mat and setid.mat from "
            "https://www.robots.ox.ac.uk/~vgg/data/flowers/102/ into root/flowers-102, or set "
            "`download: true` where internet is available."
        ),
        train_splits=("train", "val"),
        test_split="test",
        build=_flowers,
        targets=_labels,
    ),
    "food101": FineGrainedSpec(
        title="Food-101",
        folder="food-101",
        layout=(
            "root/food-101/images/<class>/<id>.jpg and root/food-101/meta/{train,test}.json "
            '(each {"<class>": ["<class>/<id>", ...]})'
        ),
        how_to_get=(
            "Extract food-101.tar.gz from https://data.vision.ee.ethz.ch/cvl/datasets_extra/"
            "food-101/ into root, or set `download: true` where internet is available."
        ),
        train_splits=("train",),
        test_split="test",
        build=_food,
        targets=_labels,
    ),
    "fgvc_aircraft": FineGrainedSpec(
        title="FGVC-Aircraft",
        folder="fgvc-aircraft-2013b",
        layout=(
            "root/fgvc-aircraft-2013b/data/images/<id>.jpg, data/variants.txt (one class per "
            "line) and data/images_variant_{trainval,test}.txt (lines: <id> <class>); families / "
            "manufacturers likewise with the `annotation_level` option"
        ),
        how_to_get=(
            "Extract fgvc-aircraft-2013b.tar.gz from "
            "https://www.robots.ox.ac.uk/~vgg/data/fgvc-aircraft/ into root, or set "
            "`download: true` where internet is available."
        ),
        train_splits=("trainval",),
        test_split="test",
        build=_aircraft,
        targets=_labels,
    ),
}


def _resolve_root(root: Path, folder: str) -> Path:
    """Accept the data set's own directory as well as its parent (torchvision's ``root``)."""
    if root.name == folder and not (root / folder).exists():
        return root.parent
    return root


def _open(
    spec: FineGrainedSpec, root: Path, split: str, download: bool, options: dict[str, Any]
) -> tuple[Any, torch.Tensor]:
    try:
        dataset = spec.build(os.fspath(root), split, download, options)
        targets = torch.as_tensor(spec.targets(dataset), dtype=torch.int64)
    except DatasetError:
        raise
    except (RuntimeError, OSError, ValueError, KeyError, IndexError, ImportError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise DatasetError(
            errors.FINE_GRAINED_MISSING.format(
                name=spec.title,
                path=root / spec.folder,
                reason=reason,
                layout=spec.layout,
                how_to_get=spec.how_to_get,
            ),
            path=root / spec.folder,
        ) from exc
    return dataset, targets


def load_fine_grained(
    name: str,
    root: str | os.PathLike[str],
    *,
    download: bool = False,
    options: dict[str, Any] | None = None,
) -> SourceSplits:
    """Open a fine-grained set's training and test splits (images decoded only when read).

    Args:
        name: a key of :data:`FINE_GRAINED`.
        root: torchvision's root (the parent of the data set's folder) or the folder itself.
        download: let torchvision download the files (where internet is available).
        options: per-set options (FGVC-Aircraft: ``annotation_level``).

    Returns:
        Sources yielding ``(PIL image, class id)``, their targets and class names.

    Raises:
        DatasetError: missing or unreadable files (the message lists the expected layout), labels
            out of range, or a class without training images.
    """
    spec = FINE_GRAINED[name]
    options = {} if options is None else options
    root = _resolve_root(Path(root), spec.folder)
    if not root.is_dir() and not download:
        raise DatasetError(
            errors.FINE_GRAINED_MISSING.format(
                name=spec.title,
                path=root,
                reason="the directory does not exist",
                layout=spec.layout,
                how_to_get=spec.how_to_get,
            ),
            path=root,
        )
    parts = [_open(spec, root, split, download, options) for split in spec.train_splits]
    test, test_targets = _open(spec, root, spec.test_split, False, options)
    class_names = [str(name) for name in parts[0][0].classes]
    num_classes = len(class_names)
    folder = root / spec.folder
    test_names = [str(name) for name in test.classes]
    if test_names != class_names:
        detail = (
            f"only in the training split: {sorted(set(class_names) - set(test_names))[:10]}, "
            f"only in the test split: {sorted(set(test_names) - set(class_names))[:10]}"
        )
        raise DatasetError(errors.CLASSES_DIFFER.format(path=folder, detail=detail), path=folder)
    train: Dataset[Any] = parts[0][0] if len(parts) == 1 else ConcatDataset([p[0] for p in parts])
    train_targets = check_labels(folder, torch.cat([p[1] for p in parts]), num_classes)
    test_targets = check_labels(folder, test_targets, num_classes)
    check_no_empty_classes(folder, train_targets, num_classes, class_names)
    return SourceSplits(
        train=train,
        train_targets=train_targets,
        test=test,
        test_targets=test_targets,
        class_names=class_names,
        source=str(folder),
    )
