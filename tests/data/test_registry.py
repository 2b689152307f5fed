"""build_datasets: the (input, target, index) contract, splits, counts, and the synthetic set."""

from __future__ import annotations

import pickle

import pytest
import torch
from torch.utils.data import DataLoader

from mr2.config import DataSection
from mr2.data import DATASETS, DatasetError, build_datasets, errors
from mr2.data.synthetic import default_spreads, make_synthetic

_SMALL = {"num_classes": 4, "dim": 6, "train_per_class": 25, "test_per_class": 5}


def _bundle(**overrides):
    config = DataSection("synthetic", options=dict(_SMALL), **overrides)
    return build_datasets(config)


def test_items_are_input_target_index() -> None:
    bundle = _bundle(val_fraction=0.2)
    data = make_synthetic(**_SMALL)
    assert (len(bundle.train), len(bundle.val), len(bundle.test)) == (80, 20, 20)
    for split in (bundle.train, bundle.val, bundle.test):
        for position in range(len(split)):
            inputs, target, index = split[position]
            assert index == position and isinstance(target, int)
    for position in range(len(bundle.train)):
        inputs, target, _ = bundle.train[position]
        source = int(bundle.train.source_indices[position])
        assert torch.equal(inputs, data.x_train[source])
        assert target == int(data.y_train[source])
    assert bundle.train[-1][2] == len(bundle.train) - 1
    with pytest.raises(IndexError):
        bundle.train[len(bundle.train)]


def test_bundle_metadata() -> None:
    bundle = _bundle(val_fraction=0.2)
    assert bundle.num_classes == 4 and bundle.class_names == [f"class_{k}" for k in range(4)]
    assert bundle.train_class_counts.dtype == torch.int64
    assert bundle.train_class_counts.tolist() == [20, 20, 20, 20]
    expected = torch.bincount(bundle.train.targets, minlength=4)
    assert torch.equal(bundle.train_class_counts, expected)
    assert bundle.input_shape == tuple(bundle.train[0][0].shape) == (6,)
    train = set(bundle.train.source_indices.tolist())
    val = set(bundle.val.source_indices.tolist())
    assert not train & val and train | val == set(range(100))


def test_loader_batches() -> None:
    bundle = _bundle()
    loader = DataLoader(bundle.train, batch_size=16, shuffle=True)
    inputs, target, index = next(iter(loader))
    assert inputs.shape == (16, 6) and inputs.dtype == torch.float32
    assert target.dtype == index.dtype == torch.int64
    assert torch.equal(bundle.train.targets[index], target)


def test_splits_pickle_for_loader_workers(tmp_path, write_image_folder) -> None:
    write_image_folder(tmp_path)
    image_bundle = build_datasets(DataSection("image_folder", root=str(tmp_path), image_size=8))
    for split in (_bundle().train, image_bundle.test):
        copy = pickle.loads(pickle.dumps(split))
        assert torch.equal(copy.targets, split.targets)
        assert torch.equal(copy[1][0], split[1][0])


def test_same_config_same_splits_other_seed_other_split() -> None:
    first, second = _bundle(split_seed=3), _bundle(split_seed=3)
    assert torch.equal(first.train.source_indices, second.train.source_indices)
    assert not torch.equal(first.train.source_indices, _bundle(split_seed=4).train.source_indices)


def test_long_tail_on_any_data_set() -> None:
    bundle = _bundle(imbalance_factor=5.0, val_fraction=0.0)
    assert bundle.train_class_counts.tolist() == [25, 14, 8, 5]
    assert bundle.test.class_counts(4).tolist() == [5, 5, 5, 5]


def test_long_tail_that_empties_a_class() -> None:
    config = DataSection(
        "synthetic",
        imbalance_factor=100.0,
        options={"num_classes": 3, "train_per_class": 20, "test_per_class": 2},
    )
    with pytest.raises(DatasetError, match=r"class\(es\) 2 \(class_2\) have no training samples"):
        build_datasets(config)


def test_unknown_name_and_bad_fraction() -> None:
    with pytest.raises(DatasetError) as caught:
        build_datasets(DataSection("mnist-ish"))
    assert str(caught.value) == errors.UNKNOWN_DATASET.format(
        name="mnist-ish", choices=", ".join(sorted(DATASETS))
    )
    with pytest.raises(ValueError, match="val_fraction"):
        build_datasets(DataSection("synthetic", val_fraction=1.0))


def test_synthetic_is_deterministic_and_spreads_differ() -> None:
    first = make_synthetic(num_classes=3, dim=50, train_per_class=400, seed=1)
    again = make_synthetic(num_classes=3, dim=50, train_per_class=400, seed=1)
    other = make_synthetic(num_classes=3, dim=50, train_per_class=400, seed=2)
    assert torch.equal(first.x_train, again.x_train) and torch.equal(first.x_test, again.x_test)
    assert not torch.equal(first.x_train, other.x_train)
    spreads = default_spreads(3)
    for k in range(3):
        x = first.x_train[first.y_train == k].double()
        measured = (x - x.mean(0)).pow(2).sum(1).mean().div(50).sqrt()
        assert abs(float(measured) - float(spreads[k])) < 0.05 * float(spreads[k])
        assert abs(float(x.mean(0).norm()) - 4.0) < 0.2


def test_synthetic_custom_spreads_and_validation() -> None:
    data = make_synthetic(num_classes=2, dim=3, spreads=[0.1, 3.0], train_per_class=5)
    assert data.x_train.dtype == torch.float32 and data.class_names == ["class_0", "class_1"]
    with pytest.raises(ValueError, match="spreads must be 2 positive numbers"):
        make_synthetic(num_classes=2, spreads=[1.0, -1.0])


def test_precomputed_items_equal_per_item_transform():
    import torch
    from torchvision.transforms import v2

    from mr2.data.indexed import IndexedDataset
    from mr2.data.sources import InMemoryDataset

    images = torch.randint(0, 256, (9, 1, 4, 4), dtype=torch.uint8)
    source = InMemoryDataset(images, torch.arange(9) % 3)
    transform = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize([0.3], [0.2])])
    fast = IndexedDataset(source, source.targets, torch.tensor([8, 2, 5]), transform, precompute=True)
    slow = IndexedDataset(source, source.targets, torch.tensor([8, 2, 5]), transform)
    assert fast.precomputed is not None and slow.precomputed is None
    for i in range(3):
        assert torch.equal(fast[i][0], slow[i][0]) and fast[i][1:] == slow[i][1:]
