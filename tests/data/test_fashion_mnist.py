"""Fashion-MNIST IDX reader: round trips in the exact format (gzipped and plain) and bad files."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from mr2.config import DataSection
from mr2.data import DatasetError, build_datasets, errors
from mr2.data.fashion_mnist import (
    DEFAULT_FASHION_MNIST_ROOT,
    FASHION_MNIST_CLASSES,
    IDX_IMAGES_MAGIC,
    IDX_LABELS_MAGIC,
    find_fashion_mnist_files,
    load_fashion_mnist,
    read_idx,
)


@pytest.mark.parametrize("gz", [True, False])
def test_read_idx_round_trip(tmp_path: Path, write_idx, gz: bool) -> None:
    images = np.random.default_rng(0).integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = np.array([3, 0, 9, 9, 1], dtype=np.uint8)
    images_path = write_idx(tmp_path / "images", images, gz=gz)
    labels_path = write_idx(tmp_path / "labels", labels, gz=gz)
    assert images_path.name.endswith(".gz") == gz

    read_images = read_idx(images_path, IDX_IMAGES_MAGIC)
    read_labels = read_idx(labels_path, IDX_LABELS_MAGIC)
    assert read_images.dtype == torch.uint8 and read_images.shape == (5, 28, 28)
    assert np.array_equal(read_images.numpy(), images)
    assert read_labels.tolist() == [3, 0, 9, 9, 1]


def test_read_idx_multibyte_big_endian(tmp_path: Path, write_idx) -> None:
    values = np.array([[1, -2, 70000], [2**30, 0, -(2**31)]], dtype=np.int32)
    path = write_idx(tmp_path / "ints", values, gz=False)
    assert path.read_bytes()[:4] == bytes([0, 0, 0x0C, 2])
    read = read_idx(path, 0x00000C02)
    assert read.dtype == torch.int32
    assert read.tolist() == values.tolist()


def test_gzip_detected_by_content_not_name(tmp_path: Path, write_idx) -> None:
    labels = np.array([1, 2, 3], dtype=np.uint8)
    gz_path = write_idx(tmp_path / "labels", labels, gz=True)
    renamed = gz_path.rename(tmp_path / "labels-without-suffix")
    assert read_idx(renamed, IDX_LABELS_MAGIC).tolist() == [1, 2, 3]


@pytest.mark.parametrize("layout", ["flat-gz", "flat-plain", "torchvision-raw"])
def test_load_fashion_mnist_from_root(tmp_path: Path, write_fashion_mnist, layout: str) -> None:
    directory = tmp_path / "FashionMNIST" / "raw" if layout == "torchvision-raw" else tmp_path
    written = write_fashion_mnist(directory, gz=layout != "flat-plain")

    data = load_fashion_mnist(tmp_path)

    assert data.x_train.shape == (30, 1, 28, 28) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (20, 1, 28, 28)
    assert np.array_equal(data.x_train[:, 0].numpy(), written["train_images"])
    assert np.array_equal(data.x_test[:, 0].numpy(), written["test_images"])
    assert data.y_train.dtype == torch.int64
    assert data.y_train.tolist() == written["train_labels"].tolist()
    assert data.y_test.tolist() == written["test_labels"].tolist()
    assert data.class_names == FASHION_MNIST_CLASSES and data.num_classes == 10
    assert data.source == str(directory)


def test_plain_file_found_when_no_gz(tmp_path: Path, write_fashion_mnist) -> None:
    write_fashion_mnist(tmp_path, gz=False)
    files = find_fashion_mnist_files(tmp_path)
    assert files["train_images"] == tmp_path / "train-images-idx3-ubyte"


def test_missing_files_say_how_to_obtain(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(tmp_path / "nowhere")
    message = str(caught.value)
    assert "train-images-idx3-ubyte" in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "download: true" in message
    assert str(tmp_path / "nowhere") in message


def test_download_needs_a_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import mr2.data.fashion_mnist as module

    monkeypatch.setattr(module, "DEFAULT_FASHION_MNIST_ROOT", tmp_path / "absent")
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(None, download=True)
    assert str(caught.value) == errors.DOWNLOAD_NEEDS_ROOT.format(name="Fashion-MNIST")


def _labels_file(tmp_path: Path) -> Path:
    return tmp_path / "train-labels-idx1-ubyte.gz"


def test_wrong_magic_number(tmp_path: Path, write_fashion_mnist, write_idx) -> None:
    written = write_fashion_mnist(tmp_path)
    # An image file whose header says "labels" (0x801).
    write_idx(
        tmp_path / "train-images-idx3-ubyte",
        written["train_images"].reshape(-1),
        gz=True,
        magic=IDX_LABELS_MAGIC,
    )
    path = tmp_path / "train-images-idx3-ubyte.gz"
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(tmp_path)
    assert str(caught.value) == errors.IDX_BAD_MAGIC.format(
        path=path, found=IDX_LABELS_MAGIC, expected=IDX_IMAGES_MAGIC, kind="image"
    )
    assert caught.value.path == str(path)


def test_not_an_idx_file(tmp_path: Path) -> None:
    path = tmp_path / "labels"
    path.write_bytes(b"PK\x03\x04 something else")
    with pytest.raises(DatasetError, match=r"magic number 0x504B0304"):
        read_idx(path, IDX_LABELS_MAGIC)


def test_truncated_plain_file(tmp_path: Path, write_fashion_mnist) -> None:
    write_fashion_mnist(tmp_path, gz=False)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(tmp_path)
    assert str(caught.value) == errors.IDX_TRUNCATED.format(
        path=path, shape=(20, 28, 28), expected=20 * 28 * 28, found=20 * 28 * 28 - 100
    )


def test_truncated_header(tmp_path: Path) -> None:
    path = tmp_path / "images"
    path.write_bytes(struct.pack(">II", IDX_IMAGES_MAGIC, 5))  # two of three sizes missing
    with pytest.raises(DatasetError, match="truncated IDX file"):
        read_idx(path, IDX_IMAGES_MAGIC)


def test_truncated_gzip(tmp_path: Path, write_fashion_mnist) -> None:
    write_fashion_mnist(tmp_path, gz=True)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(tmp_path)
    assert str(caught.value).startswith(f"{path}: cannot decompress")
    assert "re-download" in str(caught.value)


def test_trailing_bytes(tmp_path: Path) -> None:
    path = tmp_path / "labels.gz"
    path.write_bytes(gzip.compress(struct.pack(">II", IDX_LABELS_MAGIC, 2) + b"\x01\x02\x03"))
    with pytest.raises(DatasetError) as caught:
        read_idx(path, IDX_LABELS_MAGIC)
    assert str(caught.value) == errors.IDX_TRAILING_BYTES.format(
        path=path, extra=1, expected=2, shape=(2,)
    )


def test_labels_out_of_range(tmp_path: Path, write_fashion_mnist, write_idx) -> None:
    written = write_fashion_mnist(tmp_path)
    labels = written["train_labels"].copy()
    labels[4] = 10
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels, gz=True)
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(tmp_path)
    assert str(caught.value) == errors.LABELS_OUT_OF_RANGE.format(
        path=_labels_file(tmp_path), what="labels", num_classes=10, low=0, high=10
    )


def test_label_count_differs_from_image_count(
    tmp_path: Path, write_fashion_mnist, write_idx
) -> None:
    written = write_fashion_mnist(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte", written["train_labels"][:-1], gz=True)
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(tmp_path)
    message = str(caught.value)
    assert message.startswith(f"{_labels_file(tmp_path)}: the label file has 29 samples")
    assert "train-images-idx3-ubyte.gz holds 30 images" in message


def test_empty_class(tmp_path: Path, write_fashion_mnist, write_idx) -> None:
    written = write_fashion_mnist(tmp_path)
    labels = written["train_labels"].copy()
    labels[labels == 6] = 0
    write_idx(tmp_path / "train-labels-idx1-ubyte", labels, gz=True)
    with pytest.raises(DatasetError) as caught:
        load_fashion_mnist(tmp_path)
    assert str(caught.value) == errors.EMPTY_CLASSES.format(
        path=_labels_file(tmp_path), classes="6 (Shirt)", num_classes=10
    )


def test_build_datasets_fashion_mnist(tmp_path: Path, write_fashion_mnist) -> None:
    written = write_fashion_mnist(tmp_path, n_train=100)
    bundle = build_datasets(
        DataSection("fashion_mnist", root=str(tmp_path), val_fraction=0.2, augment=False)
    )
    assert (len(bundle.train), len(bundle.val), len(bundle.test)) == (80, 20, 20)
    assert bundle.train_class_counts.tolist() == [8] * 10
    assert bundle.input_shape == (1, 28, 28) and bundle.regime == "mnist"
    image, target, index = bundle.test[3]
    assert (target, index) == (int(written["test_labels"][3]), 3)
    mean, std = 0.2860, 0.3530
    expected = (torch.from_numpy(written["test_images"][3]).float() / 255 - mean) / std
    assert torch.allclose(image[0], expected, atol=1e-5)


_REAL_FILES = [
    DEFAULT_FASHION_MNIST_ROOT / name
    for name in (
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    )
]


@pytest.mark.skipif(
    not all(path.is_file() for path in _REAL_FILES),
    reason=f"the real Fashion-MNIST is not installed in {DEFAULT_FASHION_MNIST_ROOT} "
    "(apt-get install dataset-fashion-mnist)",
)
def test_real_fashion_mnist() -> None:
    bundle = build_datasets(DataSection("fashion_mnist"))
    assert (len(bundle.train), len(bundle.val), len(bundle.test)) == (54000, 6000, 10000)
    assert bundle.train_class_counts.tolist() == [5400] * 10
    assert bundle.class_names[9] == "Ankle boot"
    train, test = bundle.train.source, bundle.test.source  # the arrays as read from disk
    assert train.inputs.shape == (60000, 1, 28, 28) and train.inputs.dtype == torch.uint8
    assert test.inputs.shape == (10000, 1, 28, 28)
    assert torch.bincount(train.targets, minlength=10).tolist() == [6000] * 10
    assert torch.bincount(test.targets, minlength=10).tolist() == [1000] * 10
    # Independent parse of the first label and the last image's bytes.
    with gzip.open(_REAL_FILES[1]) as handle:
        assert struct.unpack(">II", handle.read(8)) == (IDX_LABELS_MAGIC, 60000)
        assert int(train.targets[0]) == handle.read(1)[0]
    with gzip.open(_REAL_FILES[2]) as handle:
        raw = handle.read()
    assert raw[-784:] == test.inputs[-1, 0].numpy().tobytes()
