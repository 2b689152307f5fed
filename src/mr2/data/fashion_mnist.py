"""Fashion-MNIST from its IDX files (gzipped or plain).

The IDX format (LeCun's MNIST format) is a big-endian header followed by the raw array:

* a 4-byte magic number ``0x0000TTDD``: two zero bytes, a type code ``TT`` (0x08 = uint8) and the
  number of dimensions ``DD``; labels are ``0x00000801`` (uint8, 1-D), images ``0x00000803``
  (uint8, 3-D);
* ``DD`` big-endian uint32 sizes;
* the data, ``prod(sizes) * itemsize`` bytes, C order.

Files are looked up in the Debian package's location (``apt-get install dataset-fashion-mnist``:
``/usr/share/datasets/fashion-mnist``) or under a given root, directly or in torchvision's
``FashionMNIST/raw`` layout. Nothing is downloaded unless ``download=True``.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mr2.data import errors
from mr2.data.errors import DatasetError
from mr2.data.sources import SplitArrays
from mr2.data.validation import check_labels, check_no_empty_classes, check_same_length

__all__ = [
    "DEFAULT_FASHION_MNIST_ROOT",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_FILES",
    "IDX_IMAGES_MAGIC",
    "IDX_LABELS_MAGIC",
    "find_fashion_mnist_files",
    "load_fashion_mnist",
    "read_idx",
]

#: Where the Debian package ``dataset-fashion-mnist`` installs the files.
DEFAULT_FASHION_MNIST_ROOT = Path("/usr/share/datasets/fashion-mnist")

#: Split part -> file name (without ``.gz``; both the gzipped and the plain file are accepted).
FASHION_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

#: Class names, by class id (from the data set's documentation).
FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]

IDX_LABELS_MAGIC = 0x00000801
IDX_IMAGES_MAGIC = 0x00000803

_IDX_TYPES: dict[int, np.dtype[Any]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_maybe_gzipped(path: Path) -> bytearray:
    """The file's bytes, decompressed when they start with the gzip magic (whatever the name)."""
    with open(path, "rb") as handle:
        raw = handle.read()
    if not raw.startswith(_GZIP_MAGIC):
        return bytearray(raw)
    try:
        return bytearray(gzip.decompress(raw))
    except (EOFError, OSError, zlib.error) as exc:
        raise DatasetError(errors.IDX_BAD_GZIP.format(path=path, reason=exc), path=path) from exc


