"""CIFAR-10 / CIFAR-100 in torchvision's (the original "python version") format, and long tails.

Layout under ``root`` (what the official archives extract to; torchvision reads the same)::

    cifar-10-batches-py/  data_batch_1 .. data_batch_5, test_batch, batches.meta
    cifar-100-python/     train, test, meta

Each file is a pickled dict: ``data`` (uint8 [N, 3072]: 1024 red, then green, then blue values of
a 32x32 image, row-major), ``labels`` (CIFAR-10) or ``fine_labels`` (CIFAR-100) and, in the meta
file, ``label_names`` / ``fine_label_names``. torchvision's own classes verify the md5 sums of the
real files; this reader checks structure instead (shapes, dtypes, label range), so any file in the
format loads, and unpickles nothing but dicts, lists, strings and numpy arrays.

The long-tailed variant (Cao et al., 2019, LDAM) keeps
``n_k = floor(n_max * (1 / imbalance_factor) ** (k / (K - 1)))`` training samples of class ``k``:
the first ``n_k`` of the class in a seeded permutation. The test split stays balanced.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from mr2.data import errors
from mr2.data.errors import DatasetError
from mr2.data.sources import SplitArrays
from mr2.data.splits import first_per_class
from mr2.data.validation import check_labels, check_no_empty_classes, check_same_length

__all__ = [
    "CIFAR_LAYOUTS",
    "CifarLayout",
    "load_cifar",
    "long_tailed_counts",
    "long_tailed_indices",
    "read_cifar_pickle",
]


@dataclass(frozen=True)
class CifarLayout:
    """Where a CIFAR variant's files are and which keys they use."""

    folder: str
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    meta_file: str
    label_key: str
    names_key: str
    archive: str


CIFAR_LAYOUTS = {
    10: CifarLayout(
        folder="cifar-10-batches-py",
        train_files=tuple(f"data_batch_{i}" for i in range(1, 6)),
        test_files=("test_batch",),
        meta_file="batches.meta",
        label_key="labels",
        names_key="label_names",
        archive="cifar-10-python.tar.gz",
    ),
    100: CifarLayout(
        folder="cifar-100-python",
        train_files=("train",),
        test_files=("test",),
        meta_file="meta",
        label_key="fine_labels",
        names_key="fine_label_names",
        archive="cifar-100-python.tar.gz",
    ),
}

# The globals a CIFAR pickle needs: numpy array reconstruction, and (for bytes pickled with
# protocol 2) codecs.encode. Python 2 era files name numpy.core; numpy 2 calls it numpy._core.
_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"): ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"): ("numpy._core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"): ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"): ("numpy", "ndarray"),
    ("numpy", "dtype"): ("numpy", "dtype"),
    ("_codecs", "encode"): ("_codecs", "encode"),
}


class _DataUnpickler(pickle.Unpickler):
    def __init__(self, file: BinaryIO, path: Path) -> None:
        super().__init__(file, encoding="latin1")
        self._path = path

    def find_class(self, module: str, name: str) -> Any:
        target = _ALLOWED_GLOBALS.get((module, name))
        if target is None:
            raise DatasetError(
                errors.UNSAFE_PICKLE.format(path=self._path, global_name=f"{module}.{name}"),
                path=self._path,
            )
        return super().find_class(*target)


def _as_str(value: Any) -> Any:
    return value.decode("latin1") if isinstance(value, bytes) else value


