"""Simulated trials of ``mr2.tune.tune`` (a training function without training) and the small
``mr2 tune --config`` run configuration, shared by the tune tests (they were imported from test
modules)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import yaml

from helpers.sweeps import write_npz
from mr2.tune import Candidate, Predictions, TrialPredictions

#: The simulated tune's classes, samples per class, and its validation and test labels.
K = 6
PER_CLASS = 60
Y_VAL = np.repeat(np.arange(K), PER_CLASS)
Y_TEST = np.repeat(np.arange(K), PER_CLASS)[::-1].copy()
#: Per-class probability of a correct prediction: ERM's, and what logit_only adds on the hard classes.
BASE = np.array([0.95, 0.9, 0.85, 0.6, 0.5, 0.4])
LIFT = {"mr2-logit_only-c1": np.array([0.0, 0.0, 0.0, 0.2, 0.25, 0.3])}


def predict(y: np.ndarray, label: str, seed: int, split: str) -> np.ndarray:
    """A candidate's simulated predictions of ``y`` on one seed and split (the same every call)."""
    rng = np.random.default_rng([zlib.crc32(label.encode()), seed, len(split)])
    p = np.clip(BASE + LIFT.get(label, 0.0), 0, 1)[y]
    return np.where(rng.random(y.size) < p, y, (y + 1) % K)


def simulated(candidate: Candidate, seed: int) -> TrialPredictions:
    """A training function without training: predictions drawn per (candidate, seed)."""
    assert candidate.make_loss().spec == candidate.loss_spec()  # the loss is buildable here
    return TrialPredictions(val=Predictions(Y_VAL, y_pred=predict(Y_VAL, candidate.label, seed, "val")),
                            test={"y_true": Y_TEST, "y_pred": predict(Y_TEST, candidate.label, seed, "test")})


#: Classes of the ``--config`` tunes' data.
ENGINE_CLASSES = 6


def engine_config(tmp: Path, **data: object) -> Path:
    """A small run configuration for ``mr2 tune --config`` (an MLP on Gaussian classes, 3 epochs on the
    CPU), written to ``tmp/run.yaml``; ``data``: keys of its ``data`` section."""
    npz = write_npz(tmp / "data.npz", num_classes=ENGINE_CLASSES, dim=8, train_per_class=48, test_per_class=20)
    config = {
        "data": {"name": "arrays", "root": str(npz), "val_fraction": 0.25, "batch_size": 32,
                 "eval_batch_size": 256, **data},
        "model": {"name": "mlp", "options": {"hidden_dims": [32]}},
        "optim": {"name": "sgd", "lr": 0.05, "epochs": 3},
        "device": "cpu",
        "deterministic": True,
        "log_every": 5,
    }
    file = tmp / "run.yaml"
    file.write_text(yaml.safe_dump(config))
    return file
