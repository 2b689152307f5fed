"""``data.options`` (``DataSection.options``): every data set names the keys it takes; any other key, an
unknown regime or a refused value is a DatasetError before any file is read."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mr2.config import DataSection
from mr2.data import DATASETS, DatasetError, build_datasets, errors
from mr2.data.registry import DatasetEntry, register_dataset, valid_options
from mr2.data.synthetic import make_synthetic

_SYNTHETIC = {"data_seed", "dim", "num_classes", "separation", "spreads", "test_per_class", "train_per_class"}
#: Written out by hand from what the loaders and the transforms read (not from the registry).
EXPECTED_OPTIONS = {
    "fashion_mnist": {"mean", "std", "mnist_crop"},
    "cifar10": {"mean", "std"},
    "cifar100": {"mean", "std"},
    "imagenet": {"mean", "std"},
    "image_folder": {"regime", "mean", "std", "mnist_crop"},
    "oxford_pets": {"mean", "std"},
    "stanford_cars": {"mean", "std"},
    "flowers102": {"mean", "std"},
    "food101": {"mean", "std"},
    "fgvc_aircraft": {"mean", "std", "annotation_level"},
    "arrays": {"regime", "mean", "std", "mnist_crop"},
    "synthetic": _SYNTHETIC,
}


def test_every_data_set_lists_its_options() -> None:
    assert set(DATASETS) == set(EXPECTED_OPTIONS)
    for name, entry in DATASETS.items():
        assert valid_options(entry) == EXPECTED_OPTIONS[name], name


@pytest.mark.parametrize("name", sorted(EXPECTED_OPTIONS))
def test_a_typo_is_refused_before_any_file_is_read(name: str, tmp_path: Path) -> None:
    # The root does not exist: the option error must come first.
    config = DataSection(name, root=str(tmp_path / "absent"), options={"mean": [0.5], "meen": [0.5]})
    if "mean" not in EXPECTED_OPTIONS[name]:
        config.options = {"num_classes": 3, "meen": [0.5]}
    with pytest.raises(DatasetError) as caught:
        build_datasets(config)
    assert str(caught.value) == errors.UNKNOWN_DATA_OPTIONS.format(
        name=name, keys="'meen'", valid=", ".join(sorted(EXPECTED_OPTIONS[name]))
    )


def test_synthetic_typo_names_every_bad_key() -> None:
    with pytest.raises(DatasetError) as caught:
        build_datasets(DataSection("synthetic", options={"dimm": 4, "num_classes": 3, "seed": 1}))
    assert str(caught.value) == errors.UNKNOWN_DATA_OPTIONS.format(
        name="synthetic", keys="'dimm', 'seed'", valid=", ".join(sorted(_SYNTHETIC))
    )
    # The transform's options do nothing on synthetic features (regime none): refused too.
    with pytest.raises(DatasetError, match=r"has no option\(s\) 'mean'"):
        build_datasets(DataSection("synthetic", options={"mean": [0.0]}))


def test_every_valid_synthetic_option_is_used() -> None:
    extra = {"num_classes": 2, "dim": 3, "train_per_class": 10, "test_per_class": 4,
             "spreads": [0.5, 1.0], "separation": 2.0, "data_seed": 7}
    bundle = build_datasets(DataSection("synthetic", options=extra, val_fraction=0.0))
    data = make_synthetic(2, 3, train_per_class=10, test_per_class=4, spreads=[0.5, 1.0], separation=2.0, seed=7)
    assert bundle.input_shape == (3,) and len(bundle.train) == 20 and len(bundle.test) == 8
    for position in range(len(bundle.test)):
        assert bundle.test[position][0].equal(data.x_test[position])


def test_refused_values_are_data_set_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as caught:
        build_datasets(DataSection("synthetic", options={"num_classes": 2, "spreads": [1.0, -1.0]}))
    assert str(caught.value) == errors.BAD_DATA_OPTION.format(
        name="synthetic", error="spreads must be 2 positive numbers, got [1.0, -1.0]"
    )
    rng = np.random.default_rng(0)
    path = tmp_path / "features.npz"
    np.savez(path, x_train=rng.normal(size=(6, 2)), y_train=np.arange(6) % 2,
             x_test=rng.normal(size=(2, 2)), y_test=np.arange(2))
    with pytest.raises(DatasetError) as caught:
        build_datasets(DataSection("arrays", root=str(path), options={"regime": "mnsit"}))
    assert str(caught.value) == errors.UNKNOWN_REGIME.format(
        regime="mnsit", name="arrays", choices="mnist, cifar, imagenet, none"
    )


def test_a_registered_data_set_declares_its_options() -> None:
    def load(config: DataSection):  # type: ignore[no-untyped-def]
        return make_synthetic(2, 3, train_per_class=5, test_per_class=2, seed=int(config.options["shift"])).to_sources()

    register_dataset("toy_with_shift", DatasetEntry(load, "none", options=frozenset({"shift"})))
    try:
        assert len(build_datasets(DataSection("toy_with_shift", options={"shift": 3})).test) == 4
        with pytest.raises(DatasetError, match=r"has no option\(s\) 'shfit'; its options are: shift\."):
            build_datasets(DataSection("toy_with_shift", options={"shfit": 3}))
    finally:
        del DATASETS["toy_with_shift"]
