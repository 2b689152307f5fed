"""``data.train_per_class``: a seeded cap on the training images of every class (small-data regimes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mr2.config import ConfigError, DataSection, config_from_dict
from mr2.data import build_datasets

_SMALL = {"num_classes": 4, "dim": 6, "train_per_class": 25, "test_per_class": 5}


def _bundle(**fields):
    return build_datasets(DataSection("synthetic", options=dict(_SMALL), **fields))


def test_every_class_keeps_at_most_n_and_validation_comes_out_of_them():
    bundle = _bundle(train_per_class=10, val_fraction=0.2)
    # Oracle: count per class by a plain loop over the selected source indices.
    for split, expected in ((bundle.train, 8), (bundle.val, 2)):
        counts = [0, 0, 0, 0]
        for position in range(len(split)):
            counts[split[position][1]] += 1
        assert counts == [expected] * 4
    chosen = torch.cat([bundle.train.source_indices, bundle.val.source_indices])
    assert chosen.unique().numel() == 40  # disjoint
    assert bundle.train_class_counts.tolist() == [8, 8, 8, 8]
    assert len(bundle.test) == 20  # the test split is never capped


def test_the_choice_is_seeded_and_a_cap_above_a_class_keeps_it_whole():
    a = _bundle(train_per_class=10, split_seed=1)
    b = _bundle(train_per_class=10, split_seed=1)
    c = _bundle(train_per_class=10, split_seed=2)
    assert torch.equal(a.train.source_indices, b.train.source_indices)
    assert not torch.equal(a.train.source_indices, c.train.source_indices)
    whole = _bundle(train_per_class=1000, val_fraction=0.0)
    assert len(whole.train) == 100
    assert torch.equal(whole.train.source_indices, _bundle(val_fraction=0.0).train.source_indices)


def test_unequal_classes_are_capped_one_by_one(tmp_path):
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), [3, 12, 30])
    np.savez(tmp_path / "d.npz", x_train=rng.normal(size=(45, 2)).astype(np.float32), y_train=y,
             x_test=rng.normal(size=(3, 2)).astype(np.float32), y_test=np.arange(3))
    bundle = build_datasets(DataSection("arrays", root=str(tmp_path / "d.npz"), val_fraction=0.0,
                                        train_per_class=10))
    assert bundle.train_class_counts.tolist() == [3, 10, 10]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"train_per_class": 1}, "config key 'data.train_per_class': must be null or an integer >= 2"),
        ({"train_per_class": 50, "imbalance_factor": 10.0},
         "config key 'data.train_per_class': cannot be combined with data.imbalance_factor"),
        ({"train_per_class": 2.5}, "config key 'data.train_per_class' must be int or null"),
    ],
)
def test_bad_caps_are_config_errors(data, message):
    with pytest.raises(ConfigError) as caught:
        config_from_dict({"data": data})
    assert str(caught.value).startswith(message)