def read_idx(path: str | os.PathLike[str], expected_magic: int) -> torch.Tensor:
    """Read an IDX file (gzipped or plain) and check its magic number and size.

    Args:
        path: the file.
        expected_magic: ``IDX_LABELS_MAGIC`` (0x801) or ``IDX_IMAGES_MAGIC`` (0x803), or any IDX
            magic number (type code and number of dimensions).

    Returns:
        The array as a CPU tensor of the file's shape (uint8 for the Fashion-MNIST files;
        multi-byte types are converted to native byte order).

    Raises:
        DatasetError: wrong magic number, truncated file, bytes past the announced size, or a
            corrupt gzip stream.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     path = Path(tmp, "labels-idx1-ubyte")
        ...     _ = path.write_bytes(bytes([0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9]))
        ...     read_idx(path, IDX_LABELS_MAGIC)
        tensor([7, 0, 9], dtype=torch.uint8)
    """
    path = Path(path)
    kind = {IDX_LABELS_MAGIC: "label", IDX_IMAGES_MAGIC: "image"}.get(expected_magic, "data")
    buffer = _read_maybe_gzipped(path)
    found_magic = int.from_bytes(bytes(buffer[:4]).ljust(4, b"\xff"), "big")
    if found_magic != expected_magic:
        raise DatasetError(
            errors.IDX_BAD_MAGIC.format(
                path=path, found=found_magic, expected=expected_magic, kind=kind
            ),
            path=path,
        )
    dtype = _IDX_TYPES.get((expected_magic >> 8) & 0xFF)
    if dtype is None or expected_magic >> 16:
        raise ValueError(f"0x{expected_magic:08X} is not an IDX magic number")
    ndim = expected_magic & 0xFF
    header = 4 + 4 * ndim
    if len(buffer) < header:
        raise DatasetError(
            errors.IDX_TRUNCATED.format(
                path=path, shape="(incomplete header)", expected="?", found=max(len(buffer) - 4, 0)
            ),
            path=path,
        )
    shape = tuple(int(size) for size in np.frombuffer(buffer, ">u4", count=ndim, offset=4))
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    found = len(buffer) - header
    if found < expected:
        raise DatasetError(
            errors.IDX_TRUNCATED.format(path=path, shape=shape, expected=expected, found=found),
            path=path,
        )
    if found > expected:
        raise DatasetError(
            errors.IDX_TRAILING_BYTES.format(
                path=path, extra=found - expected, expected=expected, shape=shape
            ),
            path=path,
        )
    array = np.frombuffer(buffer, dtype, count=expected // dtype.itemsize, offset=header)
    if not dtype.isnative:
        array = array.astype(dtype.newbyteorder("="))
    return torch.from_numpy(array.reshape(shape))


def _search_dirs(root: str | os.PathLike[str] | None) -> list[Path]:
    if root is None:
        return [DEFAULT_FASHION_MNIST_ROOT]
    root = Path(root)
    return [root, root / "FashionMNIST" / "raw", root / "fashion-mnist"]


def find_fashion_mnist_files(root: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Locate the four Fashion-MNIST IDX files.

    Args:
        root: a directory holding the files, or torchvision's root (``root/FashionMNIST/raw``);
            ``None`` for the Debian location ``/usr/share/datasets/fashion-mnist``.

    Returns:
        Split part (see :data:`FASHION_MNIST_FILES`) -> path (``.gz`` preferred over plain).

    Raises:
        DatasetError: a file is missing; the message says how to obtain the data set.
    """
    dirs = _search_dirs(root)
    found: dict[str, Path] = {}
    for part, name in FASHION_MNIST_FILES.items():
        candidates = [d / f"{name}{suffix}" for d in dirs for suffix in (".gz", "")]
        existing = [path for path in candidates if path.is_file()]
        if not existing:
            searched = ", ".join(str(d) for d in dirs)
            raise DatasetError(
                errors.FASHION_MNIST_MISSING.format(name=f"{name}[.gz]", searched=searched),
                path=dirs[0] / f"{name}.gz",
            )
        found[part] = existing[0]
    return found


def _download(root: str | os.PathLike[str] | None) -> None:
    """Fetch the files with torchvision into ``root/FashionMNIST/raw`` (needs internet)."""
    if root is None:
        raise DatasetError(errors.DOWNLOAD_NEEDS_ROOT.format(name="Fashion-MNIST"))
    from torchvision.datasets import FashionMNIST

    for train in (True, False):
        FashionMNIST(os.fspath(root), train=train, download=True)


def load_fashion_mnist(
    root: str | os.PathLike[str] | None = None, *, download: bool = False
) -> SplitArrays:
    """Load Fashion-MNIST into memory: uint8 images [N, 1, 28, 28] and int64 labels.

    Args:
        root: see :func:`find_fashion_mnist_files`.
        download: fetch the files with torchvision first (into ``root/FashionMNIST/raw``) when
            they are not found; only where internet access is allowed.

    Returns:
        60000 training and 10000 test images for the real data set, 10 classes.

    Raises:
        DatasetError: missing, corrupt or inconsistent files (named in the message).
    """
    if download:
        try:
            find_fashion_mnist_files(root)
        except DatasetError:
            _download(root)
    files = find_fashion_mnist_files(root)
    num_classes = len(FASHION_MNIST_CLASSES)
    splits = {}
    for split in ("train", "test"):
        images_path, labels_path = files[f"{split}_images"], files[f"{split}_labels"]
        images = read_idx(images_path, IDX_IMAGES_MAGIC)
        labels = check_labels(labels_path, read_idx(labels_path, IDX_LABELS_MAGIC), num_classes)
        check_same_length(
            labels_path,
            "the label file",
            labels.numel(),
            images.shape[0],
            f"{images_path.name} holds {images.shape[0]} images",
        )
        splits[split] = (images.unsqueeze(1), labels)
    check_no_empty_classes(
        files["train_labels"], splits["train"][1], num_classes, FASHION_MNIST_CLASSES
    )
    if splits["train"][0].shape[1:] != splits["test"][0].shape[1:]:
        raise DatasetError(
            errors.SHAPE_MISMATCH.format(
                path=files["test_images"],
                found=tuple(splits["test"][0].shape[1:]),
                expected=tuple(splits["train"][0].shape[1:]),
                detail=f"the shape of the images in {files['train_images']}",
            ),
            path=files["test_images"],
        )
    return SplitArrays(
        x_train=splits["train"][0],
        y_train=splits["train"][1],
        x_test=splits["test"][0],
        y_test=splits["test"][1],
        class_names=list(FASHION_MNIST_CLASSES),
        source=str(files["train_images"].parent),
    )
