"""Tiny real data files and configs for engine tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def write_spread_npz(path: Path, *, num_classes: int = 4, dim: int = 12, train_per_class: int = 40,
                     test_per_class: int = 15, seed: int = 0, drop_last_test: bool = True) -> Path:
    """Gaussian classes of growing spread saved as an .npz in the arrays format (x_train, y_train,
    x_test, y_test); ``drop_last_test`` leaves one test sample out (a test set of unequal classes)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_classes, dim)) * 2.0
    def draw(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(num_classes), per_class)
        x = centers[y] + rng.normal(size=(len(y), dim)) * (0.5 + 0.5 * y[:, None])
        order = rng.permutation(len(y))
        return x[order].astype(np.float32), y[order].astype(np.int64)
    x_train, y_train = draw(train_per_class)
    x_test, y_test = draw(test_per_class)
    end = -1 if drop_last_test else None
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test[:end], y_test=y_test[:end])
    return path


@pytest.fixture
def spread_npz(tmp_path: Path) -> Path:
    return write_spread_npz(tmp_path / "spread.npz")


def base_config(npz: Path, out: Path, **sections: dict) -> dict:
    config = {
        "name": "run",
        "output_dir": str(out),
        "seed": 0,
        "log_every": 5,
        "data": {"name": "arrays", "root": str(npz), "val_fraction": 0.2, "batch_size": 16,
                 "eval_batch_size": 32},
        "model": {"name": "mlp", "options": {"hidden_dims": [32, 16]}},
        "method": {"name": "mr2"},
        "optim": {"name": "sgd", "lr": 0.05, "epochs": 3, "warmup_epochs": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config
