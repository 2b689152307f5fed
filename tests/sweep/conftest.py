"""Tiny data and sweep specifications for the sweep tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np


def write_npz(path: Path, *, num_classes: int = 4, dim: int = 8, train_per_class: int = 40,
              test_per_class: int = 15, seed: int = 0) -> Path:
    """Gaussian classes of growing spread in the ``arrays`` format (x_train, y_train, x_test, y_test)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_classes, dim)) * 2.0

    def draw(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(num_classes), per_class)
        x = centers[y] + rng.normal(size=(len(y), dim)) * (0.5 + 0.5 * y[:, None])
        order = rng.permutation(len(y))
        return x[order].astype(np.float32), y[order].astype(np.int64)

    x_train, y_train = draw(train_per_class)
    x_test, y_test = draw(test_per_class)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def sweep_dict(npz: Path, output_dir: Path, **changes: Any) -> dict[str, Any]:
    """A small sweep over the .npz: ERM and MR2 at two c_bar values, two seeds, two workers."""
    spec: dict[str, Any] = {
        "name": "tiny",
        "output_dir": str(output_dir),
        "base": {
            "data": {"name": "arrays", "root": str(npz), "val_fraction": 0.25, "batch_size": 32,
                     "eval_batch_size": 64},
            "model": {"name": "mlp", "options": {"hidden_dims": [32, 16]}},
            "optim": {"name": "sgd", "lr": 0.05, "epochs": 2},
            "device": "cpu",
            "log_every": 5,
        },
        "methods": {"erm": {}, "mr2": {"method.options.c_bar": [0.5, 2.0]}},
        "seeds": [0, 1],
        "reference": "erm",
        "workers": 2,
        "report": {"bootstrap": 20, "plots": False},
    }
    spec = copy.deepcopy(spec)
    spec.update(changes)
    return spec
