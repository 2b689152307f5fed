"""Tiny data and sweep specifications for the sweep and tune tests."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from helpers import write_spread_npz


def write_npz(path: Path, *, num_classes: int = 4, dim: int = 8, train_per_class: int = 40,
              test_per_class: int = 15, seed: int = 0) -> Path:
    """Gaussian classes of growing spread in the ``arrays`` format (the engine tests' data, 8-D)."""
    return write_spread_npz(path, num_classes=num_classes, dim=dim, train_per_class=train_per_class,
                            test_per_class=test_per_class, seed=seed, drop_last_test=False)


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