def read_cifar_pickle(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Unpickle one CIFAR batch or meta file (keys as ``str``), refusing arbitrary globals.

    Args:
        path: the file.

    Returns:
        The file's dict.

    Raises:
        DatasetError: the file is missing, truncated, not a pickle, not a dict, or references a
            global other than numpy's array reconstruction.
    """
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            content = _DataUnpickler(handle, path).load()
    except DatasetError:
        raise
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError, AttributeError) as exc:
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise DatasetError(errors.CIFAR_UNREADABLE.format(path=path, reason=reason), path) from exc
    if not isinstance(content, dict):
        raise DatasetError(
            errors.CIFAR_UNREADABLE.format(
                path=path, reason=f"holds a {type(content).__name__}, not a dict"
            ),
            path=path,
        )
    return {_as_str(key): value for key, value in content.items()}


def _require(path: Path, content: dict[str, Any], key: str) -> Any:
    if key not in content:
        raise DatasetError(
            errors.CIFAR_UNREADABLE.format(
                path=path, reason=f"no key {key!r}; keys: {sorted(content)}"
            ),
            path=path,
        )
    return content[key]


def _read_split(
    directory: Path, files: tuple[str, ...], layout: CifarLayout, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    images, labels = [], []
    for name in files:
        path = directory / name
        content = read_cifar_pickle(path)
        data = _require(path, content, "data")
        if not (
            isinstance(data, np.ndarray)
            and data.dtype == np.uint8
            and data.ndim == 2
            and data.shape[1] == 3 * 32 * 32
        ):
            raise DatasetError(
                errors.CIFAR_BAD_ARRAY.format(
                    path=path,
                    dtype=getattr(data, "dtype", type(data).__name__),
                    shape=getattr(data, "shape", "?"),
                ),
                path=path,
            )
        try:
            file_labels = torch.as_tensor(np.asarray(_require(path, content, layout.label_key)))
        except (TypeError, ValueError) as exc:
            raise DatasetError(
                errors.CIFAR_UNREADABLE.format(path=path, reason=f"{layout.label_key}: {exc}"),
                path=path,
            ) from exc
        file_labels = check_labels(path, file_labels, num_classes, what=f"`{layout.label_key}`")
        check_same_length(
            path, f"`{layout.label_key}`", file_labels.numel(), data.shape[0], "rows of `data`"
        )
        images.append(torch.from_numpy(np.ascontiguousarray(data)).view(-1, 3, 32, 32))
        labels.append(file_labels)
    return torch.cat(images), torch.cat(labels)


def _cifar_dir(root: str | os.PathLike[str], layout: CifarLayout) -> Path:
    root = Path(root)
    if root.name == layout.folder and not (root / layout.folder).is_dir():
        return root
    return root / layout.folder


def load_cifar(
    root: str | os.PathLike[str], num_classes: int = 10, *, download: bool = False
) -> SplitArrays:
    """Load CIFAR-10 or CIFAR-100 into memory as uint8 [N, 3, 32, 32] images.

    Args:
        root: the directory holding ``cifar-10-batches-py/`` or ``cifar-100-python/`` (or that
            directory itself).
        num_classes: 10 or 100.
        download: let torchvision download and extract the archive into ``root`` first when the
            files are missing (needs internet).

    Returns:
        50000 training and 10000 test images for the real data sets.

    Raises:
        DatasetError: missing, corrupt or inconsistent files (named in the message).
    """
    if num_classes not in CIFAR_LAYOUTS:
        raise ValueError(f"CIFAR has 10 or 100 classes, not {num_classes}")
    layout = CIFAR_LAYOUTS[num_classes]
    directory = _cifar_dir(root, layout)
    wanted = [*layout.train_files, *layout.test_files, layout.meta_file]
    missing = [name for name in wanted if not (directory / name).is_file()]
    if missing and download:
        from torchvision.datasets import CIFAR10, CIFAR100

        dataset_class = CIFAR10 if num_classes == 10 else CIFAR100
        dataset_class(os.fspath(root), train=True, download=True)
        directory = Path(root) / layout.folder
        missing = [name for name in wanted if not (directory / name).is_file()]
    if missing:
        raise DatasetError(
            errors.CIFAR_MISSING.format(
                path=directory / missing[0],
                version=num_classes,
                folder=layout.folder,
                files=", ".join(wanted),
                archive=layout.archive,
            ),
            path=directory / missing[0],
        )
    meta_path = directory / layout.meta_file
    names = [str(_as_str(name)) for name in _require(meta_path, read_cifar_pickle(meta_path),
                                                      layout.names_key)]
    if len(names) != num_classes:
        raise DatasetError(
            errors.CLASS_NAMES_MISMATCH.format(
                path=meta_path, found=len(names), expected=num_classes
            ),
            path=meta_path,
        )
    x_train, y_train = _read_split(directory, layout.train_files, layout, num_classes)
    x_test, y_test = _read_split(directory, layout.test_files, layout, num_classes)
    check_no_empty_classes(directory, y_train, num_classes, names)
    return SplitArrays(x_train, y_train, x_test, y_test, names, source=str(directory))


def long_tailed_counts(n_max: int, num_classes: int, imbalance_factor: float) -> torch.Tensor:
    """Per-class sizes of an exponentially long-tailed training set.

    ``n_k = floor(n_max * (1 / imbalance_factor) ** (k / (K - 1)))``: class 0 keeps ``n_max``,
    class ``K - 1`` keeps ``n_max / imbalance_factor``.

    Args:
        n_max: size of the largest (first) class.
        num_classes: K.
        imbalance_factor: ``n_0 / n_{K-1}``, at least 1 (1: balanced).

    Returns:
        int64 [K].

    Raises:
        ValueError: ``imbalance_factor < 1``.

    Example:
        >>> long_tailed_counts(5000, 10, 100.0).tolist()
        [5000, 2997, 1796, 1077, 645, 387, 232, 139, 83, 50]
    """
    if not imbalance_factor >= 1.0:
        raise ValueError(f"imbalance_factor must be >= 1, got {imbalance_factor}")
    if num_classes == 1:
        return torch.tensor([n_max], dtype=torch.int64)
    exponents = np.arange(num_classes, dtype=np.float64) / (num_classes - 1.0)
    counts = np.floor(n_max * (1.0 / imbalance_factor) ** exponents)
    return torch.from_numpy(counts.astype(np.int64))


def long_tailed_indices(
    targets: torch.Tensor, imbalance_factor: float, seed: int, num_classes: int | None = None
) -> torch.Tensor:
    """Indices of a long-tailed subset: the first ``n_k`` samples of class ``k`` in a seeded
    permutation, ``n_k`` from :func:`long_tailed_counts` with ``n_max`` the largest class
    (capped at each class's size).

    Args:
        targets: int64 class ids, [N].
        imbalance_factor: at least 1; 1 keeps everything.
        seed: seeds the permutation.
        num_classes: K (default: ``max(targets) + 1``).

    Returns:
        Sorted int64 indices into ``targets``.

    Example:
        >>> targets = torch.arange(4).repeat(100)
        >>> subset = long_tailed_indices(targets, 10.0, seed=0)
        >>> torch.bincount(targets[subset]).tolist()
        [100, 46, 21, 10]
    """
    targets = torch.as_tensor(targets, dtype=torch.int64)
    if num_classes is None:
        num_classes = int(targets.max()) + 1
    counts = torch.bincount(targets, minlength=num_classes)
    keep = torch.minimum(
        long_tailed_counts(int(counts.max()), num_classes, imbalance_factor), counts
    )
    return first_per_class(targets, keep, seed)[0]
