"""Writers of small files in the exact on-disk formats the data readers accept (IDX, CIFAR pickles,
image folders). Each writer builds the bytes independently of the code under test."""

from __future__ import annotations

import gzip
import pickle
import struct
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["dump_pickle", "write_cifar", "write_fashion_mnist", "write_idx", "write_image_folder"]


def write_idx(path: Path, array: np.ndarray, *, gz: bool, magic: int | None = None) -> Path:
    """IDX: big-endian magic (0x00 0x00 type ndim), big-endian uint32 sizes, then the data."""
    type_codes = {np.dtype(np.uint8): 0x08, np.dtype(np.int32): 0x0C, np.dtype(np.float32): 0x0D}
    if magic is None:
        magic = (type_codes[array.dtype] << 8) | array.ndim
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    body = array.astype(array.dtype.newbyteorder(">")).tobytes()
    payload = header + body
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(payload))
    else:
        path.write_bytes(payload)
    return path


def write_fashion_mnist(
    directory: Path,
    *,
    n_train: int = 30,
    n_test: int = 20,
    gz: bool = True,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Four Fashion-MNIST IDX files with random pixels; every class present in both splits."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": ((np.arange(n_test) * 3) % 10).astype(np.uint8),
    }
    names = {
        "train_images": "train-images-idx3-ubyte",
        "train_labels": "train-labels-idx1-ubyte",
        "test_images": "t10k-images-idx3-ubyte",
        "test_labels": "t10k-labels-idx1-ubyte",
    }
    for part, array in arrays.items():
        write_idx(directory / names[part], array, gz=gz)
    return arrays


def dump_pickle(path: Path, content: object, *, numpy_core_name: str = "numpy._core") -> None:
    """Protocol 2, as the original (Python 2 era) CIFAR files; optionally naming numpy's array
    reconstruction ``numpy.core.multiarray`` like files pickled with numpy 1.x."""
    data = pickle.dumps(content, protocol=2)
    if numpy_core_name != "numpy._core":
        data = data.replace(b"numpy._core.multiarray\n", f"{numpy_core_name}.multiarray\n".encode())
    path.write_bytes(data)


def write_cifar(
    root: Path,
    num_classes: int = 10,
    *,
    per_class_train: int = 3,
    per_class_test: int = 2,
    seed: int = 0,
    numpy_core_name: str = "numpy._core",
) -> dict[str, np.ndarray]:
    """CIFAR python-version files: cifar-10-batches-py (5 data batches) or cifar-100-python."""
    rng = np.random.default_rng(seed)
    n_train, n_test = per_class_train * num_classes, per_class_test * num_classes
    x_train = rng.integers(0, 256, (n_train, 3072), dtype=np.uint8)
    y_train = rng.permutation(np.repeat(np.arange(num_classes), per_class_train))
    x_test = rng.integers(0, 256, (n_test, 3072), dtype=np.uint8)
    y_test = np.repeat(np.arange(num_classes), per_class_test)
    names = [f"name_{k}" for k in range(num_classes)]

    def dump(path: Path, content: object) -> None:
        dump_pickle(path, content, numpy_core_name=numpy_core_name)

    if num_classes == 10:
        folder = root / "cifar-10-batches-py"
        folder.mkdir(parents=True)
        for i, rows in enumerate(np.array_split(np.arange(n_train), 5), start=1):
            dump(
                folder / f"data_batch_{i}",
                {
                    "batch_label": f"training batch {i} of 5",
                    "labels": [int(v) for v in y_train[rows]],
                    "data": x_train[rows],
                    "filenames": [f"img_{j}.png" for j in rows],
                },
            )
        dump(
            folder / "test_batch",
            {
                "batch_label": "testing batch 1 of 1",
                "labels": [int(v) for v in y_test],
                "data": x_test,
                "filenames": [f"test_{j}.png" for j in range(n_test)],
            },
        )
        dump(
            folder / "batches.meta",
            {"num_cases_per_batch": n_train // 5, "label_names": names, "num_vis": 3072},
        )
    else:
        folder = root / "cifar-100-python"
        folder.mkdir(parents=True)
        for split, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
            dump(
                folder / split,
                {
                    "filenames": [f"{split}_{j}.png" for j in range(len(y))],
                    "batch_label": f"{split} batch",
                    "fine_labels": [int(v) for v in y],
                    "coarse_labels": [int(v) // 5 for v in y],
                    "data": x,
                },
            )
        dump(
            folder / "meta",
            {"fine_label_names": names, "coarse_label_names": [f"c{k}" for k in range(20)]},
        )
    return {"x_train": x_train, "y_train": y_train, "x_test": x_test, "y_test": y_test}


def write_image_folder(
    root: Path,
    classes: Sequence[str] = ("cat", "dog", "emu"),
    *,
    per_class: int = 2,
    splits: Sequence[str] = ("train", "val"),
    size: tuple[int, int] = (12, 10),
) -> dict[str, list[tuple[Path, tuple[int, int, int]]]]:
    """root/<split>/<class>/<i>.png|.jpg, each image one solid colour (alternating PNG / JPEG)."""
    from PIL import Image

    written: dict[str, list[tuple[Path, tuple[int, int, int]]]] = {}
    for split in splits:
        written[split] = []
        for k, name in enumerate(classes):
            directory = root / split / name
            directory.mkdir(parents=True)
            for i in range(per_class):
                colour = (40 * k + 10, 200 - 30 * i, 90)
                suffix = "png" if i % 2 == 0 else "jpg"
                path = directory / f"{i}.{suffix}"
                Image.new("RGB", size, colour).save(path)
                written[split].append((path, colour))
    return written
