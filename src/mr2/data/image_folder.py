"""ImageFolder trees: ImageNet (as prepared for torchvision's references) and any user data set.

Layout::

    root/train/<class>/<image>     the training split (a validation split is held out of it)
    root/val/<class>/<image>       the evaluation split; ``root/test/`` is used when present

Class ids follow the sorted class directory names (torchvision's rule), so the evaluation split
must hold the same class directories as ``train/``. Every training class needs at least one image.
Images are decoded with PIL (torchvision's default loader, converted to RGB) when an item is read.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torchvision.datasets import ImageFolder
from torchvision.datasets.folder import IMG_EXTENSIONS

from mr2.data import errors
from mr2.data.errors import DatasetError
from mr2.data.sources import SourceSplits
from mr2.data.validation import check_no_empty_classes

__all__ = ["EVAL_SPLIT_DIRS", "find_eval_dir", "load_image_folder", "read_image_folder"]

#: Evaluation split directories, in order of preference.
EVAL_SPLIT_DIRS = ("test", "val")


def read_image_folder(directory: str | os.PathLike[str]) -> ImageFolder:
    """One split's ImageFolder (classes may be empty here; callers check what they need).

    Args:
        directory: holds one sub-directory of images per class.

    Returns:
        ``torchvision.datasets.ImageFolder`` without a transform (items are PIL images).

    Raises:
        DatasetError: the directory is missing or holds no class directory.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetError(errors.IMAGE_FOLDER_MISSING.format(path=directory), path=directory)
    try:
        return ImageFolder(os.fspath(directory), allow_empty=True)
    except (FileNotFoundError, ValueError) as exc:
        raise DatasetError(
            errors.IMAGE_FOLDER_NO_CLASSES.format(
                path=directory, reason=exc, extensions=", ".join(IMG_EXTENSIONS)
            ),
            path=directory,
        ) from exc


def find_eval_dir(root: str | os.PathLike[str]) -> Path:
    """``root/test`` if it exists, else ``root/val``.

    Raises:
        DatasetError: neither exists (or ``root`` itself is missing).
    """
    root = Path(root)
    for name in EVAL_SPLIT_DIRS:
        if (root / name).is_dir():
            return root / name
    missing = root if not root.is_dir() else root / EVAL_SPLIT_DIRS[-1]
    raise DatasetError(errors.IMAGE_FOLDER_MISSING.format(path=missing), path=missing)


def _targets(dataset: ImageFolder) -> torch.Tensor:
    return torch.as_tensor(dataset.targets, dtype=torch.int64)


def load_image_folder(root: str | os.PathLike[str]) -> SourceSplits:
    """Index an ImageFolder tree (no image is decoded here).

    Args:
        root: the directory holding ``train/`` and ``val/`` (or ``test/``).

    Returns:
        Train and evaluation ``ImageFolder`` sources with their targets and class names.

    Raises:
        DatasetError: missing directories, a training class without images, no class
            directories, or evaluation classes that differ from the training classes.
    """
    root = Path(root)
    train_dir = root / "train"
    if not train_dir.is_dir():
        missing = root if not root.is_dir() else train_dir
        raise DatasetError(errors.IMAGE_FOLDER_MISSING.format(path=missing), path=missing)
    train = read_image_folder(train_dir)
    eval_dir = find_eval_dir(root)
    test = read_image_folder(eval_dir)
    if test.classes != train.classes:
        only_train = sorted(set(train.classes) - set(test.classes))
        only_test = sorted(set(test.classes) - set(train.classes))
        detail = f"only in train/: {only_train[:10]}, only in {eval_dir.name}/: {only_test[:10]}"
        raise DatasetError(
            errors.CLASSES_DIFFER.format(path=eval_dir, detail=detail),
            path=eval_dir,
        )
    train_targets = _targets(train)
    check_no_empty_classes(train_dir, train_targets, len(train.classes), list(train.classes))
    return SourceSplits(
        train=train,
        train_targets=train_targets,
        test=test,
        test_targets=_targets(test),
        class_names=list(train.classes),
        source=str(root),
    )
