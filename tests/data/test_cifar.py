"""CIFAR python-format reader and the long-tailed subsampling."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from mr2.config import DataSection
from mr2.data import DatasetError, build_datasets, errors
from mr2.data.cifar import (
    load_cifar,
    long_tailed_counts,
    long_tailed_indices,
    read_cifar_pickle,
)


@pytest.mark.parametrize("numpy_core_name", ["numpy._core", "numpy.core"])
def test_cifar10_round_trip(tmp_path: Path, write_cifar, numpy_core_name: str) -> None:
    written = write_cifar(tmp_path, 10, numpy_core_name=numpy_core_name)
    data = load_cifar(tmp_path, 10)

    assert data.x_train.shape == (30, 3, 32, 32) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (20, 3, 32, 32)
    assert data.y_train.tolist() == written["y_train"].tolist()
    assert data.y_test.tolist() == written["y_test"].tolist()
    assert data.class_names == [f"name_{k}" for k in range(10)]
    # Row layout: 1024 red values, then green, then blue, each a row-major 32x32 plane.
    for i, channel, row, col in [(0, 0, 0, 0), (7, 1, 5, 31), (29, 2, 31, 3)]:
        flat = written["x_train"][i, channel * 1024 + row * 32 + col]
        assert int(data.x_train[i, channel, row, col]) == int(flat)
    assert np.array_equal(data.x_test.reshape(20, -1).numpy(), written["x_test"])


def test_cifar100_round_trip(tmp_path: Path, write_cifar) -> None:
    written = write_cifar(tmp_path, 100, per_class_train=2, per_class_test=1)
    data = load_cifar(tmp_path / "cifar-100-python", 100)  # the folder itself is accepted too
    assert data.x_train.shape == (200, 3, 32, 32)
    assert np.array_equal(data.x_train.reshape(200, -1).numpy(), written["x_train"])
    assert data.y_train.tolist() == written["y_train"].tolist()
    assert data.y_test.tolist() == list(range(100))
    assert data.num_classes == 100 and data.class_names[42] == "name_42"


def test_missing_files(tmp_path: Path, write_cifar) -> None:
    with pytest.raises(DatasetError) as caught:
        load_cifar(tmp_path, 100)
    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'cifar-100-python' / 'train'} not found")
    assert "cifar-100-python.tar.gz" in message and "download: true" in message

    write_cifar(tmp_path, 10)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DatasetError, match="data_batch_4 not found"):
        load_cifar(tmp_path, 10)


def test_truncated_pickle(tmp_path: Path, write_cifar) -> None:
    write_cifar(tmp_path, 10)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_2"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(DatasetError) as caught:
        load_cifar(tmp_path, 10)
    assert str(caught.value).startswith(f"{path}: not a readable CIFAR pickle (")
    assert caught.value.path == str(path)


def test_refuses_arbitrary_globals(tmp_path: Path) -> None:
    path = tmp_path / "data_batch_1"
    # GLOBAL 'builtins eval', then calls it: a pickle that would run code when unpickled.
    path.write_bytes(b"cbuiltins\neval\n(S'1 + 1'\ntR.")
    with pytest.raises(DatasetError) as caught:
        read_cifar_pickle(path)
    assert str(caught.value) == errors.UNSAFE_PICKLE.format(
        path=path, global_name="builtins.eval"
    )


def test_not_a_dict(tmp_path: Path) -> None:
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    with pytest.raises(DatasetError, match="holds a list, not a dict"):
        read_cifar_pickle(path)


def test_labels_out_of_range(tmp_path: Path, write_cifar, dump_pickle) -> None:
    write_cifar(tmp_path, 10)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    content = read_cifar_pickle(path)
    content["labels"][3] = 12
    dump_pickle(path, content)
    with pytest.raises(DatasetError) as caught:
        load_cifar(tmp_path, 10)
    assert str(caught.value) == errors.LABELS_OUT_OF_RANGE.format(
        path=path, what="`labels`", num_classes=10, low=0, high=12
    )


def test_bad_data_array(tmp_path: Path, write_cifar, dump_pickle) -> None:
    write_cifar(tmp_path, 10)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    content = read_cifar_pickle(path)
    content["data"] = content["data"][:, :3000]
    dump_pickle(path, content)
    with pytest.raises(DatasetError) as caught:
        load_cifar(tmp_path, 10)
    assert str(caught.value) == errors.CIFAR_BAD_ARRAY.format(
        path=path, dtype=np.dtype(np.uint8), shape=(6, 3000)
    )


def test_label_count_mismatch(tmp_path: Path, write_cifar, dump_pickle) -> None:
    write_cifar(tmp_path, 10)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    content = read_cifar_pickle(path)
    content["labels"] = content["labels"][:-1]
    dump_pickle(path, content)
    with pytest.raises(DatasetError, match=r"`labels` has 5 samples but 6 were expected"):
        load_cifar(tmp_path, 10)


def test_wrong_number_of_class_names(tmp_path: Path, write_cifar, dump_pickle) -> None:
    write_cifar(tmp_path, 10)
    path = tmp_path / "cifar-10-batches-py" / "batches.meta"
    dump_pickle(path, {"label_names": ["a", "b"]})
    with pytest.raises(DatasetError) as caught:
        load_cifar(tmp_path, 10)
    assert str(caught.value) == errors.CLASS_NAMES_MISMATCH.format(
        path=path, found=2, expected=10
    )


def test_empty_class(tmp_path: Path, write_cifar, dump_pickle) -> None:
    write_cifar(tmp_path, 10, per_class_train=1)
    folder = tmp_path / "cifar-10-batches-py"
    for i in range(1, 6):
        content = read_cifar_pickle(folder / f"data_batch_{i}")
        content["labels"] = [0 if v == 7 else v for v in content["labels"]]
        dump_pickle(folder / f"data_batch_{i}", content)
    with pytest.raises(DatasetError) as caught:
        load_cifar(tmp_path, 10)
    assert str(caught.value) == errors.EMPTY_CLASSES.format(
        path=folder, classes="7 (name_7)", num_classes=10
    )


def _ldam_counts(n_max: int, num_classes: int, imbalance_factor: float) -> list[int]:
    """The reference rule (Cao et al.'s IMBALANCECIFAR10.get_img_num_per_cls), as a loop."""
    ratio = 1.0 / imbalance_factor
    return [int(n_max * ratio ** (k / (num_classes - 1.0))) for k in range(num_classes)]


@pytest.mark.parametrize("num_classes,n_max", [(10, 5000), (100, 500)])
@pytest.mark.parametrize("imbalance_factor", [1.0, 10.0, 50.0, 100.0, 200.0])
def test_long_tailed_counts_match_reference(
    num_classes: int, n_max: int, imbalance_factor: float
) -> None:
    counts = long_tailed_counts(n_max, num_classes, imbalance_factor)
    assert counts.dtype == torch.int64
    assert counts.tolist() == _ldam_counts(n_max, num_classes, imbalance_factor)


def test_long_tailed_known_sizes() -> None:
    # The published training-set sizes of CIFAR-10-LT and CIFAR-100-LT at imbalance factor 100.
    assert int(long_tailed_counts(5000, 10, 100.0).sum()) == 12406
    assert int(long_tailed_counts(500, 100, 100.0).sum()) == 10847
    assert long_tailed_counts(7, 1, 100.0).tolist() == [7]
    with pytest.raises(ValueError, match="imbalance_factor"):
        long_tailed_counts(10, 3, 0.5)


def test_long_tailed_indices_take_first_of_each_class_in_seeded_permutation() -> None:
    targets = torch.arange(5).repeat(40)[torch.randperm(200, generator=torch.Generator().manual_seed(1))]
    subset = long_tailed_indices(targets, 8.0, seed=3)
    expected_counts = long_tailed_counts(40, 5, 8.0)
    assert torch.bincount(targets[subset], minlength=5).tolist() == expected_counts.tolist()
    assert torch.equal(subset, torch.sort(subset).values)
    # Oracle: walk the same permutation, keep a sample while its class has room.
    permutation = torch.randperm(200, generator=torch.Generator().manual_seed(3))
    taken = [0] * 5
    oracle = []
    for index in permutation.tolist():
        k = int(targets[index])
        if taken[k] < int(expected_counts[k]):
            taken[k] += 1
            oracle.append(index)
    assert subset.tolist() == sorted(oracle)
    assert torch.equal(subset, long_tailed_indices(targets, 8.0, seed=3))
    assert not torch.equal(subset, long_tailed_indices(targets, 8.0, seed=4))


def test_build_datasets_cifar10_long_tailed(tmp_path: Path, write_cifar) -> None:
    written = write_cifar(tmp_path, 10, per_class_train=20)
    config = DataSection(
        "cifar10", root=str(tmp_path), val_fraction=0.1, imbalance_factor=10.0, split_seed=5
    )
    bundle = build_datasets(config)
    kept = long_tailed_counts(20, 10, 10.0)
    total = bundle.train_class_counts + bundle.val.class_counts(10)
    assert total.tolist() == kept.tolist()
    assert bundle.test.class_counts(10).tolist() == [2] * 10  # the test split stays balanced
    train_sources = set(bundle.train.source_indices.tolist())
    assert train_sources.isdisjoint(bundle.val.source_indices.tolist())
    assert bundle.input_shape == (3, 32, 32) and bundle.regime == "cifar"
    image, target, index = bundle.train[0]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32 and index == 0
    assert target == int(written["y_train"][int(bundle.train.source_indices[0])])


def test_cifar_needs_root() -> None:
    with pytest.raises(DatasetError) as caught:
        build_datasets(DataSection("cifar100"))
    assert str(caught.value) == errors.ROOT_REQUIRED.format(
        name="cifar100", what="the directory holding cifar-100-python/"
    )
